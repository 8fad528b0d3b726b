// cli/check: what `check` shares with `report JOURNAL`, which rebuilds a check's report from its
// journal: the check's options (kept in the journal as JSON, so a resumed or rebuilt run decides
// exactly as the original would), the advice over results and the writing of every report.
// Internal to cli.
#pragma once

#include "advice/advice.hpp"
#include "cli/commands.hpp"
#include "core/model.hpp"
#include "cases/cases.hpp"
#include "run/run.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace sdpa_doctor::cli {

struct CheckOptions {
  std::string suite; // --suite; empty: quick unless --case, --case-file or --model plan cases
  std::vector<std::string> case_specs;
  std::string case_file;
  std::string model_config;          // --model: a Hugging Face config.json
  int64_t max_len = cases::k_default_model_max_len;
  bool train = false;                // refused: no backward cases yet
  std::vector<std::string> probes;   // libtorch, python, reference
  std::vector<std::string> variants; // filter
  std::vector<std::string> devices;  // targets
  std::vector<std::string> dtypes;   // filter: fp16, bf16, fp32; empty = all
  std::string python;
  bool no_python = false;
  double case_timeout_s = 0;
  double worker_timeout_s = 0;
  double startup_timeout_s = 60;
  int max_worker_restarts = 4;
  bool keep_core_dumps = false;
  std::string fail_on = "default";
  std::string target;
  std::vector<std::string> known_issue_files;
  std::string tolerance;
  bool require_gpu = false;
  std::string sysfs_root = "/";
  std::string run_dir;
  int repeat = 3;
  int warmup = 1;
  double time_budget_s = 2; // per case: no more warm-ups or repeats past it
  bool no_probe_server = false;
  std::string oracle_cache; // empty: the default directory
  double oracle_cache_gib = 2;
  bool no_oracle_cache = false;
  bool shrink = true;             // --shrink / --no-shrink: shrink every failure found
  std::string shrink_budget = "24,60s"; // per failing (device, variant)
  bool verify = true; // --verify / --no-verify: re-run the advice under its own flags
  double progress_every_s = 10; // a progress line this often when stderr is not a terminal
};

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(CheckOptions, suite, case_specs, case_file, model_config, max_len, train, probes, variants, devices, dtypes, python, no_python, case_timeout_s, worker_timeout_s, startup_timeout_s, max_worker_restarts, keep_core_dumps, fail_on, target, known_issue_files, tolerance, require_gpu, sysfs_root, run_dir, repeat, warmup, time_budget_s, no_probe_server, oracle_cache, oracle_cache_gib, no_oracle_cache, shrink, shrink_budget, verify, progress_every_s)

// Worker versions into the report's own where it lacks them, keyed by the probe that saw them
// (torch_cpp, torch_python).
void add_worker_versions(Report& report);

// What the advice and the exit code need besides the results.
struct AdviceInputs {
  std::set<Status> fail_on;
  advice::AdviceOptions advice;
  advice::KnownIssues issues;
  bool require_gpu = false;
};

// From the check's options; a bad value or an unreadable known-issues file is Fatal (exit 2).
AdviceInputs advice_inputs(const CheckOptions& o, std::optional<Case> target);

// Advice, findings (the run's own first) and the exit code of a finished or interrupted run.
// `signal`: what interrupted it (SIGINT, SIGTERM), 0 for none. Returns the advice's alternatives:
// per device, the next proven configurations, for the re-runs that verify the advice.
std::vector<Recommendation> advise_and_decide(Report& report, const AdviceInputs& in,
                                              std::vector<Finding> run_findings, int signal);

// The advice's re-runs into the report: the recommendations they settled on and their findings.
// A re-run case that failed (by --fail-on) fails the check, as any other case would.
void take_verified_advice(Report& report, run::VerifiedAdvice verified,
                          const std::set<Status>& fail_on);

// Redacts when asked, prints the console report (unless --json is stdout) and the journal's
// path, then writes every report asked for. The report's exit code, or 4 when one failed.
int present_and_write(Report report, const GlobalOptions& global, const std::string& journal);

// `dir` held by this process for its run (check, check --resume, self-test). Fatal when another
// run holds it (exit 2, naming that run) or it cannot be written: exit 2 for a directory the user
// `named` that refuses writes, 4 for a full disk or a temporary directory of the doctor's own.
run::RunDirLock locked_run_dir(const std::string& dir, bool named);

} // namespace sdpa_doctor::cli
