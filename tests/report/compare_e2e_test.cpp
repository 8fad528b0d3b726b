// diff and merge through the built binary: exit codes, one-line errors, reports made on this
// machine, and a generated fleet (tests/report/make_fleet.py) with bad inputs among the reports.
#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>

using nlohmann::json;
using sdpa_test::doctor;
using sdpa_test::run_binary;

namespace {

std::string golden(const std::string& name) {
  return sdpa_test::source_path("tests/report/golden/" + name + ".json");
}

// Writes `doc` with one result's status changed.
void write_with_status(const std::string& path, json doc, const std::string& variant,
                       const std::string& status) {
  for (json& r : doc["results"]) {
    if (r["variant"] == variant) {
      r["status"] = status;
      r["reason"] = "worker died by SIGSEGV while running the case";
      break;
    }
  }
  sdpa_test::write_file(path, doc.dump(2));
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    out.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return out;
}

// A fleet of 16 reports, nodes 7 and 12 on an older driver with flash[ck] crashing.
void make_fleet(const std::string& dir, bool bad) {
  std::vector<std::string> argv{SDPA_DOCTOR_TEST_PYTHON,
                                sdpa_test::source_path("tests/report/make_fleet.py"),
                                "--template", golden("crash_known_issue"), "--out", dir,
                                "--nodes", "16", "--odd", "7,12"};
  if (bad) argv.push_back("--bad");
  auto r = run_binary(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

std::vector<std::string> reports_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Validates a JSON output against its schema in data/ (skipped without jsonschema).
void expect_valid(const std::string& schema, const std::string& file) {
  auto r = run_binary({SDPA_DOCTOR_TEST_PYTHON, sdpa_test::source_path("tests/report/validate_report.py"),
                       "--schema", sdpa_test::source_path("data/" + schema), "--json", file});
  if (r.exit_code == 77) return;
  EXPECT_EQ(r.exit_code, 0) << file << " against " << schema << ":\n" << r.out << r.err;
}

} // namespace

TEST(DiffE2E, IdenticalReportsExitZero) {
  auto r = run_binary({doctor(), "diff", golden("crash_known_issue"), golden("crash_known_issue")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("No differences."), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");
}

TEST(DiffE2E, RegressedCellExitsOneAndIsNamed) {
  sdpa_test::TempDir tmp;
  const json base = json::parse(sdpa_test::read_file(golden("crash_known_issue")));
  write_with_status(tmp.file("new.json"), base, "mem_efficient", "crash");
  sdpa_test::RunOptions ascii;
  ascii.set_env = {{"LC_ALL", "C"}};
  auto r = run_binary({doctor(), "diff", golden("crash_known_issue"), tmp.file("new.json"),
                       "--json", tmp.file("diff.json"), "--markdown", tmp.file("diff.md")},
                      ascii);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.out.find("Regressions (1)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gfx1201 cuda:0 - libtorch - mem_efficient - fp16-b1-h8-q128-k128-d64"),
            std::string::npos)
      << r.out;
  const json d = json::parse(sdpa_test::read_file(tmp.file("diff.json")));
  EXPECT_EQ(d["schema"], "sdpa-doctor/diff/v1");
  EXPECT_EQ(d["changes"][0]["new_status"], "crash");
  EXPECT_NE(sdpa_test::read_file(tmp.file("diff.md")).find("1 regression"), std::string::npos);
  expect_valid("diff.schema.json", tmp.file("diff.json"));
  // --fail-on none: the same change is listed but does not gate.
  auto none = run_binary({doctor(), "diff", "--fail-on", "none", golden("crash_known_issue"),
                          tmp.file("new.json")});
  EXPECT_EQ(none.exit_code, 0) << none.out;
}

TEST(DiffE2E, BadInputIsOneLineExitTwo) {
  sdpa_test::TempDir tmp;
  json newer = json::parse(sdpa_test::read_file(golden("no_gpu")));
  newer["schema"] = "sdpa-doctor/report/v2";
  sdpa_test::write_file(tmp.file("newer.json"), newer.dump());
  json older = json::parse(sdpa_test::read_file(golden("no_gpu")));
  older["schema"] = "sdpa-doctor/report/v1.0";
  sdpa_test::write_file(tmp.file("minor.json"), older.dump());
  const std::string text = sdpa_test::read_file(golden("no_gpu"));
  sdpa_test::write_file(tmp.file("truncated.json"), text.substr(0, text.size() / 3));
  sdpa_test::write_file(tmp.file("other.json"), R"({"hello": "world"})");
  for (const std::string& bad : {tmp.file("newer.json"), tmp.file("truncated.json"),
                                 tmp.file("other.json"), tmp.path(), tmp.file("missing.json")}) {
    auto r = run_binary({doctor(), "diff", golden("no_gpu"), bad});
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_EQ(sdpa_test::line_count(r.err), 1) << r.err;
    EXPECT_EQ(r.err.rfind("sdpa-doctor: error: ", 0), 0u) << r.err;
    EXPECT_EQ(r.out, "");
  }
  auto minor = run_binary({doctor(), "diff", golden("no_gpu"), tmp.file("minor.json")});
  EXPECT_EQ(minor.exit_code, 0) << minor.err;
}

TEST(DiffE2E, ReportsMadeOnThisMachine) {
  sdpa_test::TempDir tmp;
  for (const char* name : {"a.json", "b.json"}) {
    auto r = run_binary({doctor(), "check", "-q", "--probe", "reference", "--case",
                         "dtype=fp32,b=1,h=1,l=16,d=16", "--json", tmp.file(name)});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  // Timing noise on a tiny case may list a slower or faster cell; it never gates by default.
  auto same = run_binary({doctor(), "diff", tmp.file("a.json"), tmp.file("b.json")});
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
  EXPECT_NE(same.out.find("0 regressions"), std::string::npos) << same.out;
  write_with_status(tmp.file("c.json"), json::parse(sdpa_test::read_file(tmp.file("b.json"))),
                    "ref-flash", "crash");
  auto regressed = run_binary({doctor(), "diff", tmp.file("a.json"), tmp.file("c.json")});
  EXPECT_EQ(regressed.exit_code, 1) << regressed.out;
  EXPECT_NE(regressed.out.find("ref-flash"), std::string::npos) << regressed.out;
}

TEST(DiffE2E, SlowerCellGatesOnlyWhenAsked) {
  sdpa_test::TempDir tmp;
  json base = json::parse(sdpa_test::read_file(golden("no_gpu")));
  json now = base;
  base["results"][0]["metrics"]["time_ms"] = 1.0;
  now["results"][0]["metrics"]["time_ms"] = 1.4;
  sdpa_test::write_file(tmp.file("base.json"), base.dump());
  sdpa_test::write_file(tmp.file("new.json"), now.dump());
  auto r = run_binary({doctor(), "diff", tmp.file("base.json"), tmp.file("new.json")});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("Slower (1)"), std::string::npos) << r.out;
  auto loose = run_binary(
      {doctor(), "diff", "--time-threshold", "1.5", tmp.file("base.json"), tmp.file("new.json")});
  EXPECT_EQ(loose.out.find("Slower"), std::string::npos) << loose.out;
  auto gate = run_binary(
      {doctor(), "diff", "--fail-on-slower", tmp.file("base.json"), tmp.file("new.json")});
  EXPECT_EQ(gate.exit_code, 1);
}

TEST(DiffE2E, HelpShowsOnlyItsOwnOptions) {
  auto r = run_binary({doctor(), "diff", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--time-threshold"), std::string::npos);
  EXPECT_EQ(r.out.find("--suite"), std::string::npos) << r.out;
  auto m = run_binary({doctor(), "merge", "--help"});
  EXPECT_EQ(m.exit_code, 0);
  EXPECT_EQ(m.out.find("--time-threshold"), std::string::npos) << m.out;
}

TEST(MergeE2E, FleetNamesTheOddNodesAndTheDriver) {
  sdpa_test::TempDir tmp;
  make_fleet(tmp.file("fleet"), false);
  std::vector<std::string> argv{doctor(), "merge", "--json", tmp.file("fleet.json"),
                                "--markdown", tmp.file("fleet.md")};
  for (const std::string& f : reports_in(tmp.file("fleet"))) argv.push_back(f);
  auto r = run_binary(argv);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err, "");
  const std::string line = "flash[ck] (libtorch) crashes on 2 of 16 gfx1201 nodes: node-07, "
                           "node-12; driver 6.8.0 vs 6.10.5 elsewhere";
  EXPECT_NE(r.out.find(line), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("kernel"), std::string::npos) << "the kernel varies but separates nothing";
  const json j = json::parse(sdpa_test::read_file(tmp.file("fleet.json")));
  EXPECT_EQ(j["schema"], "sdpa-doctor/fleet/v1");
  EXPECT_EQ(j["nodes"].size(), 16u);
  EXPECT_EQ(j["odd_nodes"][0]["failing_nodes"], json({"node-07", "node-12"}));
  EXPECT_NE(sdpa_test::read_file(tmp.file("fleet.md")).find(line), std::string::npos);
  expect_valid("fleet.schema.json", tmp.file("fleet.json"));
}

TEST(MergeE2E, BadInputsSkippedOneLineEachExitTwo) {
  sdpa_test::TempDir tmp;
  make_fleet(tmp.file("fleet"), true);
  std::vector<std::string> argv{doctor(), "merge", "--json", tmp.file("fleet.json")};
  for (const std::string& f : reports_in(tmp.file("fleet"))) argv.push_back(f);
  auto r = run_binary(argv);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  const auto err = lines(r.err);
  ASSERT_EQ(err.size(), 4u) << r.err;
  for (const char* name : {"a-directory.json", "newer-schema.json", "not-a-report.json", "truncated.json"}) {
    EXPECT_EQ(std::count_if(err.begin(), err.end(),
                            [&](const std::string& l) {
                              return l.find(name) != std::string::npos &&
                                     l.find(": skipped: ") != std::string::npos;
                            }),
              1)
        << name << "\n"
        << r.err;
  }
  const json j = json::parse(sdpa_test::read_file(tmp.file("fleet.json")));
  EXPECT_EQ(j["nodes"].size(), 16u) << "the good reports are still merged";
  EXPECT_EQ(j["skipped"].size(), 4u);
  EXPECT_NE(r.out.find("4 inputs skipped"), std::string::npos) << r.out;
  expect_valid("fleet.schema.json", tmp.file("fleet.json"));
}

TEST(MergeE2E, AllPassingFleetExitsZeroAndNoReportExitsTwo) {
  sdpa_test::TempDir tmp;
  auto ok = run_binary({doctor(), "merge", golden("no_gpu"), golden("all_unsupported")});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  sdpa_test::write_file(tmp.file("junk.json"), "{");
  auto none = run_binary({doctor(), "merge", tmp.file("junk.json")});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("no valid report"), std::string::npos) << none.err;
  // Without a hostname the file name names the node.
  json anon = json::parse(sdpa_test::read_file(golden("crash_known_issue")));
  anon["host"].erase("hostname");
  sdpa_test::write_file(tmp.file("rack3-slot4.json"), anon.dump());
  auto named = run_binary({doctor(), "merge", tmp.file("rack3-slot4.json")});
  EXPECT_EQ(named.exit_code, 1);
  EXPECT_NE(named.out.find("rack3-slot4"), std::string::npos) << named.out;
}
