// workers/reference_worker: the reference probe's executor (our own ref-math / ref-flash kernels on
// the CPU or a GPU, compiled for it at run time) and the worker's --health-check mode. Depends on
// workers/worker.hpp and kernels; never on torch.
#pragma once

#include "workers/worker.hpp"

#include <memory>

namespace sdpa_doctor::workers {

// Every case of a variant other than ref-math/ref-flash, or on a GPU that cannot run our kernels
// (no device, runtime or compiler), is reported unsupported with the reason (hello's
// `unavailable`); a GPU where our kernel source does not compile makes every case an error.
std::unique_ptr<CaseExecutor> make_reference_executor(const WorkerArgs& args);

// True when argv asks for `--health-check --device cpu|cuda:N`.
bool is_health_check(int argc, const char* const* argv);
// Allocate, fill, copy back and synchronise on the device through the GPU runtime the kernels
// use: 0 when healthy (always on cpu), 1 with one line on stderr when not, 77 when no GPU runtime
// opens here, 2 for a usage error.
int run_health_check(int argc, const char* const* argv);

} // namespace sdpa_doctor::workers
