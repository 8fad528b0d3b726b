// Built when the HIP runtime is not: every HIP entry point answers that it is not built in, so
// callers ask the capability at run time instead of testing a macro.
#include "kernels/kernels.hpp"

namespace sdpa_doctor::kernels {

namespace {
constexpr const char* k_not_built = "HIP runtime not built in";
}

bool hip_built_in() { return false; }
std::string hip_unavailable_reason(int) { return k_not_built; }
std::string hip_health_check(int) { return k_not_built; }
Expected<KernelRun> run_hip(RefKernel, int, const Case&, const HostInputs&, int, int) {
  return make_error(k_not_built);
}

} // namespace sdpa_doctor::kernels
