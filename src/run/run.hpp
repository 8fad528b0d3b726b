// run: the scheduler of a `check`. Builds the Plan (pure data: targets x probes x variants x
// cases), then executes it: the shared float64 oracles, one worker process per (target, probe,
// variant) through the isolation runner (targets in parallel, one worker per target at a time),
// the journal of every outcome as it lands, the progress line, and the CaseResults.
// Depends on core, isolate and probes. Knows nothing of the CLI (no CLI11, no argv) and nothing of
// advice or reports; nothing below cli includes it.
#pragma once

#include "core/case.hpp"
#include "core/expected.hpp"
#include "core/model.hpp"
#include "core/variant.hpp"
#include "isolate/isolate.hpp"
#include "probes/tolerance.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace sdpa_doctor::run {

// ---- the plan (pure) ------------------------------------------------------------------------

// A recommendation's re-run (`check --verify`): the python worker executes `snippet` (a file
// holding the recommendation's Python, byte for byte) before its cases, which it runs through the
// default dispatch, under `environment` (the recommendation's "VAR=value" lines) instead of the
// variant's. It starts its own interpreter: the start-up server's was started without them.
struct VerifyRun {
  std::string id;      // the recommendation's id; the fault switch names it `verify:<id>`
  std::string snippet; // path of the Python file
  std::vector<std::pair<std::string, std::string>> environment;
};

// One worker process's worth of work: a probe and a variant on one target, over cases.
struct PlannedRun {
  std::string target; // "cpu", "cuda:0"
  Probe probe = Probe::torch;
  Variant variant;
  std::optional<VerifyRun> verify; // python probe, variant `default` only
};

struct Plan {
  std::vector<std::string> targets;
  std::vector<Case> cases;       // unique by id, in planned order
  std::vector<PlannedRun> runs;  // grouped by target, in the order they run
};

struct PlanRequest {
  std::vector<Case> cases;
  std::vector<Probe> probes;               // which probe kinds
  std::vector<std::string> variant_filter; // empty = all; else variant names or backends
  std::vector<std::string> targets;        // empty = cpu + every GPU in the inventory
};

// Every name `--variant` may use: the variants of all probes on any target, then their backends.
std::vector<std::string> known_variant_names();
// The filter entries that name no variant or backend any probe has, in the order given.
std::vector<std::string> unknown_variants(const std::vector<std::string>& filter);

// Builds the plan; cases are de-duplicated by id keeping the first.
Plan make_plan(const PlanRequest& request, const DeviceInventory& inventory);

// One cell of the matrix, as a map key: target, probe, variant and case.
std::string cell_key(const std::string& target, Probe probe, const std::string& variant,
                     const std::string& case_id);
std::string cell_key(const CaseResult& r);

// Results in plan order (run, then case), whatever order they were produced in.
void sort_by_plan(const Plan& plan, std::vector<CaseResult>& results);

// The plan as the journal keeps it, and back.
nlohmann::json to_json(const Plan& plan);
Expected<Plan> plan_from_json(const nlohmann::json& j);

// ---- what the execution needs from the machine ------------------------------------------------

// The interpreter for the python probe, or why there is none.
struct PythonChoice {
  std::string path;   // empty = not available
  std::string reason; // why not, when path is empty
  // The interpreter was found but cannot run the probe (no torch, not a Python): the user's setup,
  // not a backend. Its cells are `skipped` with `reason`; `path` is empty.
  bool unusable = false;
  std::string unusable_path; // the interpreter that failed the pre-flight
  std::string torch_version; // from the pre-flight; empty when not asked or inconclusive
  std::string torch_lib_dir; // its torch/lib, where its GPU libraries are; empty when unknown
  // The GPUs this torch sees (index = cuda:N, name, gcnArchName on ROCm, memory, PCI address):
  // the devices its probes run on, whatever the doctor's own sources saw.
  std::vector<Device> gpus;
  std::string gpus_error; // why torch could not list them; empty when it could
};

// `requested` (--python: a path, or a name looked up on PATH) must exist and be executable, else
// an error. Empty: $SDPA_DOCTOR_PYTHON, the active venv, the first python3 on PATH whose torch can
// be found, and the one the doctor was built against, in that order. The chosen interpreter then
// runs `import torch` once within `preflight_deadline`: one that cannot (or prints no answer) is
// `unusable`; one that does not answer in time is kept (its workers meet the same deadlines).
Expected<PythonChoice> choose_python(const std::string& requested,
                                     std::chrono::milliseconds preflight_deadline);

// $XDG_CACHE_HOME/sdpa-doctor/oracle, else ~/.cache/sdpa-doctor/oracle; empty with neither.
std::string default_oracle_cache_dir();

// `requested` created if missing, or a new temporary directory when empty.
Expected<std::string> make_run_dir(const std::string& requested);

// ---- the execution --------------------------------------------------------------------------

// The Python probe's start-up server (sdpa_probe.py --serve): one `import torch` that Python
// workers fork from, never touching a GPU itself. Stops when the last copy of `service` goes.
struct ProbeServer {
  std::shared_ptr<isolate::Service> service; // null: none runs (off, no python, cannot start)
  std::string socket;
};

// Where progress goes on stderr: nowhere (-q), a live terminal line, or a log line now and then.
enum class ProgressMode { none, terminal, log };

struct ExecuteOptions {
  std::string run_dir;       // journal, oracles, worker logs
  std::string worker_dir;    // where the worker executables are; empty = beside the doctor
  std::string python;        // interpreter for the python probe; empty = not available
  std::string python_reason; // why there is none, when empty
  bool python_unusable = false; // its cells are `skipped` with python_reason, not `unsupported`
  // The torch under test's library folders: the reference worker looks there first for the GPU
  // runtime and compiler (SDPA_DOCTOR_TORCH_LIB_DIRS). Empty: its own environment decides.
  std::vector<std::string> torch_lib_dirs;
  probes::TolerancePolicy tolerances;
  std::optional<std::chrono::milliseconds> case_timeout; // overrides the size-based default
  std::chrono::milliseconds worker_timeout{0};           // 0 = none
  // Spawn to first `begin` (interpreter start, `import torch`) and between cases.
  std::chrono::milliseconds startup_timeout{60'000};
  int max_worker_restarts = 4;
  bool keep_core_dumps = false;
  int warmup = 1;
  int repeat = 3;
  // A case's calls stop warming up and repeating once they have taken this long (0 = never).
  std::chrono::milliseconds call_budget{2'000};
  // The Python workers fork from one start-up server that imported torch once (sdpa_probe.py
  // --serve); false: each starts its own interpreter.
  bool probe_server = true;
  // A start-up server the caller started (start_probe_server), shared by several execute_plan
  // calls; none: execute_plan starts its own when it needs one.
  ProbeServer shared_probe_server;
  // Float64 oracles kept across runs (empty = none), up to this many bytes.
  std::string oracle_cache_dir;
  int64_t oracle_cache_bytes = int64_t{2} << 30;
  ProgressMode progress = ProgressMode::none;
  std::chrono::milliseconds progress_interval{10'000}; // between log lines (ProgressMode::log)
  const std::atomic<bool>* interrupted = nullptr;
  // Recorded in the journal's `start` event as it is, for whoever rebuilds the report from the
  // journal (the caller's options and report header; the run never reads it).
  nlohmann::json journal_header;
  // Cells an earlier run of this plan measured (`check --resume`): not run again, and returned
  // in `results` as they were. Only cells that ended (is_measured) belong here.
  std::vector<CaseResult> finished;
};

struct ExecuteResult {
  std::vector<CaseResult> results;
  std::vector<WorkerInfo> workers;
  std::vector<Finding> findings; // wedged/unhealthy devices, missing workers
  double oracle_ms = 0;
  size_t oracle_cache_hits = 0; // oracles taken from the cache instead of computed
  double probes_ms = 0;
  std::string journal_path;
  // When the journal's `start` was written: what later events' t_ms count from.
  std::chrono::steady_clock::time_point journal_opened;
};

// Starts one for options.python unless options.probe_server is off or there is no python; a
// check keeps it for its run, its shrinking and its advice's re-runs (ExecuteOptions::
// shared_probe_server). Workers start on their own when it is null.
ProbeServer start_probe_server(const ExecuteOptions& options);

// Runs every planned (run, case) pair; every one ends in `results` with exactly one status.
ExecuteResult execute_plan(const Plan& plan, const DeviceInventory& inventory,
                           const ExecuteOptions& options);

// What the re-runs of the advice decided.
struct VerifiedAdvice {
  // Per device: the first configuration whose re-run passed every case, with the ones rejected
  // before it; when none passed, the advice's own choice with its failed verification.
  std::vector<Recommendation> recommendations;
  std::vector<Finding> findings; // recommendation-failed-verification, one per such device
  std::set<Status> statuses; // what re-run cases ended in, pass left out (for --fail-on)
};

// ---- the journal, read back -----------------------------------------------------------------

// What a run's journal holds: enough to rebuild its report after the doctor was killed, and to
// resume it. A journal appended to by `check --resume` holds both runs: the last word on each
// cell wins.
struct JournalContents {
  nlohmann::json header;           // the first start's ExecuteOptions::journal_header
  Plan plan;                       // the first start's plan
  std::vector<CaseResult> results; // the last result of each cell, in plan order
  std::vector<WorkerInfo> workers; // the last word on each (device, probe, variant)
  std::vector<Finding> findings;   // the run's own (wedged devices, workers that cannot start)
  // What the check decided after the last start's run, once it had: its shrinking and the
  // verified advice (none when it did not get that far, or did not shrink or verify).
  std::optional<std::vector<Shrink>> shrinks;
  std::optional<VerifiedAdvice> verified;
  bool finished = false;           // the last start reached its end
  size_t lines_ignored = 0;        // torn or foreign lines (a kill mid-write leaves one)
};

// `path`: a journal.jsonl, or the run directory that holds one. A file that is not a journal, or
// one without a start event, is an error naming it.
Expected<JournalContents> read_journal(const std::string& path);

// What a check decided after its run, appended to that run's journal so that `report JOURNAL`
// gives what the check printed. A resumed run shrinks and verifies again: the last word wins, and
// a new start clears it.
void journal_shrinks(const ExecuteResult& run, const std::vector<Shrink>& shrinks);
void journal_verified_advice(const ExecuteResult& run, const VerifiedAdvice& verified);

// A result that ended: anything but a cell the run was interrupted before. Resuming re-runs the
// others.
bool is_measured(const CaseResult& result);

// ---- verified advice ------------------------------------------------------------------------

// Re-runs each recommendation (then, while its re-run fails, each alternative for its device in
// the order given) in a fresh python worker under exactly the printed flags: the environment
// before the interpreter starts, the Python snippet executed as printed, then every case the
// recommendation was proven on (taken from `results`) through the default dispatch, each isolated
// like any other case (in exec.run_dir/verify/). Without a usable python probe nothing runs and
// each recommendation's verification says why.
VerifiedAdvice verify_recommendations(const std::vector<Recommendation>& recommendations,
                                      const std::vector<Recommendation>& alternatives,
                                      const std::vector<CaseResult>& results,
                                      const DeviceInventory& inventory, const ExecuteOptions& exec);

// "VAR=value" lines (Recommendation::environment) as pairs; blank lines and lines without '='
// are skipped.
std::vector<std::pair<std::string, std::string>> environment_lines(const std::string& text);

// ---- shrinking (run/shrink.hpp holds the pure search) --------------------------------------

struct ShrinkBudget;
// For every failing (device, probe, variant) in `results`: the boundary of its failure and its
// smallest failing case, each probe an isolated case run through execute_plan (in
// run_dir/shrink/). Empty when nothing failed: shrinking costs only when something fails.
std::vector<Shrink> shrink_failures(const std::vector<CaseResult>& results,
                                    const DeviceInventory& inventory, const ExecuteOptions& exec,
                                    const ShrinkBudget& budget);

} // namespace sdpa_doctor::run
