// Reading reports back, diff and fleet merge as pure functions over the golden report files.
// Golden outputs: SDPA_DOCTOR_UPDATE_GOLDEN=1 rewrites them after an intended change.
#include "compare/compare.hpp"
#include "report/report.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

using namespace sdpa_doctor;
using nlohmann::json;

namespace {

json golden_json(const std::string& name) {
  return json::parse(sdpa_test::read_file(sdpa_test::source_path("tests/report/golden/" + name + ".json")));
}

compare::ReportDigest digest(const json& doc) {
  auto d = compare::read_report(doc.dump());
  if (!d) throw std::runtime_error(d.error().message);
  return std::move(*d);
}

std::set<Status> default_fail_on() {
  return {Status::mismatch, Status::nonfinite, Status::error, Status::crash, Status::timeout};
}

json& result(json& doc, const std::string& variant, const std::string& case_id) {
  for (json& r : doc["results"])
    if (r["variant"] == variant && r["case_id"] == case_id) return r;
  throw std::runtime_error("no result " + variant + " " + case_id);
}

// The baseline is crash_known_issue; the new report regresses one cell, fixes another, slows a
// third, drops a fourth and adds a fifth.
compare::DiffResult edited_diff() {
  json base = golden_json("crash_known_issue");
  json now = base;
  json& r = result(now, "flash", "fp16-b1-h8-q128-k128-d64");
  r["status"] = "mismatch";
  r["reason"] = "max abs err 0.5 > atol 0.002";
  json& fixed = result(now, "flash[ck]", "fp16-b1-h8-q128-k128-d64");
  fixed["status"] = "pass";
  fixed["reason"] = "";
  result(base, "math", "bf16-b1-h8-q128-k128-d64")["metrics"]["time_ms"] = 1.0;
  result(now, "math", "bf16-b1-h8-q128-k128-d64")["metrics"]["time_ms"] = 2.5;
  json added = result(now, "math", "fp16-b1-h8-q128-k128-d64");
  added["case_id"] = "fp16-b2-h8-q128-k128-d64"; // a case of its own, id and all
  added["case"]["b"] = 2;
  now["results"].push_back(added);
  auto& results = now["results"];
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i]["variant"] == "ref-flash" && results[i]["case_id"] == "bf16-b1-h8-q128-k128-d64") {
      results.erase(i);
      break;
    }
  }
  now["started_at"] = "2026-09-21T09:30:00Z";
  now["host"]["hostname"] = "ws-lab-08";
  return compare::diff(digest(base), digest(now), {default_fail_on(), 1.25, false});
}

std::string fmt_node(int n) {
  char name[16];
  std::snprintf(name, sizeof name, "node-%02d", n);
  return name;
}

void expect_golden(const std::string& file, const std::string& actual) {
  const std::string path = sdpa_test::source_path("tests/report/golden/" + file);
  const char* update = std::getenv("SDPA_DOCTOR_UPDATE_GOLDEN");
  if (update && *update && std::string(update) != "0") {
    sdpa_test::write_file(path, actual);
    return;
  }
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing; run with SDPA_DOCTOR_UPDATE_GOLDEN=1";
  EXPECT_EQ(sdpa_test::read_file(path), actual) << "differs from " << path;
}

} // namespace

TEST(ReportReader, AcceptsV1AndItsMinorVersionsOnly) {
  EXPECT_TRUE(report::check_report_schema("sdpa-doctor/report/v1"));
  EXPECT_TRUE(report::check_report_schema("sdpa-doctor/report/v1.3"));
  EXPECT_TRUE(report::check_report_schema("sdpa-doctor/report/v1.4"));
  auto newer = report::check_report_schema("sdpa-doctor/report/v2");
  ASSERT_FALSE(newer);
  EXPECT_NE(newer.error().message.find("newer report schema"), std::string::npos);
  EXPECT_FALSE(report::check_report_schema("sdpa-doctor/report/v10.1"));
  EXPECT_FALSE(report::check_report_schema("sdpa-doctor/report/v1.x"));
  EXPECT_FALSE(report::check_report_schema("sdpa-doctor/report/v"));
  EXPECT_FALSE(report::check_report_schema("sdpa-doctor/diff/v1"));
}

TEST(ReportReader, ReadsEveryGoldenReport) {
  for (const char* name : {"crash_known_issue", "timeout_mismatch", "all_unsupported", "no_gpu"}) {
    const json doc = golden_json(name);
    auto d = compare::read_report(doc.dump());
    ASSERT_TRUE(d) << name << ": " << d.error().message;
    EXPECT_EQ(d->cells.size(), doc["results"].size()) << name;
    EXPECT_EQ(d->hostname, doc["host"].value("hostname", "")) << name;
  }
  const auto d = digest(golden_json("crash_known_issue"));
  EXPECT_EQ(d.cells.front().arch, "gfx1201");
  EXPECT_EQ(d.cells.front().status, Status::crash);
  EXPECT_EQ(d.arch_facts.at("gfx1201").at("driver"), "6.10.5");
  EXPECT_EQ(d.facts.at("rocm"), "7.0.2");
  EXPECT_EQ(d.facts.at("torch_cpp"), "2.9.0+rocm7.0"); // from the libtorch workers' hello
  EXPECT_EQ(digest(golden_json("no_gpu")).cells.front().arch, "cpu");
}

TEST(ReportReader, BadInputIsOneLineError) {
  const std::string text = golden_json("no_gpu").dump();
  auto truncated = compare::read_report(text.substr(0, text.size() / 2));
  ASSERT_FALSE(truncated);
  EXPECT_NE(truncated.error().message.find("truncated"), std::string::npos);
  auto other = compare::read_report(R"({"name":"x"})");
  ASSERT_FALSE(other);
  EXPECT_NE(other.error().message.find("not an sdpa-doctor report"), std::string::npos);
  EXPECT_FALSE(compare::read_report("[1,2]"));
  EXPECT_FALSE(compare::read_report(""));
  json bad = golden_json("no_gpu");
  bad["results"][0]["status"] = "exploded";
  EXPECT_FALSE(compare::read_report(bad.dump()));
}

TEST(Diff, IdenticalReportsHaveNoChange) {
  const auto d = digest(golden_json("timeout_mismatch"));
  const auto result = compare::diff(d, d, {default_fail_on(), 1.25, false});
  EXPECT_TRUE(result.changes.empty());
  EXPECT_EQ(result.compared, static_cast<int>(d.cells.size()));
  EXPECT_EQ(result.exit_code, 0);
}

TEST(Diff, ClassifiesEachKindOfChange) {
  const auto d = edited_diff();
  EXPECT_EQ(d.count(compare::ChangeKind::regression), 1);
  EXPECT_EQ(d.count(compare::ChangeKind::fix), 1);
  EXPECT_EQ(d.count(compare::ChangeKind::slower), 1);
  EXPECT_EQ(d.count(compare::ChangeKind::added), 1);
  EXPECT_EQ(d.count(compare::ChangeKind::removed), 1);
  EXPECT_EQ(d.exit_code, 1);
  EXPECT_EQ(d.changes.front().kind, compare::ChangeKind::regression);
  EXPECT_EQ(d.changes.front().cell.case_id, "fp16-b1-h8-q128-k128-d64");
}

TEST(Diff, FailOnDecidesWhatIsARegression) {
  json base = golden_json("crash_known_issue");
  json now = base;
  result(now, "flash", "fp16-b1-h8-q128-k128-d64")["status"] = "unsupported";
  const auto by_default = compare::diff(digest(base), digest(now), {default_fail_on(), 1.25, false});
  EXPECT_EQ(by_default.count(compare::ChangeKind::changed), 1);
  EXPECT_EQ(by_default.exit_code, 0);
  auto wider = default_fail_on();
  wider.insert(Status::unsupported);
  EXPECT_EQ(compare::diff(digest(base), digest(now), {wider, 1.25, false}).exit_code, 1);
}

// A compiled cell is another cell than the eager one of its case: it is never compared with it,
// and a report of eager cells only (v1.6 and before, no "mode") reads as eager.
TEST(Diff, ACompiledCellIsNeverComparedWithTheEagerOne) {
  json base = golden_json("crash_known_issue");
  json now = base;
  for (json& r : base["results"]) r.erase("mode");
  json compiled = result(now, "flash", "fp16-b1-h8-q128-k128-d64");
  compiled["mode"] = "compiled";
  compiled["status"] = "mismatch";
  now["results"].push_back(compiled);
  const auto d = compare::diff(digest(base), digest(now), {default_fail_on(), 1.25, false});
  ASSERT_EQ(d.changes.size(), 1u);
  EXPECT_EQ(d.changes.front().kind, compare::ChangeKind::added);
  EXPECT_EQ(d.changes.front().cell.mode, "compiled");
  EXPECT_EQ(d.changes.front().cell.row(), "flash · compiled");
  // Two results for one compiled cell are refused as for an eager one.
  now["results"].push_back(compiled);
  EXPECT_FALSE(compare::read_report(now.dump()).has_value());
}

TEST(Diff, HostNameIsNotPartOfTheCell) {
  json base = golden_json("crash_known_issue");
  json now = base;
  now["host"]["hostname"] = "another-node";
  EXPECT_TRUE(compare::diff(digest(base), digest(now), {default_fail_on(), 1.25, false}).changes.empty());
}

TEST(Diff, GoldenConsoleMarkdownAndJson) {
  const auto d = edited_diff();
  expect_golden("diff.console.txt", compare::render_diff_console(d, true));
  expect_golden("diff.console-ascii.txt", compare::render_diff_console(d, false));
  expect_golden("diff.md", compare::render_diff_markdown(d));
  const json j = json::parse(compare::render_diff_json(d));
  EXPECT_EQ(j["schema"], "sdpa-doctor/diff/v1");
  EXPECT_EQ(j["counts"]["regression"], 1);
}

TEST(Fleet, OddNodesNamedWithTheDriverThatSeparatesThem) {
  const json base = golden_json("crash_known_issue");
  compare::FleetMatrix fleet(default_fail_on());
  for (int n = 1; n <= 16; ++n) {
    json doc = base;
    const bool odd = n == 7;
    doc["host"]["hostname"] = fmt_node(n);
    doc["host"]["kernel"] = n % 2 ? "6.8.0-45-generic" : "6.8.0-47-generic";
    doc["inventory"]["devices"][0]["driver_version"] = odd ? "6.8" : "6.10";
    for (json& r : doc["results"]) {
      if (r["variant"] == "flash[ck]") r["status"] = odd ? "crash" : "pass";
    }
    fleet.add(digest(doc), "file");
  }
  const auto odd = fleet.odd_nodes();
  ASSERT_EQ(odd.size(), 1u);
  EXPECT_EQ(odd[0].line,
            "flash[ck] (libtorch) crashes on 1 of 16 gfx1201 nodes: node-07; driver 6.8 vs 6.10 "
            "elsewhere");
  EXPECT_EQ(fleet.exit_code(), 1);
  expect_golden("fleet.console.txt", compare::render_fleet_console(fleet, true));
  expect_golden("fleet.md", compare::render_fleet_markdown(fleet));
  const json j = json::parse(compare::render_fleet_json(fleet));
  EXPECT_EQ(j["schema"], "sdpa-doctor/fleet/v1");
  EXPECT_EQ(j["odd_nodes"][0]["splits"][0]["fact"], "driver");
}

TEST(Fleet, NoFactNamedWhenNoneSeparates) {
  const json base = golden_json("crash_known_issue");
  compare::FleetMatrix fleet(default_fail_on());
  for (int n = 1; n <= 4; ++n) {
    json doc = base;
    doc["host"]["hostname"] = fmt_node(n);
    for (json& r : doc["results"])
      if (r["variant"] == "flash[ck]") r["status"] = n <= 2 ? "crash" : "pass";
    fleet.add(digest(doc), "file");
  }
  const auto odd = fleet.odd_nodes();
  ASSERT_EQ(odd.size(), 1u);
  EXPECT_TRUE(odd[0].splits.empty());
  EXPECT_NE(odd[0].line.find("no reported fact separates them"), std::string::npos) << odd[0].line;
}

TEST(Fleet, SkippedInputOrNoReportIsExitTwo) {
  compare::FleetMatrix empty(default_fail_on());
  EXPECT_EQ(empty.exit_code(), 2);
  compare::FleetMatrix fleet(default_fail_on());
  fleet.add(digest(golden_json("all_unsupported")), "a");
  EXPECT_EQ(fleet.exit_code(), 0);
  fleet.skip({"b.json", "truncated JSON at byte 10"});
  EXPECT_EQ(fleet.exit_code(), 2);
}
