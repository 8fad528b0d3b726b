// loader: finds and opens a GPU vendor library at run time (dlopen), so nothing of ROCm or CUDA is
// fixed at link time. It looks first where the diagnosed torch keeps its own copies (its torch/lib,
// TheRock's _rocm_sdk_* packages), then $ROCM_PATH and /opt/rocm*, then the system's library path,
// and says which file it opened and why. A library that is missing, broken or of an unknown ABI is
// an Error for the caller to turn into a finding, never a crash.
// Opens the HIP runtime, AMD SMI / ROCm SMI, hipRTC, NVRTC, the CUDA driver and NVML, each by its
// sonames newest first, and lists the files a process has mapped (two HIP runtimes at once).
// Included by devices (the enum worker), kernels (the reference worker's runtime and compiler)
// and workers (the case loop); used in worker processes only, the doctor process never opens a
// GPU library (tests/e2e/linkage_test.sh runs readelf -d over every built and installed file).
// Depends on core only.
#pragma once

#include "core/expected.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace sdpa_doctor::loader {

// The libraries the workers open, each with its sonames newest first.
enum class Library {
  hip_runtime, // libamdhip64.so.7, .6, .5, libamdhip64.so
  hiprtc,      // libhiprtc.so.7, .6, libhiprtc.so (HIP 5 exports hipRTC from libamdhip64 itself)
  amd_smi,     // libamd_smi.so (and its numbered sonames)
  rocm_smi,    // librocm_smi64.so.7, .6, .5, .1, librocm_smi64.so (sonames repeat across releases)
  cuda_driver, // libcuda.so.1
  nvml,        // libnvidia-ml.so.1 (NVML, installed with the driver)
  nvrtc,       // libnvrtc.so.13, .12, .11.2, libnvrtc.so (and PyPI's nvidia/cu13/lib, nvidia/cuda_nvrtc/lib)
};
std::string_view to_string(Library library); // "hip_runtime", "hiprtc", ...
std::vector<std::string> sonames(Library library);

// Where to look, in order, and why each place is on the list.
struct SearchPlace {
  std::string dir; // absolute; empty means "the system's library path" (dlopen by bare name)
  // "torch/lib of the torch under test", "$ROCM_PATH/lib", "/opt/rocm-7.1.0/lib", ...
  std::string why;
};

// What the places are built from: the diagnosed torch's own folders and the environment.
struct SearchContext {
  // torch/lib and TheRock's _rocm_sdk_*/lib of the torch under test, searched first, in order
  std::vector<std::string> torch_lib_dirs;
  std::string rocm_path;         // $ROCM_PATH, "" when unset
  std::string cuda_path;         // $CUDA_PATH / $CUDA_HOME, "" when unset
  std::string opt_root = "/opt"; // where /opt/rocm* are looked for (tests point it elsewhere)
};
// Torch's folders; then, for ROCm libraries, $ROCM_PATH/lib, /opt/rocm/lib (the installation the
// machine calls its own) and /opt/rocm-X.Y.Z/lib newest first; for NVRTC, PyPI's nvidia-cuda-nvrtc
// beside torch, $CUDA_PATH/lib64 and /usr/local/cuda/lib64; the CUDA driver and NVML only from the
// system (they come with the kernel driver);
// then the system's library path. Folders that do not exist are left out, a folder reached twice
// (ROCM_PATH=/opt/rocm) is kept where it first comes.
std::vector<SearchPlace> search_places(Library library, const SearchContext& context);

// One library opened: the handle stays open for the life of the process.
struct Opened {
  void* handle = nullptr;
  std::string path;   // the file dlopen opened (its real path, from dlinfo/link_map)
  std::string soname; // the name that was asked for, e.g. "libamdhip64.so.6"
  std::string why;    // the SearchPlace::why of where it was found
  // Each file that exists in an earlier place (or that the system's path named) and did not load,
  // "path: dlerror text", in search order: a broken copy is evidence, not noise.
  std::vector<std::string> tried;
};

// The first file of `library` that opens, in search order: each place, each soname newest first.
// An Error listing every place and every failed file when none does (one line).
Expected<Opened> open(Library library, const SearchContext& context);

// A symbol of an opened library, nullptr when absent (an older or newer ABI: the caller decides).
void* symbol(const Opened& library, const char* name);
template <typename F> F symbol_as(const Opened& library, const char* name) {
  return reinterpret_cast<F>(symbol(library, name));
}

// Files of this process's address space whose name starts with `prefix` (from /proc/self/maps),
// e.g. two different "libamdhip64.so" files mapped at once: two HIP runtimes in one process.
std::vector<std::string> mapped_files(std::string_view prefix);

} // namespace sdpa_doctor::loader
