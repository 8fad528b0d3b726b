// check: the check pipeline, between the CLI (which declares the flags) and the scheduler:
// request -> devices -> plan -> execute -> shrink -> advise -> verify -> exit code -> reports
// (run_check.cpp). Its parts: the flags parsed once into a typed CheckRequest (request.hpp); the
// case-planning flags `check` and `cases` share (case_plan.hpp, declared once by cli's
// case_plan_options.cpp); the steps before the workers (steps.hpp: the Python located, the
// header facts and inventory, the LibTorch plugin chosen, the plan checked against the devices,
// the run directory claimed through run::claim_run_dir, here for check and --resume and for
// cli's self-test --run-dir); the advice over results (advise.hpp); the one exit-code rule
// (exit_code.hpp); the reports written (outputs.hpp); `report JOURNAL` (rebuild.cpp). The journal
// keeps the request and the measured header facts (journal_header.hpp, format 1; the earlier
// format still read), so a killed check is resumed (`check --resume`) or its reports rebuilt
// (`report JOURNAL`) deciding exactly as it would have.
#pragma once

#include "check/outputs.hpp"
#include "check/request.hpp"
#include "run/run.hpp"

#include <string>

namespace sdpa_doctor::check {

// The check; its exit code (check/exit_code.hpp).
int run_check(const CheckRequest& request, const Outputs& outputs);

// `check --resume RUN-DIR`: the journal's request, its cells that ended kept, the rest run.
int resume_check(const std::string& run_dir, const Outputs& outputs);

// `report JOURNAL`: the check's reports rebuilt from its journal, every planned cell in them
// (`skipped`, "not measured", where the journal has no result); an unfinished journal reads as an
// interrupted run, with the command that resumes it.
int rebuild_report(const std::string& journal, const Outputs& outputs);

// `dir` held by this process for its run (check, check --resume, self-test). Fatal when another
// run holds it (exit 2, naming that run) or it cannot be written: exit 2 for a directory the user
// `named` that refuses writes, 4 for a full disk or a temporary directory of the doctor's own.
run::RunDirLock locked_run_dir(const std::string& dir, bool named);

} // namespace sdpa_doctor::check
