// What the workers share (src/workers/): the oracle files, the planted faults, the worker loop's
// arguments and timing statistics.
#include "core/inputs.hpp"
#include "kernels/kernels.hpp"
#include "workers/worker.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <functional>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

using namespace sdpa_doctor;
using namespace sdpa_doctor::workers;

TEST(OracleFile, RoundTripAndSizeCheck) {
  sdpa_test::TempDir dir;
  const std::vector<double> values = {1.0, -0.5, 1e-300, 3.25};
  auto w = write_oracle_file(dir.file("o.f64"), values);
  ASSERT_TRUE(w.has_value()) << w.error().message;
  EXPECT_EQ(*w, 32);
  EXPECT_EQ(sdpa_test::read_file(dir.file("o.f64")).size(), 32u);
  auto r = read_oracle_file(dir.file("o.f64"), 4);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, values);
  EXPECT_FALSE(read_oracle_file(dir.file("o.f64"), 5).has_value());
  EXPECT_FALSE(read_oracle_file(dir.file("nope"), 4).has_value());
  EXPECT_FALSE(write_oracle_file(dir.file("no/such/dir/o.f64"), values).has_value());
  // No temporary left behind.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST(OracleFile, ComputedOracleMatchesShape) {
  const auto small = parse_case_spec("dtype=fp16,b=1,h=2,l=8,d=16");
  ASSERT_TRUE(small.has_value());
  const Case c = *small;
  const auto o = compute_oracle(c);
  ASSERT_EQ(o.size(), size_t(c.q_elements()));
  for (double x : o) {
    EXPECT_TRUE(std::isfinite(x));
    EXPECT_LT(std::fabs(x), 1.0); // a convex combination of v in [-1, 1)
  }
}

TEST(Fault, OnceFiresForTheFirstMatchOnlyAcrossProcesses) {
  sdpa_test::TempDir dir;
  auto specs = parse_planted_faults("variant=math,once=" + dir.file("marker") + ",action=abort");
  ASSERT_TRUE(specs.has_value()) << specs.error().message;
  const Case c = *parse_case_spec("dtype=fp32,h=1,l=8,d=8");
  EXPECT_NE(matching_fault(*specs, "math", c, c.id()), nullptr);
  EXPECT_TRUE(std::filesystem::exists(dir.file("marker")));
  EXPECT_EQ(matching_fault(*specs, "math", c, c.id()), nullptr); // the marker is there: no more
  EXPECT_FALSE(parse_planted_fault("once=relative/marker,action=abort").has_value());
}

TEST(Fault, SpecParsesAndMatches) {
  auto f = parse_planted_fault("variant=flash,case=fp16-b1-h2-q8-k8-d16,action=perturb");
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(f->action, FaultAction::perturb);
  EXPECT_TRUE(f->matches("flash", "fp16-b1-h2-q8-k8-d16"));
  EXPECT_FALSE(f->matches("math", "fp16-b1-h2-q8-k8-d16"));
  EXPECT_FALSE(f->matches("flash", "other"));
  auto any = parse_planted_fault("action=nan");
  ASSERT_TRUE(any.has_value());
  EXPECT_TRUE(any->matches("x", "y"));
  EXPECT_FALSE(parse_planted_fault("variant=flash").has_value());
  EXPECT_FALSE(parse_planted_fault("action=explode").has_value());
  EXPECT_FALSE(parse_planted_fault("colour=red,action=nan").has_value());
  std::vector<float> out = {1, 2, 3, 4};
  corrupt_output(FaultAction::perturb, out, Case{});
  EXPECT_EQ(out[2], 3.5f);
  corrupt_output(FaultAction::nan, out, Case{});
  EXPECT_TRUE(std::isnan(out[2]));
}

TEST(Fault, MaskedRowsConditionAndNaNInAFullyMaskedRow) {
  auto f = parse_planted_faults("when=mrows,action=nan");
  ASSERT_TRUE(f.has_value()) << f.error().message;
  const Case plain = *parse_case_spec("dtype=fp32,b=1,h=2,l=8,d=4,mask=bool");
  const Case rows = *parse_case_spec("dtype=fp32,b=1,h=2,l=8,d=4,mask=bool,masked_rows");
  EXPECT_EQ(matching_fault(*f, "math", plain, plain.id()), nullptr);
  EXPECT_NE(matching_fault(*f, "math", rows, rows.id()), nullptr);
  std::vector<float> out(size_t(rows.q_elements()), 1.0f);
  corrupt_output(FaultAction::nan, out, rows);
  EXPECT_TRUE(std::isnan(out[12])); // query row 3 of the first head: fully masked
  EXPECT_EQ(std::count_if(out.begin(), out.end(), [](float x) { return std::isnan(x); }), 1);
}

// `when=bottom_right`: causal aligned bottom-right only, so a test plants a failure there alone.
TEST(Fault, BottomRightConditionSelectsCausalAlignedBottomRight) {
  auto f = parse_planted_faults("when=bottom_right,action=perturb");
  ASSERT_TRUE(f.has_value()) << f.error().message;
  const Case br = *parse_case_spec("dtype=fp32,b=1,h=2,lq=4,lkv=9,d=4,causal=bottom_right");
  const Case tl = *parse_case_spec("dtype=fp32,b=1,h=2,lq=4,lkv=9,d=4,causal");
  const Case off = *parse_case_spec("dtype=fp32,b=1,h=2,lq=4,lkv=9,d=4");
  EXPECT_NE(matching_fault(*f, "flash", br, br.id()), nullptr);
  EXPECT_EQ(matching_fault(*f, "flash", tl, tl.id()), nullptr);
  EXPECT_EQ(matching_fault(*f, "flash", off, off.id()), nullptr);
  auto causal = parse_planted_faults("when=causal,when=bottom_right=0,action=perturb");
  ASSERT_TRUE(causal.has_value()) << causal.error().message;
  EXPECT_EQ(matching_fault(*causal, "flash", br, br.id()), nullptr);
  EXPECT_NE(matching_fault(*causal, "flash", tl, tl.id()), nullptr);
}

TEST(Fault, ProcessFaultsReallyHappen) {
  const std::pair<FaultAction, int> expect[] = {{FaultAction::abort, SIGABRT},
                                                {FaultAction::segv, SIGSEGV}};
  for (auto [action, sig] : expect) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      trigger_process_fault(action);
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    EXPECT_EQ(WTERMSIG(status), sig);
  }
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    trigger_process_fault(FaultAction::exit3);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
}

TEST(Worker, ArgsAreCheckedAndResultsFdIsNeverStdout) {
  const char* ok[] = {"w", "--device", "cuda:0", "--variant", "flash[ck]", "--results-fd", "2",
                      "--cases", "f"};
  auto bad = parse_worker_args(9, ok);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("results-fd"), std::string::npos);
  const char* missing[] = {"w", "--device", "cpu"};
  EXPECT_FALSE(parse_worker_args(3, missing).has_value());
  const char* bad_device[] = {"w", "--device", "gpu", "--variant", "math", "--results-fd", "3",
                              "--cases", "f"};
  EXPECT_FALSE(parse_worker_args(9, bad_device).has_value());
}

TEST(Worker, TimingIsMedianAndMinimum) {
  Metrics m;
  set_timing(m, {5, 1, 3});
  EXPECT_EQ(*m.time_ms, 3);
  EXPECT_EQ(*m.time_min_ms, 1);
  EXPECT_EQ(m.timed_runs, 3);
  Metrics even;
  set_timing(even, {4, 1, 2, 3});
  EXPECT_EQ(*even.time_ms, 2.5);
  Metrics none;
  set_timing(none, {});
  EXPECT_FALSE(none.time_ms.has_value());
}

TEST(Worker, MaskedRowSemanticsFollowTheTorchVersion) {
  EXPECT_EQ(masked_row_semantics_of({}), MaskedRowSemantics::zero); // our own kernels
  EXPECT_EQ(masked_row_semantics_of({{"torch", "2.13.0+cpu"}}), MaskedRowSemantics::zero);
  EXPECT_EQ(masked_row_semantics_of({{"torch", "2.5.0"}}), MaskedRowSemantics::zero);
  EXPECT_EQ(masked_row_semantics_of({{"torch", "2.4.1+rocm6.1"}}), MaskedRowSemantics::nan);
  EXPECT_EQ(masked_row_semantics_of({{"torch", "1.13.1"}}), MaskedRowSemantics::nan);
  EXPECT_EQ(masked_row_semantics_of({{"torch", "3.0.0"}}), MaskedRowSemantics::zero);
}

// A worker whose torch is older than 2.5 ignores the doctor's oracle file (fully masked rows at 0)
// for a masked_rows case and judges with its own, NaN there: torch 2.4's NaN rows pass, zeros
// there do not, and the result says which semantics it used.
class OldTorchExecutor : public CaseExecutor {
public:
  explicit OldTorchExecutor(bool nan_rows) : m_nan_rows(nan_rows) {}
  HelloInfo hello() override { return {"fake", {{"torch", "2.4.1"}}, {}, ""}; }
  CaseRun run(const protocol::CaseLine& line, const HostInputs& inputs,
              const EnteringBackward&) override {
    std::vector<double> oracle = compute_oracle(line.kase, inputs);
    if (m_nan_rows)
      kernels::apply_masked_row_semantics(line.kase, inputs, MaskedRowSemantics::nan, oracle);
    CaseRun run;
    run.output.assign(oracle.begin(), oracle.end());
    run.times_ms = {1.0};
    return run;
  }

private:
  bool m_nan_rows;
};

TEST(Worker, AnOlderTorchJudgesFullyMaskedRowsByItsOwnNanOracle) {
  sdpa_test::TempDir dir;
  const Case c = *parse_case_spec("dtype=fp32,b=1,h=2,lq=8,lkv=8,d=4,mask=bool,masked_rows");
  // The doctor's file, as oracle_feed writes it: zero semantics.
  ASSERT_TRUE(write_oracle_file(dir.file("o.f64"), compute_oracle(c)));
  ASSERT_TRUE(protocol::write_cases_file(
      dir.file("cases.jsonl"), {protocol::make_case_line(c, {1e-5, 1e-5}, {2e-5, 2e-5}, dir.file("o.f64"), 0, 1)}));
  for (bool nan_rows : {true, false}) {
    const std::string results = dir.file(nan_rows ? "nan.jsonl" : "zero.jsonl");
    const int fd = ::open(results.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 3);
    WorkerArgs args{"cpu", *parse_variant("math"), fd, dir.file("cases.jsonl")};
    OldTorchExecutor executor(nan_rows);
    EXPECT_EQ(serve_cases(args, executor, {}), 0);
    ::close(fd);
    std::istringstream lines(sdpa_test::read_file(results));
    std::string line;
    nlohmann::json result;
    while (std::getline(lines, line))
      if (auto j = nlohmann::json::parse(line); j.at("event") == "result") {
        cases::judge_worker_event(j); // as the doctor reads it
        result = j;
      }
    ASSERT_TRUE(result.is_object()) << sdpa_test::read_file(results);
    EXPECT_EQ(result.at("masked_rows"), "nan") << result;
    EXPECT_EQ(result.at("status"), nan_rows ? "pass" : "mismatch") << result;
    if (!nan_rows) {
      EXPECT_EQ(result.at("reason"), "16 of 16 elements in fully masked rows are finite where "
                                     "torch < 2.5 returns NaN")
          << result;
    }
  }
}
