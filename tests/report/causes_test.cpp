// Cells skipped because of another cell's failure are grouped under it by the cause and culprit
// they carry; a report written before results carried them is grouped by its reasons' words.
#include "fixtures.hpp"

#include "report/common.hpp"
#include "report/report.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>

using namespace sdpa_doctor;
using report::detail::Cause;

namespace {

// The fixture's cells skipped with `opening` as a run writes them now: cause and culprit as data,
// and their words replaced by `reason`, so only the data can group them.
Report with_causes(Report r, std::string_view opening, SkipCause cause, const Culprit& culprit,
                   const std::string& reason) {
  for (CaseResult& x : r.results) {
    if (x.status != Status::skipped || !x.reason.starts_with(opening)) continue;
    x.cause = cause;
    x.culprit = culprit;
    x.reason = reason;
  }
  return r;
}

// The first failure cause of `r` that kept cells from running.
std::optional<Cause> cause_with_skips(const Report& r) {
  const auto causes = report::detail::failure_causes(r);
  auto it = std::find_if(causes.begin(), causes.end(), [](const Cause& c) {
    return !c.budget_skipped.empty() || !c.unhealthy_skipped.empty();
  });
  if (it == causes.end()) return std::nullopt;
  return *it;
}

// The culprit of the budget_spent fixture: the fifth libtorch flash case, the last to abort.
Culprit budget_culprit(const Report& r) {
  const auto it = std::find_if(r.results.begin(), r.results.end(), [](const CaseResult& x) {
    return x.status == Status::skipped;
  });
  return {"flash", it->reason.substr(it->reason.rfind(' ') + 1)};
}

Report read_golden(const std::string& name) {
  const std::string path = sdpa_test::source_path("tests/report/golden/" + name);
  const auto doc = nlohmann::json::parse(sdpa_test::read_file(path));
  auto report = report::read_measured_report(doc);
  if (!report) throw std::runtime_error(report.error().message);
  return *report;
}

TEST(Causes, BudgetSkipsGroupUnderTheirCulpritByTheirCause) {
  const Report old = sdpa_fixtures::budget_spent();
  const Report r = with_causes(old, "restart budget spent after ", SkipCause::restart_budget_spent,
                               budget_culprit(old), "not run");
  const auto c = cause_with_skips(r);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->budget_skipped.size(), 3u);
  EXPECT_EQ(c->in_a_row, 5);
  EXPECT_TRUE(c->unhealthy_skipped.empty());
  EXPECT_EQ(report::detail::not_run_lines(*c),
            std::vector<std::string>{"stopped after 5 failures in a row; 3 cases not run"});
  EXPECT_TRUE(report::detail::skip_causes(r).empty());
}

TEST(Causes, UnhealthyAndWedgedSkipsGroupUnderTheirCulprit) {
  const Report old = sdpa_fixtures::crash_with_known_issue();
  const auto crashed = std::find_if(old.results.begin(), old.results.end(),
                                    [](const CaseResult& x) { return x.status == Status::crash; });
  ASSERT_NE(crashed, old.results.end());
  for (SkipCause cause : {SkipCause::device_unhealthy, SkipCause::device_wedged}) {
    const Report r = with_causes(old, "device unhealthy after ", cause,
                                 {crashed->variant, crashed->case_id}, "not run");
    const auto c = cause_with_skips(r);
    ASSERT_TRUE(c) << to_string(cause);
    EXPECT_EQ(c->unhealthy_skipped.size(), 3u) << to_string(cause);
    EXPECT_TRUE(c->budget_skipped.empty());
    EXPECT_EQ(report::detail::not_run_lines(*c),
              std::vector<std::string>{
                  "the device was unhealthy after it: 3 cells not run (flash[ck])"});
  }
}

// A culprit names its variant: the same case id failing on another variant is not it.
TEST(Causes, ACulpritOfAnotherVariantIsNotTheCause) {
  const Report old = sdpa_fixtures::budget_spent();
  Culprit elsewhere = budget_culprit(old);
  elsewhere.variant = "math";
  const Report r = with_causes(old, "restart budget spent after ", SkipCause::restart_budget_spent,
                               elsewhere, "not run");
  EXPECT_FALSE(cause_with_skips(r));
  EXPECT_EQ(report::detail::skip_causes(r).size(), 1u);
}

// A result that carries a cause is never read by its words, whatever they say.
TEST(Causes, WordsAreNotReadWhereACauseIsRecorded) {
  Report r = sdpa_fixtures::budget_spent();
  for (CaseResult& x : r.results)
    if (x.status == Status::skipped) x.cause = SkipCause::interrupted;
  EXPECT_FALSE(cause_with_skips(r));
  const auto skipped = report::detail::skip_causes(r);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].results.size(), 3u);
}

// Cells skipped for different causes are told apart even where their words look alike.
TEST(Causes, SkipsOfTwoCausesAreTwoBlocks) {
  Report r = sdpa_fixtures::no_gpu();
  for (size_t i : {0, 1, 2}) {
    r.results[i].status = Status::skipped;
    r.results[i].reason = "not run";
    r.results[i].cause = i == 0 ? SkipCause::memory_guard : SkipCause::interrupted;
  }
  const auto skipped = report::detail::skip_causes(r);
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_EQ(skipped[0].results.size(), 1u);
  EXPECT_EQ(skipped[1].results.size(), 2u);
}

// The same report with and without the data reads the same to a user.
TEST(Causes, ARunsCausesRenderAsTheirWordsDid) {
  Report old = sdpa_fixtures::budget_spent();
  sdpa_fixtures::advise(old);
  Report r = old;
  const Culprit culprit = budget_culprit(r);
  for (CaseResult& x : r.results) {
    if (x.status != Status::skipped) continue;
    x.cause = SkipCause::restart_budget_spent;
    x.culprit = culprit;
  }
  const report::ConsoleOptions plain{false, true, 100};
  EXPECT_EQ(report::render_console(r, plain), report::render_console(old, plain));
  EXPECT_EQ(report::render_markdown(r), report::render_markdown(old));
}

// Golden reports written before results carried a cause: grouped as before, by their words.
TEST(Causes, AnOldReportGroupsByItsReasonsWords) {
  const Report budget = read_golden("budget_spent.json");
  EXPECT_TRUE(std::none_of(budget.results.begin(), budget.results.end(), [](const CaseResult& x) {
    return x.cause != SkipCause::none || x.culprit;
  }));
  const auto spent = cause_with_skips(budget);
  ASSERT_TRUE(spent);
  EXPECT_EQ(spent->budget_skipped.size(), 3u);
  EXPECT_EQ(spent->in_a_row, 5);

  const Report unhealthy = read_golden("crash_known_issue.json");
  const auto crashed = cause_with_skips(unhealthy);
  ASSERT_TRUE(crashed);
  EXPECT_EQ(crashed->unhealthy_skipped.size(), 3u);
  EXPECT_EQ(report::detail::not_run_lines(*crashed),
            std::vector<std::string>{
                "the device was unhealthy after it: 3 cells not run (flash[ck])"});
}

} // namespace
