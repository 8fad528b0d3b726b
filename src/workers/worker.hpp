// workers: what runs in a worker process, never in the doctor's. This header is the case loop
// every C++ probe worker runs (libtorch, reference): argument parsing, reading the cases file,
// events in protocol order, inputs, oracle, planted faults (planted_fault.hpp), measuring and
// timing, and the HIP runtimes its process maps (through the loader). A worker supplies only a
// CaseExecutor that runs one case. The rest of the room: the float64 oracle's file
// (oracle_file.hpp: run computes and writes it, a worker reads it); sdpa-doctor-torch-worker
// (torch_worker.hpp), which opens the LibTorch plugin with dlopen (torch_plugin/: the one
// translation unit that includes torch, behind the C interface of torch_plugin.h; built as
// PyTorch's C++ extensions are, at build time or by run/torch_plugin.cpp for another torch), or
// is forked from its start-up server, which loaded the plugin once (fork_server.hpp);
// sdpa-doctor-ref-worker (reference_worker.hpp: our kernels, and --health-check on a GPU); and the
// Python probe, the package python/sdpa_probe/ (the user's torch, the same protocol).
// Depends on core, kernels, protocol, cases and loader; must not depend on torch or HIP, so that
// each worker keeps its dependency in its own executor translation unit.
#pragma once

#include "core/case.hpp"
#include "core/expected.hpp"
#include "core/inputs.hpp"
#include "core/status.hpp"
#include "core/variant.hpp"
#include "cases/cases.hpp"
#include "protocol/protocol.hpp"
#include "workers/oracle_file.hpp"
#include "workers/planted_fault.hpp"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sdpa_doctor::workers {

// `--device cpu|cuda:N --variant NAME --results-fd N --cases FILE`.
struct WorkerArgs {
  std::string device;
  Variant variant;
  int results_fd = -1;
  std::string cases_path;
};

// Errors are usage errors (the worker exits 2). fds 0-2 are refused as results fd: stdout and
// stderr belong to the libraries the worker loads.
Expected<WorkerArgs> parse_worker_args(int argc, const char* const* argv);

// What an executor reports for one case. `status` is pass when the case ran (the verdict then
// comes from the comparison), unsupported or error otherwise.
struct CaseRun {
  Status status = Status::pass;
  std::string reason;
  std::vector<float> output;          // logical (B,Hq,Lq,D), row-major; empty unless it ran
  std::vector<double> times_ms;       // one per timed run
  std::string backend_chosen;
  std::vector<std::string> warnings;
  // Backward cases: the gradients of q (B,Hq,Lq,D), k and v (B,Hkv,Lkv,D), logical, row-major;
  // empty unless the backward ran.
  std::vector<float> dq, dk, dv;
  // Dropout cases: a second run under the checked run's seed and one under another seed
  // (cases::dropout_seed), logical like `output`; empty unless they ran.
  std::vector<float> same_seed_output, other_seed_output;
  // Every later call measured against the first (cases::RepeatComparer); empty when the executor
  // does not compare its calls (a dropout case, our GPU kernels).
  std::optional<RepeatStats> repeats;
};

// Called by an executor once a backward case's checked forward has run, with its output (logical
// (B,Hq,Lq,D)), before its backward starts: the worker judges the forward and says so on the
// results fd, so that a crash or hang from then on is the backward's. Not called for forward
// cases, nor when the forward failed.
using EnteringBackward = std::function<void(const std::vector<float>& forward_output)>;

struct HelloInfo {
  std::string worker; // "libtorch", "reference"
  std::map<std::string, std::string> versions;
  std::map<std::string, std::string> facts;
  // Set when the executor cannot run anything here (no such device, ...): every case is then
  // reported `unsupported` with this reason.
  std::string unavailable;
};

class CaseExecutor {
public:
  virtual ~CaseExecutor() = default;
  virtual HelloInfo hello() = 0;
  // Runs one case on `inputs` (core::make_inputs of line.kase). A backward case runs its forward
  // (the checked run), calls `entering_backward` with its output, then runs the backward for
  // inputs.grad_out; its timed runs are forward and backward together. A dropout case seeds the
  // generator with cases::dropout_seed(c, 0) before its checked run and before a second run, and
  // with dropout_seed(c, 1) before a third. Must not throw.
  virtual CaseRun run(const protocol::CaseLine& line, const HostInputs& inputs,
                      const EnteringBackward& entering_backward) = 0;
  // A tiny known op on the device after a case: "ok", "failed: <why>" when the device no longer
  // computes it (the case left a deferred error behind), or empty for executors without one.
  // Must not throw.
  virtual std::string canary() { return {}; }
};

struct WorkerOptions {
  bool honour_test_fault = false; // SDPA_DOCTOR_TEST_FAULT (torch, python and reference workers)
  std::string started;            // the hello's "started" fact when set (a forked worker's)
};

// The whole worker: hello, then for each case begin -> run -> compare -> result, then bye.
// Returns the process exit code (0; 2 for an unreadable cases file or bad fault spec).
int serve_cases(const WorkerArgs& args, CaseExecutor& executor, const WorkerOptions& options);

// Parses argv, makes the executor for those arguments (after the variant's environment has been
// applied to this process, so libraries that read it once see it) and calls serve_cases. Usage
// errors go to stderr with exit 2.
using ExecutorFactory = std::function<std::unique_ptr<CaseExecutor>(const WorkerArgs&)>;
int worker_main(int argc, const char* const* argv, const ExecutorFactory& make_executor,
                const WorkerOptions& options);

// What the worker's library gives a fully masked row, from its hello's versions: a "torch"
// before 2.5 NaN, from 2.5 on (PR #133882, SDPA's _safe_softmax) and without torch (our own
// kernels) zero.
MaskedRowSemantics masked_row_semantics_of(const std::map<std::string, std::string>& versions);

// Median and minimum of the timings, written into `metrics` (time_ms, time_min_ms, timed_runs).
void set_timing(Metrics& metrics, std::vector<double> times_ms);

} // namespace sdpa_doctor::workers
