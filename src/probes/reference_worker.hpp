// probes/reference_worker: the reference probe's executor (our own ref-math / ref-flash kernels on
// the CPU or a HIP device) and the worker's --health-check mode. Depends on probes/worker.hpp and
// kernels; never on torch.
#pragma once

#include "probes/worker.hpp"

#include <memory>

namespace sdpa_doctor::probes {

// Every case of a variant other than ref-math/ref-flash, or on a HIP device that cannot run our
// kernels, is reported unsupported with the reason (hello's `unavailable`).
std::unique_ptr<CaseExecutor> make_reference_executor(const WorkerArgs& args);

// True when argv asks for `--health-check --device cpu|cuda:N`.
bool is_health_check(int argc, const char* const* argv);
// Allocate, fill, copy back and synchronise on the device: 0 when healthy (always on cpu),
// 1 with one line on stderr when not, 2 for a usage error.
int run_health_check(int argc, const char* const* argv);

} // namespace sdpa_doctor::probes
