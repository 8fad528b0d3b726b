// Unit tests for protocol v1: case lines, the event writer and reader, the line splitter, the
// result's fold into a CaseResult (canary rule, TFLOP/s), and the golden lines that the Python
// probe's tests read and write too (protocol_golden_test.py).
#include "protocol/protocol.hpp"

#include "core/text.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <map>
#include <set>
#include <functional>
#include <limits>
#include <sstream>
#include <unistd.h>

using namespace sdpa_doctor;
using namespace sdpa_doctor::protocol;

namespace {

Case small_case() {
  auto c = parse_case_spec("dtype=fp16,b=1,h=2,l=8,d=16");
  EXPECT_TRUE(c.has_value());
  return *c;
}

std::vector<std::string> golden_lines(const std::string& name) {
  std::istringstream in(sdpa_test::read_file(sdpa_test::source_path("tests/protocol/golden/" + name)));
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  EXPECT_FALSE(out.empty()) << name;
  return out;
}

// Everything written to a pipe by `write`, as lines.
std::vector<std::string> capture(const std::function<void(ProtocolWriter&)>& write) {
  int p[2];
  EXPECT_EQ(::pipe(p), 0);
  {
    ProtocolWriter w(p[1]);
    write(w);
    EXPECT_TRUE(w.ok());
  }
  ::close(p[1]);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) text.append(buf, size_t(n));
  ::close(p[0]);
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    const size_t nl = text.find('\n', start);
    EXPECT_NE(nl, std::string::npos) << "unterminated line";
    out.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return out;
}

} // namespace

// --- golden lines: the same file is read and written by sdpa_probe's test -------------------------

TEST(Golden, EveryEventLineIsReadAndWrittenBackIdentically) {
  std::set<EventKind> seen;
  for (const std::string& line : golden_lines("events.jsonl")) {
    const Event e = parse_event(line);
    seen.insert(e.kind);
    std::string back;
    switch (e.kind) {
    case EventKind::hello: back = hello_line(read_hello(e.body)); break;
    case EventKind::begin: back = begin_line(e.case_id); break;
    case EventKind::phase:
      EXPECT_EQ(read_phase(e.body).case_id, e.case_id);
      back = phase_line(read_phase(e.body));
      break;
    case EventKind::result:
      EXPECT_EQ(read_result(e.body).case_id, e.case_id);
      back = result_line(read_result(e.body));
      break;
    case EventKind::bye: back = bye_line(); break;
    default: ADD_FAILURE() << "not one of the five events: " << line << " " << e.problem;
    }
    EXPECT_EQ(back, line);
  }
  EXPECT_EQ(seen.size(), 5u) << "hello, begin, phase, result and bye each have a golden line";
}

TEST(Golden, TheWriterWritesTheGoldenLinesOnTheFd) {
  const std::vector<std::string> golden = golden_lines("events.jsonl");
  const auto written = capture([&](ProtocolWriter& w) {
    for (const std::string& line : golden) {
      const Event e = parse_event(line);
      if (e.kind == EventKind::hello) w.hello(read_hello(e.body));
      if (e.kind == EventKind::begin) w.begin(e.case_id);
      if (e.kind == EventKind::phase) w.phase(read_phase(e.body));
      if (e.kind == EventKind::result) w.result(read_result(e.body));
      if (e.kind == EventKind::bye) w.bye();
    }
  });
  EXPECT_EQ(written, golden);
}

TEST(Golden, EveryCaseLineIsReadAndWrittenBackIdentically) {
  for (const std::string& line : golden_lines("case_lines.jsonl")) {
    auto parsed = parse_case_line(line);
    ASSERT_TRUE(parsed.has_value()) << line << ": " << parsed.error().message;
    EXPECT_EQ(parsed->id, parsed->kase.id());
    EXPECT_EQ(make_case_line(parsed->kase, parsed->tolerance, parsed->gradient_tolerance, parsed->oracle_path, parsed->warmup,
                             parsed->repeat, parsed->budget_ms),
              line);
  }
}

TEST(Golden, EveryRefusedCaseLineIsRefused) {
  for (const std::string& line : golden_lines("case_lines_refused.jsonl"))
    EXPECT_FALSE(parse_case_line(line).has_value()) << line;
}

// --- case lines -----------------------------------------------------------------------------------

TEST(CaseLine, RoundTrip) {
  auto c = parse_case_spec("dtype=bf16,b=2,hq=8,hkv=2,lq=1,lkv=77,d=64,mask=bool,layout=transposed,seed=5");
  ASSERT_TRUE(c.has_value());
  const std::string text = make_case_line(*c, {1e-2, 2e-2}, {3e-2, 4e-2}, "/tmp/x.f64", 2, 7, 1500);
  auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["v"], 1);
  EXPECT_EQ(j["id"], c->id());
  auto line = parse_case_line(text);
  ASSERT_TRUE(line.has_value()) << line.error().message;
  EXPECT_EQ(line->id, c->id());
  EXPECT_EQ(line->kase, *c);
  EXPECT_EQ(line->tolerance, (Tolerance{1e-2, 2e-2}));
  EXPECT_EQ(line->gradient_tolerance, (Tolerance{3e-2, 4e-2}));
  EXPECT_EQ(line->oracle_path, "/tmp/x.f64");
  EXPECT_EQ(line->warmup, 2);
  EXPECT_EQ(line->repeat, 7);
  EXPECT_EQ(line->budget_ms, 1500);
  auto no_oracle = parse_case_line(make_case_line(*c, {0, 0}, {0, 0}, "", 1, 3));
  ASSERT_TRUE(no_oracle.has_value());
  EXPECT_EQ(no_oracle->oracle_path, "");
  EXPECT_EQ(no_oracle->budget_ms, 0); // absent: no budget, as older doctors wrote it
  EXPECT_EQ(nlohmann::json::parse(make_case_line(*c, {0, 0}, {0, 0}, "", 1, 3))["oracle"], nullptr);
}

TEST(CaseLine, RejectsBadLines) {
  for (const char* bad :
       {"", "nope", "[]", "{\"case\":{}}", "{\"v\":2,\"case\":{},\"tolerance\":{\"atol\":0,\"rtol\":0},\"gradient_tolerance\":{\"atol\":0,\"rtol\":0}}",
        "{\"v\":1,\"case\":{\"d\":0},\"tolerance\":{\"atol\":0,\"rtol\":0},\"gradient_tolerance\":{\"atol\":0,\"rtol\":0}}",
        "{\"v\":1,\"case\":{},\"tolerance\":{\"atol\":-1,\"rtol\":0},\"gradient_tolerance\":{\"atol\":0,\"rtol\":0}}",
        "{\"v\":1,\"case\":{}}",
        "{\"v\":1,\"case\":{},\"tolerance\":{\"atol\":0,\"rtol\":0},\"gradient_tolerance\":{\"atol\":0,\"rtol\":0},\"repeat\":100000}",
        "{\"v\":1,\"case\":{},\"tolerance\":{\"atol\":0,\"rtol\":0},\"gradient_tolerance\":{\"atol\":0,\"rtol\":0},\"oracle\":3}",
        "{\"v\":1,\"case\":{},\"tolerance\":{\"atol\":0,\"rtol\":0},\"gradient_tolerance\":{\"atol\":0,\"rtol\":0},\"budget_ms\":-1}"})
    EXPECT_FALSE(parse_case_line(bad).has_value()) << bad;
}

TEST(CaseLine, CasesFileErrorsNameTheLine) {
  sdpa_test::TempDir dir;
  const std::string good = make_case_line(small_case(), {0, 0}, {0, 0}, "", 1, 1);
  ASSERT_TRUE(write_cases_file(dir.file("cases"), {good, good}).has_value());
  auto ok = read_cases_file(dir.file("cases"));
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->size(), 2u);
  sdpa_test::write_file(dir.file("bad"), good + "\n{broken\n");
  auto bad = read_cases_file(dir.file("bad"));
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find(":2:"), std::string::npos) << bad.error().message;
}

// --- writing events -------------------------------------------------------------------------------

TEST(ProtocolWriter, WritesOneVersionedLinePerEvent) {
  const auto text = capture([](ProtocolWriter& w) {
    w.hello({"libtorch", "cpu", "flash", {{"torch", "2.13.0"}}, {{"threads", "2"}}});
    w.begin("fp16-b1-h2-q8-k8-d16");
    ResultEvent e;
    e.case_id = "fp16-b1-h2-q8-k8-d16";
    e.status = Status::mismatch;
    e.reason = "1 of 2 \xff outside"; // not UTF-8: still valid JSON
    e.metrics.max_abs_err = std::numeric_limits<double>::infinity();
    e.metrics.rel_l2_err = 0.25;
    e.metrics.frac_outside_tol = std::numeric_limits<double>::quiet_NaN();
    e.metrics.nan_count = 3;
    e.metrics.time_ms = 1.5;
    e.metrics.timed_runs = 3;
    e.tolerance = Tolerance{1e-3, 2e-3};
    e.backend_chosen = "flash";
    e.warnings = {"w1", "w2"};
    w.result(e);
    w.bye();
  });
  std::vector<nlohmann::json> lines;
  for (const auto& t : text) lines.push_back(nlohmann::json::parse(t));
  ASSERT_EQ(lines.size(), 4u);
  for (const auto& l : lines) EXPECT_EQ(l["v"], 1);
  EXPECT_EQ(lines[0]["event"], "hello");
  EXPECT_EQ(lines[0]["worker"], "libtorch");
  EXPECT_EQ(lines[0]["versions"]["torch"], "2.13.0");
  EXPECT_EQ(lines[1]["event"], "begin");
  EXPECT_EQ(lines[1]["case"], "fp16-b1-h2-q8-k8-d16");
  const auto& r = lines[2];
  EXPECT_EQ(r["event"], "result");
  EXPECT_EQ(r["status"], "mismatch");
  EXPECT_TRUE(r["metrics"]["max_abs_err"].is_null());
  EXPECT_TRUE(r["metrics"]["frac_outside_tol"].is_null());
  EXPECT_TRUE(r["metrics"]["time_min_ms"].is_null());
  EXPECT_EQ(r["metrics"]["rel_l2_err"], 0.25);
  EXPECT_EQ(r["metrics"]["nan_count"], 3);
  EXPECT_EQ(r["metrics"]["timed_runs"], 3);
  EXPECT_EQ(r["tolerance"]["rtol"], 2e-3);
  EXPECT_EQ(r["warnings"].size(), 2u);
  EXPECT_EQ(lines[3]["event"], "bye");
}

TEST(ProtocolWriter, ReportsAGoneReader) {
  std::signal(SIGPIPE, SIG_IGN);
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  ::close(p[0]);
  ProtocolWriter w(p[1]);
  EXPECT_FALSE(w.begin("x"));
  EXPECT_FALSE(w.ok());
  ::close(p[1]);
}

// --- reading events -------------------------------------------------------------------------------

TEST(Protocol, ParsesTheFourEvents) {
  auto hello = parse_event(R"({"v":1,"event":"hello","worker":"fault"})");
  EXPECT_EQ(hello.kind, EventKind::hello);
  EXPECT_EQ(hello.body["worker"], "fault");
  auto begin = parse_event(R"({"v":1,"event":"begin","case":"c1"})");
  EXPECT_EQ(begin.kind, EventKind::begin);
  EXPECT_EQ(begin.case_id, "c1");
  auto result = parse_event("{\"v\":1,\"event\":\"result\",\"case\":\"c1\",\"status\":\"pass\"}\r");
  EXPECT_EQ(result.kind, EventKind::result);
  EXPECT_EQ(result.case_id, "c1");
  EXPECT_EQ(parse_event(R"({"v":1,"event":"bye"})").kind, EventKind::bye);
}

TEST(Protocol, IsLenientWhereItIsSafe) {
  EXPECT_EQ(parse_event(R"({"event":"bye"})").kind, EventKind::bye); // no "v" = v1
  EXPECT_EQ(parse_event(R"({"v":1,"event":"progress","pct":5})").kind, EventKind::unknown);
  EXPECT_EQ(parse_event("   ").kind, EventKind::blank);
  EXPECT_EQ(parse_event("").kind, EventKind::blank);
}

TEST(Protocol, BrokenLinesNeverThrow) {
  const std::string bad[] = {
      "{not json",
      "[1,2,3]",
      "42",
      R"({"v":2,"event":"bye"})",
      R"({"v":"1","event":"bye"})",
      R"({"v":1})",
      R"({"v":1,"event":7})",
      R"({"v":1,"event":"begin"})",
      R"({"v":1,"event":"begin","case":""})",
      R"({"v":1,"event":"result","case":"c1"})",
      R"({"v":1,"event":"result","case":"c1","status":3})",
      std::string("{\"v\":1,\"event\":\"bye\"}\0garbage", 30),
      "\xff\xfe\xfd",
      std::string(100'000, '{'),
  };
  for (const auto& line : bad) {
    auto ev = parse_event(line);
    EXPECT_EQ(ev.kind, EventKind::broken) << excerpt(line);
    EXPECT_FALSE(ev.problem.empty());
    EXPECT_LE(ev.problem.size(), 200u);
    EXPECT_EQ(ev.problem.find('\0'), std::string::npos);
  }
}

TEST(Protocol, HelloValuesAreTextAndEmptyOnesAreDropped) {
  const Hello h = read_hello(nlohmann::json::parse(
      R"({"worker":"fault","versions":{"torch":"2.13.0","none":""},"facts":{"pid":42,"ok":true}})"));
  EXPECT_EQ(h.worker, "fault");
  EXPECT_EQ(h.device, "");
  EXPECT_EQ(h.versions, (std::map<std::string, std::string>{{"torch", "2.13.0"}}));
  EXPECT_EQ(h.facts, (std::map<std::string, std::string>{{"ok", "true"}, {"pid", "42"}}));
  EXPECT_TRUE(read_hello(nlohmann::json::array()).versions.empty());
}

// --- a result folded into a CaseResult ------------------------------------------------------------

namespace {
CaseResult fresh(Status status) {
  CaseResult r;
  r.kase = small_case();
  r.status = status;
  r.tolerance = {1e-3, 1e-3};
  return r;
}
} // namespace

TEST(ApplyResult, TakesMetricsToleranceBackendWarningsAndComputesTflops) {
  CaseResult r = fresh(Status::pass);
  apply_result(nlohmann::json::parse(
                   R"({"metrics":{"max_abs_err":0.5,"nan_count":2,"time_ms":2.0,"timed_runs":3},
                       "tolerance":{"atol":0.25,"rtol":"x"},"backend_chosen":"flash",
                       "warnings":["w",7]})"),
               r);
  EXPECT_EQ(r.metrics.max_abs_err, 0.5);
  EXPECT_EQ(r.metrics.nan_count, 2);
  EXPECT_EQ(r.metrics.timed_runs, 3);
  EXPECT_EQ(r.tolerance, (Tolerance{0.25, 1e-3})) << "a bound that is not a number is kept";
  EXPECT_EQ(r.backend_chosen, "flash");
  EXPECT_EQ(r.warnings, std::vector<std::string>{"w"});
  ASSERT_TRUE(r.metrics.tflops.has_value());
  EXPECT_DOUBLE_EQ(*r.metrics.tflops, r.kase.flops() / 2e-3 / 1e12);
  EXPECT_EQ(r.canary, "");
}

TEST(ApplyResult, AFailedCanaryTurnsAPassIntoAnErrorAndAddsToOtherReasons) {
  CaseResult pass = fresh(Status::pass);
  apply_result(nlohmann::json::parse(R"({"canary":"failed: hipErrorIllegalAddress"})"), pass);
  EXPECT_EQ(pass.status, Status::error);
  EXPECT_EQ(pass.reason, "poisoned the device: canary failed after it: hipErrorIllegalAddress");
  EXPECT_EQ(pass.canary, "failed: hipErrorIllegalAddress");

  CaseResult mismatch = fresh(Status::mismatch);
  mismatch.reason = "3 of 4 outside";
  apply_result(nlohmann::json::parse(R"({"canary":"failed: x"})"), mismatch);
  EXPECT_EQ(mismatch.status, Status::mismatch);
  EXPECT_EQ(mismatch.reason, "3 of 4 outside | poisoned the device: canary failed after it: x");

  CaseResult ok = fresh(Status::pass);
  apply_result(nlohmann::json::parse(R"({"canary":"ok","metrics":"broken"})"), ok);
  EXPECT_EQ(ok.status, Status::pass);
  EXPECT_EQ(ok.canary, "ok");
  EXPECT_FALSE(ok.metrics.tflops.has_value());
}

// --- splitting the stream into lines --------------------------------------------------------------

namespace {
struct Collected {
  std::vector<std::string> lines;
  std::vector<bool> too_long;
  LineSplitter::Handler handler() {
    return [this](std::string_view line, bool over) {
      lines.emplace_back(line);
      too_long.push_back(over);
    };
  }
};
} // namespace

TEST(LineSplitter, JoinsPiecesAndSplitsLines) {
  LineSplitter s(100);
  Collected c;
  auto h = c.handler();
  s.feed("ab", h);
  s.feed("c\nde\nf", h);
  s.feed("g\n\n", h);
  s.feed("tail", h);
  EXPECT_EQ(c.lines, (std::vector<std::string>{"abc", "de", "fg", ""}));
  s.finish(h);
  EXPECT_EQ(c.lines.back(), "tail");
}

TEST(LineSplitter, CapsLongLinesOnceAndRecovers) {
  LineSplitter s(16);
  Collected c;
  auto h = c.handler();
  s.feed(std::string(10, 'a'), h);
  s.feed(std::string(10, 'a'), h); // over the cap: reported now, once
  s.feed(std::string(1000, 'a'), h);
  s.feed("aaa\nnext\n", h);
  ASSERT_EQ(c.lines.size(), 2u);
  EXPECT_TRUE(c.too_long[0]);
  EXPECT_FALSE(c.too_long[1]);
  EXPECT_EQ(c.lines[1], "next");
  // A single piece longer than the cap, with its newline in the same piece.
  s.feed(std::string(40, 'b') + "\nok\n", h);
  ASSERT_EQ(c.lines.size(), 4u);
  EXPECT_TRUE(c.too_long[2]);
  EXPECT_EQ(c.lines[3], "ok");
}
