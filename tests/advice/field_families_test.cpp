// Every field family that a case can show is in the default check: each shipped known issue
// whose rules name case features (dtype, head dim, mask, layout, causal alignment, query length,
// GQA, dropout, mode) matches, with the failure its source published, at least one cell the quick
// suite plans (a case, eager or in its compile family compiled). Entries conditioned only on an
// arch, a version or a text match any cell and say nothing of the plan; families no case can show
// (nested or varlen tensors, speed, out-of-memory fall-back) have no case condition to meet.
#include "advice/advice.hpp"
#include "cases/cases.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace sdpa_doctor;
using namespace sdpa_doctor::advice;

namespace {

bool names_case_features(const IssueRule& rule) {
  return !rule.dtypes.empty() || !rule.masks.empty() || !rule.layouts.empty() ||
         !rule.own_layouts[0].empty() || !rule.own_layouts[1].empty() ||
         !rule.own_layouts[2].empty() || rule.mask_dtype_differs || rule.head_dim_min ||
         rule.head_dim_max || rule.causal || rule.causal_bottom_right || rule.query_len_min ||
         rule.query_len_max || rule.gqa || rule.dropout || !rule.modes.empty();
}

// The quick suite's cells as the published failure: its text, status, variant and device facts,
// on each planned case and mode.
std::vector<std::string> matching_cells(const KnownIssue& issue, const std::vector<Case>& quick) {
  std::vector<std::string> cells;
  for (const Case& c : quick) {
    for (const Mode mode : {Mode::eager, Mode::compiled}) {
      if (mode == Mode::compiled && !cases::in_compile_family(c, "quick")) continue;
      CaseResult r = verbatim_result(*issue.verbatim);
      r.kase = c;
      r.case_id = c.id();
      r.mode = mode;
      if (issue_matches(issue, r, issue.verbatim->facts))
        cells.push_back(r.case_id + (mode == Mode::compiled ? " compiled" : ""));
    }
  }
  return cells;
}

TEST(FieldFamilies, EveryKnownIssueWithCaseConditionsMatchesAQuickCell) {
  const auto issues = load_known_issues(sdpa_test::source_path("data/known_issues.json"));
  ASSERT_TRUE(issues) << issues.error().message;
  const auto quick = cases::suite_cases("quick");
  ASSERT_TRUE(quick) << quick.error().message;
  int with_case_conditions = 0;
  for (const KnownIssue& issue : issues->issues) {
    bool conditioned = false;
    for (const IssueRule& rule : issue.rules) conditioned = conditioned || names_case_features(rule);
    if (!conditioned) continue;
    ++with_case_conditions;
    ASSERT_TRUE(issue.verbatim) << issue.id << ": a shipped entry gives the failure it matches";
    EXPECT_FALSE(matching_cells(issue, *quick).empty())
        << issue.id << ": no cell of the quick suite can show it; add its cheapest case";
  }
  // The mapping holds for the families of today's entries, not for none.
  EXPECT_GE(with_case_conditions, 10);
}

// The test can fail: an entry whose case no quick cell is (head dim 1024 under fp32) matches none.
TEST(FieldFamilies, AnEntryNoQuickCaseShowsMatchesNoCell) {
  const auto quick = cases::suite_cases("quick");
  ASSERT_TRUE(quick) << quick.error().message;
  const auto parsed = parse_known_issues(
      R"([{"id":"x","title":"t","link":"https://x/1","advice":"a",)"
      R"("match":{"dtypes":["fp32"],"head_dim":{"min":1024},"statuses":["mismatch"]},)"
      R"("verbatim":{"text":"wrong","published":false,"note":"n","in":"reason",)"
      R"("status":"mismatch","variant":"flash","case":"fp32-b1-h1-q8-k8-d1024"}}])",
      "test");
  ASSERT_TRUE(parsed) << parsed.error().message;
  ASSERT_EQ(parsed->issues.size(), 1u);
  EXPECT_TRUE(matching_cells(parsed->issues[0], *quick).empty());
}

} // namespace
