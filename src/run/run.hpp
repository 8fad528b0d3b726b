// run: the scheduler of a `check`. Builds the Plan (pure data: targets x probes x variants x
// cases), then executes it: one worker process per (target, probe, variant) through the isolation
// runner (targets in parallel, one worker per target at a time; `WorkerRunner`: process_runner()
// over isolate::run_worker in a check, a scripted fake in the scheduling test), each outcome
// folded into its CaseResult (protocol::apply_result) and journalled as it lands
// (journal.hpp), the progress line. Also: the float64 oracle computed beside the run
// (oracle_feed.hpp) and kept across runs (oracle_cache.hpp); failure shrinking (shrink.hpp, its
// driver shrink_run.cpp); verified advice (verify.cpp: each recommendation re-run in a fresh
// python worker under its own flags, snippet in RUN-DIR/verify/); how each worker is launched and
// a GPU's health checked (launch.hpp); which Python the python probe uses and which LibTorch
// plugin the libtorch probe loads (torch_plugin.hpp).
//
// The run directory (--run-dir, else a new one in $TMPDIR or /tmp) keeps journal.jsonl, each
// worker's cases file and its logs (capped, isolate::RunnerOptions::log_cap_bytes). One run holds
// it at a time: claim_run_dir, called by check::locked_run_dir for `check`, `check --resume` and
// `self-test --run-dir`. A later write that fails there (a cases file, the journal) is
// ExecuteResult::write_error: the cells it kept from running are skipped, a run-dir-unwritable
// finding says why, and check exits 4.
//
// Depends on core, protocol, isolate, cases and workers (the oracle file it computes, the torch
// worker's plugin variable and refusal words, the fault switch). Knows nothing of the CLI (no
// CLI11, no argv) and nothing of advice or reports; nothing below check includes it.
#pragma once

#include "core/case.hpp"
#include "core/expected.hpp"
#include "core/model.hpp"
#include "core/variant.hpp"
#include "isolate/isolate.hpp"
#include "cases/tolerance.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace sdpa_doctor::run {

class Journal; // run/journal.hpp

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
  // Compiled: every SDPA call of a case inside torch.compile (the python probe only), over
  // `case_ids` alone (the compile family), in the plan's case order. Eager runs take every case.
  Mode mode = Mode::eager;
  std::vector<std::string> case_ids;
  // Whether this run takes `c`: every case when eager, its listed ones when compiled.
  bool takes(const Case& c) const;
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

// Which modes a plan runs (`--mode`; empty = both). Compiled cells are planned for the python
// probe's variants that run on the target, over the cases `case_ids` names (the suite's compile
// family); none where it is empty.
struct ModeRequest {
  std::vector<Mode> modes;
  std::vector<std::string> case_ids;
};

// The variants whose compiled cells are planned on `target`: the python probe's, less those with
// no kernel on a CPU (mem_efficient and cudnn refuse every CPU case: their compiled rows would be
// `unsupported` noise).
bool compiles_on(const Variant& variant, const std::string& target);

// Every name `--variant` may use: the variants of all probes on any target, then their backends.
std::vector<std::string> known_variant_names();
// The filter entries that name no variant or backend any probe has, in the order given.
std::vector<std::string> unknown_variants(const std::vector<std::string>& filter);

// Builds the plan; cases are de-duplicated by id keeping the first. Eager cells only unless
// `modes` names compiled cases.
Plan make_plan(const PlanRequest& request, const DeviceInventory& inventory,
               const ModeRequest& modes = {});

// One cell of the matrix, as a map key: target, probe, variant, mode and case.
std::string cell_key(const std::string& target, Probe probe, const std::string& variant, Mode mode,
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
  // The GPUs this torch sees (index = cuda:N, name, gcnArchName on ROCm, memory, PCI address):
  // the devices its probes run on, whatever the doctor's own sources saw.
  std::vector<Device> gpus;
  std::string gpus_error; // why torch could not list them; empty when it could
  // Where this torch keeps its own libraries: torch/lib, then TheRock's _rocm_sdk_*/lib folders
  // on its sys.path. The enumeration worker looks for the HIP runtime there first.
  std::vector<std::string> torch_lib_dirs;
  // The HIP runtime files mapped in the pre-flight's process once torch was imported (none for
  // a CPU or CUDA torch; two is a broken install); empty when not asked.
  std::vector<std::string> torch_hip_runtimes;
  // The named interpreter did not answer locate_python in time: the pre-flight does not wait for
  // it again and finds it unusable, naming that step.
  bool hung = false;
};

// What the default interpreter is chosen from (python_candidates), as this machine answers it.
struct PythonSearch {
  std::string env_python;   // $SDPA_DOCTOR_PYTHON; empty when unset
  std::string exe_dir;      // the running doctor's directory
  std::string virtual_env;  // $VIRTUAL_ENV (the active venv's root); empty when none
  std::string path_python3; // the first python3 on PATH; empty when none
  std::string build_python; // the interpreter this build was configured with; empty when none
};
// This process's PythonSearch: its environment, /proc/self/exe and build_info.
PythonSearch python_search_here();

// The interpreters to try when --python is not given, in order: $SDPA_DOCTOR_PYTHON; the
// environment the doctor is installed in (a `python3` or `python` beside it whose parent folder
// holds pyvenv.cfg or conda-meta: a pip install into a venv or conda env); the active venv's; the
// first python3 on PATH; the build-time interpreter, only when the doctor runs from its build tree
// (CMakeCache.txt beside it). No empty entry, no duplicate.
std::vector<std::string> python_candidates(const PythonSearch& search);

// `requested` (--python: a path, or a name looked up on PATH) must exist and be executable, else
// an error. Empty: the first of python_candidates(python_search_here()) whose torch can be
// found. Cheap: torch is found, not
// imported (tens of milliseconds; each interpreter asked gets `deadline`, at most 20 s);
// `torch_lib_dirs` is filled. No interpreter with torch is not an error: `path` is then empty and
// `reason` says why.
Expected<PythonChoice> locate_python(const std::string& requested,
                                     std::chrono::milliseconds deadline);

// The located interpreter runs `import torch` once within `deadline`: one that cannot, prints no
// answer or does not answer in time (a wedged GPU or driver) is `unusable`, its reason naming the
// step that failed or hung. Fills torch_version, gpus and torch_hip_runtimes.
// `server`: the socket of a start-up server for this interpreter (empty: none), whose child then
// answers without a second import.
PythonChoice preflight_python(PythonChoice located, std::chrono::milliseconds deadline,
                              const std::string& server = {});

// SDPA_DOCTOR_TEST_FAULT as this process's workers will read it, checked as they parse it; empty
// when unset. A malformed value is an error naming what is wrong.
Expected<std::string> planted_faults_in_environment();

// $XDG_CACHE_HOME/sdpa-doctor/oracle, else ~/.cache/sdpa-doctor/oracle; empty with neither.
std::string default_oracle_cache_dir();

// `requested` created if missing, or a new temporary directory (core temp_directory()) when empty.
Expected<std::string> make_run_dir(const std::string& requested);

// The lock file of a run directory; it says which run holds it (pid, host, start time).
inline constexpr const char* k_run_lock_name = "run.lock";

// A run directory held by this process: an flock on RUN-DIR/run.lock, which the kernel drops when
// the process ends however it ends, so a killed run never leaves a stale lock. Movable only.
class RunDirLock {
public:
  RunDirLock() = default;
  explicit RunDirLock(int fd) : m_fd(fd) {}
  ~RunDirLock();
  RunDirLock(RunDirLock&& other) noexcept;
  RunDirLock& operator=(RunDirLock&& other) noexcept;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

private:
  int m_fd = -1;
};

// What became of a claim on a run directory: held, or why not.
struct RunDirClaim {
  enum class Refusal {
    none,         // held: `lock`
    in_use,       // another run holds it; `problem` names that run
    not_writable, // no permission, a read-only file system: the directory's own fault
    disk_failed,  // a full disk, a quota, an I/O error: the machine's
  };
  std::optional<RunDirLock> lock;
  Refusal refusal = Refusal::none;
  std::string problem; // one line, empty when held
};

// Takes `dir`'s lock without waiting and writes this process into it: also the run's first write
// to the directory, so a full disk is found before anything runs. `dir` must exist.
RunDirClaim claim_run_dir(const std::string& dir);

// ---- the execution --------------------------------------------------------------------------

// The Python probe's start-up server (sdpa_probe --serve): one `import torch` that Python
// workers fork from, never touching a GPU itself. Stops when the last copy of `service` goes.
// Compiled cells are served by a second server that the first forks once torch is imported: it
// warms Dynamo (seconds) while the first serves the pre-flight and the eager workers.
struct ProbeServer {
  std::shared_ptr<isolate::Service> service; // null: none runs (off, no python, cannot start)
  std::string socket;          // the pre-flight's and the eager workers'
  std::string compiled_socket; // the compiled cells'; empty when no compiled cell is planned
  // The socket a worker of `mode` connects to (a compiled worker without a warmed server of its
  // own still gains the imported torch).
  const std::string& for_mode(Mode mode) const {
    return mode == Mode::compiled && !compiled_socket.empty() ? compiled_socket : socket;
  }
};

// What a start-up server imports before the workers that need it come, so that no forked worker
// pays for it: what torch's first backward imports lazily (a third of a second), the causal bias
// module of bottom-right cases (with Dynamo: most of a second), and Dynamo warmed under the
// compiled cells' backend (a cold first compile costs a second).
struct ServerWarmUps {
  bool backward = false;
  bool causal_bias = false;    // bottom-right cases: torch.nn.attention.bias imports Dynamo
  std::string compile_backend; // empty: no compiled cell
};

// Where progress goes on stderr: nowhere (-q), a live terminal line, or a log line now and then.
enum class ProgressMode { none, terminal, log };

// How execute_plan runs one worker over its cases: the seam between the scheduling (which
// worker runs when, on which target, what its outcomes mean for the results) and the processes.
// process_runner() is the real one (isolate::run_worker); a unit test drives the scheduling with
// a fake that returns scripted outcomes. Called from one thread per target at the same time.
class WorkerRunner {
public:
  virtual ~WorkerRunner() = default;
  // One outcome per case of `cases`, in their order (isolate::run_worker's contract).
  virtual isolate::WorkerRunReport run(const isolate::WorkerCommand& command,
                                       const std::vector<isolate::PlannedCase>& cases,
                                       const isolate::RunnerOptions& options,
                                       isolate::RunObserver* observer) = 0;
};

// Runs each worker as child processes through isolate::run_worker.
WorkerRunner& process_runner();

struct ExecuteOptions {
  std::string run_dir;       // journal, oracles, worker logs
  std::string worker_dir;    // where the worker executables are; empty = beside the doctor
  std::string python;        // interpreter for the python probe; empty = not available
  std::string python_reason; // why there is none, when empty
  bool python_unusable = false; // its cells are `skipped` with python_reason, not `unsupported`
  // The torch under test's library folders: the reference worker looks there first for the GPU
  // runtime and compiler (SDPA_DOCTOR_TORCH_LIB_DIRS). Empty: its own environment decides.
  std::vector<std::string> torch_lib_dirs;
  // The LibTorch plugin the libtorch worker loads (torch_plugin_for: built for the torch under
  // test); empty: the worker's own. `torch_plugin_why_not`, when set, is why there is none: the
  // reason of every libtorch cell.
  std::string torch_plugin;
  std::string torch_plugin_why_not;
  cases::TolerancePolicy tolerances;
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
  // The Python workers fork from one start-up server that imported torch once (sdpa_probe
  // --serve); false: each starts its own interpreter.
  bool probe_server = true;
  // A start-up server the caller started (start_probe_server), shared by several execute_plan
  // calls; none: execute_plan starts its own when it needs one.
  ProbeServer shared_probe_server;
  // Float64 oracles kept across runs (empty = none), up to this many bytes.
  std::string oracle_cache_dir;
  int64_t oracle_cache_bytes = int64_t{2} << 30;
  // How long to wait for another run holding the oracle cache's lock; past it, no cache.
  std::chrono::milliseconds cache_lock_timeout{120'000};
  ProgressMode progress = ProgressMode::none;
  std::chrono::milliseconds progress_interval{10'000}; // between log lines (ProgressMode::log)
  const std::atomic<bool>* interrupted = nullptr;
  // Recorded in the journal's `start` event as it is, for whoever rebuilds the report from the
  // journal (the caller's options and report header; the run never reads it).
  nlohmann::json journal_header;
  // Words replaced in every string the journal keeps (`--redact`: the hostname and user name with
  // placeholders), so the journal and what is rebuilt from it stay redacted. Empty: none.
  std::vector<std::pair<std::string, std::string>> journal_redactions;
  // torch.compile's backend for compiled cells: "aot_eager" (Dynamo and AOTAutograd's fake
  // tensors) or "inductor" (`--compile inductor`).
  std::string compile_backend = "aot_eager";
  // Add to the journal in run_dir (`check --resume`) rather than start a new one.
  bool append_journal = false;
  // Cells an earlier run of this plan measured (`check --resume`): not run again, and returned
  // in `results` as they were. Only cells that ended (is_measured) belong here.
  std::vector<CaseResult> finished;
  // Who runs the workers; null: process_runner().
  WorkerRunner* runner = nullptr;
};

struct ExecuteResult {
  std::vector<CaseResult> results;
  std::vector<WorkerInfo> workers;
  std::vector<Finding> findings; // wedged/unhealthy devices, missing workers
  double oracle_ms = 0;
  size_t oracle_cache_hits = 0; // oracles taken from the cache instead of computed
  double probes_ms = 0;
  std::string journal_path;
  // The run's journal, still open: what the check decides after the run is appended through it.
  std::shared_ptr<Journal> journal;
  // The first write into the run directory that failed (a full disk): one line naming the file
  // and its file system. The cells it kept from running are `skipped`, never blamed on a backend;
  // a finding k_run_dir_unwritable says it, and a check that sees it exits 4. Empty when every
  // write landed.
  std::string write_error;
};

// The id of the finding a run adds when its directory could not be written.
inline constexpr const char* k_run_dir_unwritable = "run-dir-unwritable";

// The warm-ups the Python runs of `plan` need.
ServerWarmUps warm_ups_for(const Plan& plan, const std::string& compile_backend);

// Starts one for options.python in options.run_dir unless options.probe_server is off or there is
// no python; a check starts it before its pre-flight (which a child of the server answers, torch
// imported once) and keeps it for its run, its shrinking and its advice's re-runs
// (ExecuteOptions::shared_probe_server). Workers start on their own when it is null.
ProbeServer start_probe_server(const ExecuteOptions& options, const ServerWarmUps& warm_ups);

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
// one without a start event, is an error naming it, and so is one over k_max_journal_bytes (a
// run's journal holds what its report holds, and a few events more). A line over
// k_max_journal_line is no event the doctor writes: skipped (lines_ignored), never held whole.
inline constexpr std::uintmax_t k_max_journal_bytes = std::uintmax_t{4} << 30;
inline constexpr std::size_t k_max_journal_line = std::size_t{64} << 20;
Expected<JournalContents> read_journal(const std::string& path);

// What a check decided after its run, appended to that run's journal so that `report JOURNAL`
// gives what the check printed. A resumed run shrinks and verifies again: the last word wins, and
// a new start clears it.
// A failed write there sets run.write_error when it is still empty.
void journal_shrinks(ExecuteResult& run, const std::vector<Shrink>& shrinks);
void journal_verified_advice(ExecuteResult& run, const VerifiedAdvice& verified);

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
