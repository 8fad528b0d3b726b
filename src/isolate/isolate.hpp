// isolate: child processes. Spawns argv vectors (never a shell) in their own process group with a
// clean environment (the forwarded variables, environment.cpp), drains their output without
// deadlock, enforces deadlines, kills whole groups, decodes wait statuses once (wait_status.cpp)
// and matches known stderr signatures (signatures.cpp). Its parts:
//  - run_simple (simple_run.cpp): one command to its end, for the enum worker, a pre-flight, a
//    compiler call;
//  - the runner (runner.cpp), one worker's supervisor: has the caller's judge write the verdict
//    into each `result` and `phase` (RunnerOptions::judge), reads `begin`, `phase`, `result` and
//    `bye` through protocol/ to attribute and time cases, keeps each worker's logs (the first and
//    last halves of log_cap_bytes), restarts a fresh worker after a crash and runs the health
//    check; a dead worker is attributed to the case it was running;
//  - Service (service.cpp): a helper process for the length of a run (the Python probe's start-up
//    server), dying with the doctor;
//  - /proc scans (proc_scan.cpp): the processes left in a group, a process's children (self-test
//    proves that nothing outlives a check);
//  - the fault-injection worker (fault_worker.cpp, `sdpa-doctor __fault-worker`): speaks protocol
//    v1 and makes a real crash, hang or exit happen per case line.
// Depends on core and protocol only. It knows nothing of attention: cases are opaque JSON lines,
// workers argv, and a result's metrics and canary are read by whoever asked for the run. It must
// never include cases, kernels, workers, devices or HIP/torch headers.
#pragma once

#include "core/expected.hpp"
#include "core/model.hpp"
#include "core/status.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <cstddef>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sdpa_doctor::isolate {

// ---- simple runs ---------------------------------------------------------------------------

// What to start. argv[0] is a path, or a name searched in PATH by the parent (never a shell).
struct Command {
  std::vector<std::string> argv;
  // Set on top of the base environment (a later pair wins over an earlier one with the same key).
  std::vector<std::pair<std::string, std::string>> env;
  // true: the base environment is the doctor's own, filtered through the allow-list
  // (is_forwarded_variable); false: the child sees `env` only.
  bool inherit_env = true;
};

struct SimpleRun {
  ProcessEnd end;
  std::string out; // stdout, the last 16 MiB at most
  std::string err; // stderr, the last 16 MiB at most
  bool timed_out = false; // the deadline passed and the doctor killed the process group
  bool stopped = false;   // `stop` was set and the doctor killed the process group
};

// Runs `cmd` to its end, until `deadline` or until `stop` is set (then SIGTERM to the group, 2 s
// grace, SIGKILL: its children die with it). stdin is /dev/null. An error means the process
// could not be started (no such file, ...).
Expected<SimpleRun> run_simple(const Command& cmd, std::chrono::milliseconds deadline,
                               const std::atomic<bool>* stop = nullptr);

// ---- services -------------------------------------------------------------------------------

// A helper process that lives as long as its owner, e.g. the Python probe's start-up server: its
// own process group, stdin /dev/null, stdout and stderr appended to a log file, and it dies with
// the doctor (PR_SET_PDEATHSIG). The destructor kills the whole group and reaps the process.
class Service {
public:
  static Expected<std::unique_ptr<Service>> start(const Command& cmd, const std::string& log_path);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;
  int pid() const { return m_pid; }
  bool running(); // not yet exited; never blocks

private:
  explicit Service(int pid) : m_pid(pid) {}
  int m_pid;
  bool m_reaped = false;
};

// ---- pieces, exposed for tests and for callers that need them ------------------------------

// The one place a waitpid() status becomes a ProcessEnd (exit code, or signal + name + core).
ProcessEnd decode_wait_status(int wait_status);

// "SIGSEGV" for 11; "SIG<n>" for numbers without a name here.
std::string signal_name(int signal_number);

// One line for a reason field: "killed by SIGSEGV (core dumped)", "exited with code 3".
std::string describe(const ProcessEnd& end);

// Whether the doctor forwards environment variable `name` to its workers (PATH, HOME, LANG,
// LD_LIBRARY_PATH, PYTHONPATH, HIP_*, HSA_*, ROCR_*, AMD_*, TORCH_*, PYTORCH_*, ...).
bool is_forwarded_variable(std::string_view name);

// The child environment as KEY=VALUE strings: the allow-listed part of `parent` (when
// inherit_env), then `extra` on top. `parent` is an environ-style NULL-terminated array.
std::vector<std::string> child_environment(const Command& cmd, char* const* parent);

// A known failure text on a worker's stderr. Data, not code: see known_signatures().
struct Signature {
  std::string id;      // stable: "gpu-memory-fault"
  std::string pattern; // ECMAScript regex
  std::string meaning; // one line for a reader
};

const std::vector<Signature>& known_signatures();
// What the CK SDPA kernel's device-side assert says on an arch outside its allow-list: the
// ck-unsupported-arch signature, and what the fault worker's ck-assert fault prints.
inline constexpr const char* k_ck_assert_text =
    "Fatal! Attempting to call a CK SDPA kernel on unsupported hardware";

// Ids of the known signatures that occur in `text`, in table order, each once.
std::vector<std::string> match_signatures(std::string_view text);

// ---- the worker runner ---------------------------------------------------------------------

// A worker is started as `argv... --results-fd N --cases FILE` (protocol v1, protocol.hpp).
using WorkerCommand = Command;

struct PlannedCase {
  std::string id;   // must be unique within one run_worker call
  std::string line; // the JSON object written to the cases file, one line, no newline
  std::chrono::milliseconds deadline{60'000}; // from the case's `begin` to its `result`
};

struct RunnerOptions {
  // Before the first `begin` of a worker and between a `result` and the next `begin`.
  std::chrono::milliseconds startup_deadline{60'000};
  // For one worker process from spawn to exit; 0 = none.
  std::chrono::milliseconds worker_deadline{0};
  // Between SIGTERM and SIGKILL to the group.
  std::chrono::milliseconds grace{2'000};
  // After SIGKILL: a worker still not reaped by then is stuck (D state) => device_wedged.
  std::chrono::milliseconds kill_wait{10'000};
  // Fresh workers started after the first; beyond this the remaining cases are skipped.
  int max_restarts = 4;
  // Run after a crash or a timeout; unhealthy (non-zero, signal or late) skips the rest.
  std::optional<Command> health_check;
  std::chrono::milliseconds health_deadline{30'000};
  // Where the cases files and the worker logs go; empty = a temporary directory (in $TMPDIR, else
  // /tmp), removed after.
  std::string run_dir;
  // File stem for this worker's files in run_dir ("<name>.stderr.log", "<name>.cases.0.jsonl").
  std::string name = "worker";
  int results_fd = 3;            // the fd number the worker writes its events to
  bool keep_core_dumps = false;  // false: RLIMIT_CORE 0 in the worker
  std::size_t max_line_bytes = std::size_t{1} << 20; // longer protocol lines are broken lines
  // Per stream log file: its first and last halves are kept, the middle cut (a line says so).
  std::size_t log_cap_bytes = std::size_t{4} << 20;
  // Set (e.g. from a SIGINT handler) to stop: the workers are killed, the rest skipped
  // "interrupted". Noticed within 100 ms. May be null.
  const std::atomic<bool>* interrupted = nullptr;
  // Writes the verdict into a `result` or `phase` event from what the worker measured
  // (cases::judge_worker_event), before the runner reads its status. Null: events are read as
  // the worker wrote them.
  std::function<void(nlohmann::json& event)> judge;
};

struct CaseOutcome {
  std::string case_id;
  Status status = Status::skipped;
  std::string reason; // one line; empty for a plain pass
  std::optional<nlohmann::json> result;    // the worker's `result` event, when it sent one
  // The `phase` event of a backward case that ended without a result after it: the crash or
  // hang is its backward's (the reason then says "in backward: ...").
  std::optional<nlohmann::json> phase;
  std::optional<ProcessEnd> process_end;   // when the worker's end decided the status
  std::vector<std::string> signatures;     // known signature ids on stderr near this case; never
                                           // for a pass
  std::string stderr_tail;                 // last ~40 lines / 8 KiB relevant to this case
  int attempt = 0;                         // which worker process (0 = first) ran it
  double elapsed_ms = 0;                   // from `begin` to the outcome; 0 if never begun
  // Set where the runner, not the worker, decided it (a skip, the worker's failure to start)
  SkipCause cause = SkipCause::none;
  std::string culprit; // the case that caused it (budget, health); empty where none is known
};

struct WorkerRunReport {
  std::vector<CaseOutcome> outcomes; // exactly one per planned case, in plan order
  std::optional<nlohmann::json> hello; // the first worker's hello
  int restarts = 0;
  bool device_unhealthy = false; // the health check failed after a crash or timeout
  bool device_wedged = false;    // a worker survived SIGKILL (stuck in the driver)
  std::string stderr_log_path;   // the stderr of every attempt (capped); empty without a run_dir
  // Why a cases file could not be written (a full disk: one line naming the file system); the
  // cases left are `skipped` with it, nothing is blamed on the worker. Empty when none failed.
  std::string write_error;
  std::vector<int> worker_pgids; // one per worker process started (pid == process group id)
};

// Progress callbacks, called on the runner's thread in event order.
class RunObserver {
public:
  virtual ~RunObserver() = default;
  virtual void on_hello(const nlohmann::json& hello) { (void)hello; }
  virtual void on_begin(const std::string& case_id) { (void)case_id; }
  virtual void on_outcome(const CaseOutcome& outcome) { (void)outcome; }
};

// Runs every case in `cases` through workers started from `cmd`; never drops a case. Call from a
// long-lived thread: the workers' parent-death signal is tied to the thread that spawned them.
WorkerRunReport run_worker(const WorkerCommand& cmd, const std::vector<PlannedCase>& cases,
                           const RunnerOptions& options, RunObserver* observer = nullptr);

// ---- the fault-injection worker ------------------------------------------------------------

// One fault the fault worker can inject, with the verdict the runner must reach for it.
struct FaultSpec {
  std::string name;         // the `"fault"` value of a case line
  Status expected;          // the status the runner must assign
  int signal = 0;           // expected terminating signal (crash), 0 = none
  int exit_code = -1;       // expected exit code, -1 = not checked
  std::string signature;    // a signature id that must be matched, empty = none
  std::string what;         // one line for the self-test table
};

// Every fault, in self-test order; "ok" first.
const std::vector<FaultSpec>& fault_table();

// Body of `sdpa-doctor __fault-worker --results-fd N --cases FILE`: runs each case line's fault
// for real (abort, SIGSEGV, hang, ...). Returns the process exit code when it returns at all.
int run_fault_worker(int results_fd, const std::string& cases_path);

// ---- process diagnostics (read from /proc) --------------------------------------------------

// Pids of live processes whose process group is `pgid` (zombies waiting for init excluded).
std::vector<int> processes_in_group(int pgid);

// Pids of the direct children (zombies included) of process `pid`.
std::vector<int> children_of(int pid);

} // namespace sdpa_doctor::isolate
