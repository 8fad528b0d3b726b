// check/steps: the steps of a check before its workers run, each from the request and what was
// measured so far. Internal to check.
#pragma once

#include "check/outputs.hpp"
#include "check/request.hpp"
#include "core/cache.hpp"
#include "core/model.hpp"
#include "run/run.hpp"

#include <atomic>

namespace sdpa_doctor::check {

// The python probe's interpreter, found (not imported) before the devices are enumerated. A bad
// --python is an input error only where the python probe runs.
run::PythonChoice located_python(const CheckRequest& request);

// SDPA_DOCTOR_TEST_FAULT, which the workers obey: empty when unset, Fatal (exit 2) when malformed,
// so no cell is blamed on a backend for a typo in a test's setting.
std::string planted_faults();

// The report's header facts and the device inventory, asked where `python`'s torch keeps its own
// HIP runtime first.
Report started_report(const CheckRequest& request, const run::PythonChoice& python);

// Everything the execution needs but the run directory and the python probe's interpreter.
run::ExecuteOptions execute_options(const CheckRequest& request, const Outputs& outputs,
                                    const std::atomic<bool>* interrupted);

// The start-up server for the check's Python workers (null where none runs), started as soon as
// the run directory is there: it imports torch while the devices are enumerated, its child answers
// the pre-flight, and it warms what the request's cells will need (backward, compiled).
run::ProbeServer started_probe_server(const CheckRequest& request,
                                      const run::PythonChoice& located,
                                      const run::ExecuteOptions& exec);

// The python probe's interpreter pre-flighted (by a child of exec.shared_probe_server where one
// runs): exec says which interpreter the workers use, or why none; the GPUs that torch sees join
// `inventory`, so a device only torch can reach (another vendor's, or one whose ROCm only the
// wheel carries) is a target too. A server whose interpreter failed is stopped.
void preflight_step(const CheckRequest& request, const run::PythonChoice& located,
                    run::ExecuteOptions& exec, DeviceInventory& inventory);

// The plan over what is here. A `--device` the inventory lacks, or a `--variant` that plans
// nothing, is Fatal (exit 2) naming what is there.
run::Plan checked_plan(const CheckRequest& request, const DeviceInventory& inventory);

// Where the plan runs the libtorch probe, the LibTorch plugin it loads: built for the torch the
// python probe tests, perhaps now (after the run directory, before any worker starts, apart from
// their time-outs; its progress on stderr unless `quiet`). The inventory's runtime says which file
// and why; no compiler or a failed build is a finding there and the libtorch cells say why.
// What it returns keeps a cached plugin from eviction by other checks while it lives.
cache::FileInUse choose_torch_plugin(const CheckRequest& request, const run::Plan& plan,
                                     const run::PythonChoice& located, bool quiet,
                                     run::ExecuteOptions& exec, DeviceInventory& inventory);

// The run's directory (journal, oracles, logs): the one named, or a new temporary one.
std::string checked_run_dir(const std::string& named);

} // namespace sdpa_doctor::check
