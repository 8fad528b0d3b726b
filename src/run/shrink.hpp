// run/shrink: the pure part of failure shrinking. Given one failing case and the outcomes of the
// probe cases tried so far, which cases to try next, and what the outcomes say: the conditions the
// failure needs ("head_dim > 128", "causal", "query length <= 16") and the smallest failing case.
// Every numeric axis is tried smaller; a short query is also tried longer, since decode and
// tiny-causal kernels fail only below some length. No I/O: the driver in
// shrink_run.cpp runs each batch through execute_plan like any other cases.
#pragma once

#include "core/case.hpp"
#include "core/expected.hpp"
#include "core/model.hpp"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sdpa_doctor::run {

// `--shrink-budget`: "24" (cases), "60s" (seconds) or "24,60s"; per failing (device, variant).
struct ShrinkBudget {
  int cases = 24;
  double seconds = 60;
};
Expected<ShrinkBudget> parse_shrink_budget(std::string_view text);

enum class ProbeOutcome { fails, passes, unknown }; // unknown: unsupported, skipped, not run
ProbeOutcome outcome_of(Status status);

class ShrinkSearch {
public:
  explicit ShrinkSearch(const Case& failing);
  // The next batch to run (distinct ids); empty when the search is over.
  std::vector<Case> next();
  void record(const Case& c, ProbeOutcome outcome);
  // Ends the search early (budget): what is known so far goes into the result.
  void stop() { m_stopped = true; }
  bool done() const { return m_stage == Stage::done; }
  // verdict, conditions and minimal of a Shrink (the rest is the driver's).
  void fill(Shrink& out) const;

private:
  enum class Stage { rerun, axes, combine, bisect, confirm, done };
  struct Bisect {
    std::string axis;
    std::vector<int64_t> ladder; // ascending; [lo] passes, [hi] fails (upward: the reverse)
    size_t lo = 0, hi = 0;
    bool upward = false; // the failure needs the axis small: "query length <= 16"
  };
  ProbeOutcome outcome(const Case& c) const;
  void finish_axes();
  std::vector<Case> bisect_batch() const;

  Case m_original;
  Case m_current; // fails, as far as is known
  Stage m_stage = Stage::rerun;
  bool m_stopped = false;
  bool m_flaky = false;
  std::map<std::string, ProbeOutcome> m_outcomes; // by case id
  std::vector<std::pair<std::string, Case>> m_axis_cases; // (axis, candidate) of the axes stage
  std::vector<ShrinkCondition> m_conditions;
  std::vector<Bisect> m_bisects;
  std::optional<Case> m_combined; // the all-reduced candidate being confirmed
};

// "flash on cpu: crash only when head_dim > 128 and causal", "... for every case", "... flaky".
std::string shrink_rule(const Shrink& s);

} // namespace sdpa_doctor::run
