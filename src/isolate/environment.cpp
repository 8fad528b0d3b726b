#include "isolate/isolate.hpp"

#include <array>
#include <map>

namespace sdpa_doctor::isolate {

namespace {

// What a worker may need from the doctor's environment: finding programs and libraries, the
// locale, and every knob of the ROCm/HIP/torch stack, where the reference worker finds the GPU
// compilers (the torch's lib folders, CUDA's) and keeps what they compiled. Anything else (tokens,
// proxies, editor settings) stays behind so that a report is reproducible from the variables it
// lists.
constexpr std::array<std::string_view, 22> k_exact = {
    "PATH",        "HOME",           "LANG",     "LANGUAGE",        "TMPDIR",
    "USER",        "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PYTHONHOME",   "VIRTUAL_ENV",
    "CONDA_PREFIX", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL",
    "SDPA_DOCTOR_TEST_FAULT", "SDPA_DOCTOR_TORCH_LIB_DIRS", "SDPA_DOCTOR_KERNEL_CACHE",
    "SDPA_DOCTOR_CACHE_DIR", "XDG_CACHE_HOME", "CUDA_PATH", "CUDA_HOME"};

constexpr std::array<std::string_view, 13> k_prefixes = {
    "LC_",    "HIP_",      "HSA_",      "ROCR_",  "ROCM_",  "AMD_",   "TORCH_",
    "PYTORCH_", "MIOPEN_", "AOTRITON_", "ASAN_",  "UBSAN_", "LSAN_"};

} // namespace

bool is_forwarded_variable(std::string_view name) {
  for (auto exact : k_exact)
    if (name == exact) return true;
  for (auto prefix : k_prefixes)
    if (name.size() > prefix.size() && name.substr(0, prefix.size()) == prefix) return true;
  return false;
}

std::vector<std::string> child_environment(const Command& cmd, char* const* parent) {
  // Ordered map: a deterministic environment makes logs comparable between runs.
  std::map<std::string, std::string> env;
  if (cmd.inherit_env && parent) {
    for (char* const* p = parent; *p; ++p) {
      std::string_view entry(*p);
      auto eq = entry.find('=');
      if (eq == std::string_view::npos || eq == 0) continue;
      auto name = entry.substr(0, eq);
      if (is_forwarded_variable(name)) env[std::string(name)] = std::string(entry.substr(eq + 1));
    }
  }
  for (const auto& [key, value] : cmd.env) env[key] = value;
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [key, value] : env) out.push_back(key + "=" + value);
  return out;
}

} // namespace sdpa_doctor::isolate
