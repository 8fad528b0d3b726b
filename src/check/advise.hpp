// check/advise: the advice over a check's results, shared by `check` and `report JOURNAL`.
// Internal to check.
#pragma once

#include "advice/advice.hpp"
#include "check/request.hpp"
#include "core/model.hpp"
#include "run/run.hpp"

#include <vector>

namespace sdpa_doctor::check {

// What the advice needs besides the results: the request's fail-on, target and the known issues
// (the shipped file and every --known-issues one, read now: a bad one is Fatal, exit 2).
struct AdviceInputs {
  std::set<Status> fail_on;
  advice::AdviceOptions advice;
  advice::KnownIssues issues;
};
AdviceInputs advice_inputs(const CheckRequest& request);

// Worker versions into the report's own where it lacks them, keyed by the probe that saw them
// (torch_cpp, torch_python).
void add_worker_versions(Report& report);

// Findings (the run's own first), recommendations and matched known issues into the report.
// Returns the advice's alternatives: per device, the next proven configurations, for the
// re-runs that verify the advice.
std::vector<Recommendation> advise_report(Report& report, const AdviceInputs& in,
                                          std::vector<Finding> run_findings);

// The advice's re-runs into the report: the recommendations they settled on and their findings.
// True when a re-run case ended in a --fail-on status: that fails the check as any cell would.
bool take_verified_advice(Report& report, run::VerifiedAdvice verified,
                          const std::set<Status>& fail_on);

// What a resumed run keeps of the one before: its workers and findings where this run did not
// replace them (a variant measured in full then is not run again, but its facts still count).
void keep_earlier(Report& report, std::vector<Finding>& findings,
                  const run::JournalContents& before);

} // namespace sdpa_doctor::check
