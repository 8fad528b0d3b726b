// check/request: a check's flags, parsed once into the typed request that the run, the advice
// and the journal use. The journal keeps the request itself, so `check --resume` and `report
// JOURNAL` decide as the original run did without reading a flag (or a case file) again.
#pragma once

#include "core/case.hpp"
#include "core/expected.hpp"
#include "core/model.hpp"
#include "cases/cases.hpp"
#include "run/shrink.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace sdpa_doctor::check {

// The flags of `check` as given. Journals of doctors before the typed request (format 0) keep
// this struct as JSON ("check_options"); they are read through parse_request like new flags.
struct CheckOptions {
  std::string suite; // --suite; empty: quick unless --case, --case-file or --model plan cases
  std::vector<std::string> case_specs;
  std::string case_file;
  std::string model_config;          // --model: a Hugging Face config.json
  int64_t max_len = cases::k_default_model_max_len;
  bool train = false;                // each planned case with Lq > 1 runs its backward too
  std::vector<std::string> probes;   // libtorch, python, reference
  std::vector<std::string> variants; // filter
  std::vector<std::string> devices;  // targets
  std::vector<std::string> dtypes;   // filter: fp16, bf16, fp32; empty = all
  std::vector<std::string> modes;    // filter: eager, compiled; empty = both
  std::string compile = "aot_eager"; // torch.compile's backend for compiled cells (--compile)
  std::string python;
  bool no_python = false;
  double case_timeout_s = 0;
  double worker_timeout_s = 0;
  double startup_timeout_s = 60;
  double plugin_build_timeout_s = 900;
  double cache_lock_timeout_s = 120;
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
  bool shrink = true;                   // --shrink / --no-shrink: shrink every failure found
  std::string shrink_budget = "24,60s"; // per failing (device, variant)
  bool verify = true; // --verify / --no-verify: re-run the advice under its own flags
  double progress_every_s = 10; // a progress line this often when stderr is not a terminal
};

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(CheckOptions, suite, case_specs, case_file, model_config, max_len, train, probes, variants, devices, dtypes, python, no_python, case_timeout_s, worker_timeout_s, startup_timeout_s, plugin_build_timeout_s, cache_lock_timeout_s, max_worker_restarts, keep_core_dumps, fail_on, target, known_issue_files, tolerance, require_gpu, modes, compile, sysfs_root, run_dir, repeat, warmup, time_budget_s, no_probe_server, oracle_cache, oracle_cache_gib, no_oracle_cache, shrink, shrink_budget, verify, progress_every_s)

using Millis = std::chrono::milliseconds;

// What a check is asked to do, every value checked.
struct CheckRequest {
  // What runs: the planned cases themselves (a case file is read once), on which probes,
  // variants and targets.
  std::vector<Case> cases;
  std::vector<Case> gpu_cases; // the suite's GPU-only cases: planned where a GPU is a target
  std::string suite; // the report's label: cases::PlannedCases::label
  std::string model; // --model's description; empty without it
  std::vector<Probe> probes;
  std::vector<std::string> variant_filter;
  std::vector<std::string> targets; // empty: cpu and every GPU
  std::vector<Mode> modes;          // --mode; empty: both
  std::vector<std::string> compiled_cases; // the ids that also get compiled cells
  std::string compile_backend = "aot_eager"; // --compile
  std::string python;               // --python as named; empty: the doctor finds one

  // How it runs.
  Millis case_timeout{0}; // 0: from each case's size
  Millis worker_timeout{0};
  Millis startup_timeout{60'000};
  Millis plugin_build_timeout{900'000}; // the LibTorch plugin's compiler
  Millis cache_lock_timeout{120'000};   // waiting for another check's lock of a cache folder
  int max_worker_restarts = 4;
  bool keep_core_dumps = false;
  int repeat = 3;
  int warmup = 1;
  Millis call_budget{2'000};
  bool probe_server = true;
  std::string oracle_cache_dir; // empty: no cache
  int64_t oracle_cache_bytes = int64_t{2} << 30;
  Millis progress_interval{10'000};
  std::string sysfs_root = "/";
  std::string run_dir; // empty: a new temporary directory

  // How it is judged and advised.
  cases::TolerancePolicy tolerances;
  std::set<Status> fail_on;
  std::optional<Case> advice_target; // --target, else --model's longest prompt
  std::vector<std::string> known_issue_files;
  bool require_gpu = false;
  std::optional<run::ShrinkBudget> shrink; // nullopt: --no-shrink
  bool verify = true;

  bool runs_python() const;
};

// The flags checked and typed; a bad one is Fatal (exit 2) naming it, before anything runs.
CheckRequest parse_request(const CheckOptions& options);

// The request's form in the journal, and back. Reading refuses what this doctor would not have
// written (an error naming the field), never guesses.
nlohmann::json to_json(const CheckRequest& request);
Expected<CheckRequest> request_from_json(const nlohmann::json& json);

} // namespace sdpa_doctor::check
