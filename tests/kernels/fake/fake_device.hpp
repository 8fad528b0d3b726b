// A pretend GPU behind the tests' fake vendor runtimes (fake_hip.cpp, fake_cuda.cpp): its memory
// is the host's, its kernels the emulated ones (emulated_kernels.cpp) found by name in the fake
// library itself, run by the CPU emulator. What a real runtime refuses it refuses too: a module
// not built for its arch, a kernel the module lacks, more shared memory than the device has.
// FAKE_GPU_RECORD=file appends one line per launch ("launch NAME grid X Y block X shared N").
#pragma once

#include "gpu_emulator.hpp"
#include "kernels/attn_params.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <string>

namespace fake {

inline std::string env(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value && *value ? value : fallback;
}

// FAKE_GPU_COUNT (default 1) devices, all of arch FAKE_GPU_ARCH (default per vendor).
inline int device_count() { return std::atoi(env("FAKE_GPU_COUNT", "1").c_str()); }

inline void record(const std::string& line) {
  const std::string path = env("FAKE_GPU_RECORD", "");
  if (path.empty()) return;
  if (FILE* f = std::fopen(path.c_str(), "a")) {
    std::fprintf(f, "%s\n", line.c_str());
    std::fclose(f);
  }
}

using Entry = void (*)(sdpa_doctor::kernels::AttnParams, float*);

// An emulated kernel of this library by its entry-point name, null when there is none.
inline Entry find_kernel(const char* name) {
  Dl_info self{};
  if (!::dladdr(reinterpret_cast<void*>(&find_kernel), &self)) return nullptr;
  void* handle = ::dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  return handle ? reinterpret_cast<Entry>(::dlsym(handle, name)) : nullptr;
}

struct Kernel {
  std::string name;
  Entry entry;
};

// Both vendors pass (AttnParams, float*) as pointers to the values, like the real launch calls.
inline void launch(const Kernel& k, sdpa_emu::Dim3 grid, sdpa_emu::Dim3 block, size_t shared,
                   void** args) {
  record("launch " + k.name + " grid " + std::to_string(grid.x) + " " + std::to_string(grid.y) +
         " block " + std::to_string(block.x) + " shared " + std::to_string(shared));
  const auto params = *static_cast<const sdpa_doctor::kernels::AttnParams*>(args[0]);
  float* scores = *static_cast<float**>(args[1]);
  sdpa_emu::launch(grid, block, shared, [&] { k.entry(params, scores); });
}

inline double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The timing events of both fake runtimes: an event is the time it was last recorded at (ms).
inline void* event_create() { return new double(0); }
inline void event_record(void* event) { *static_cast<double*>(event) = now_ms(); }
inline float event_elapsed_ms(void* start, void* stop) {
  return float(*static_cast<double*>(stop) - *static_cast<double*>(start));
}
inline void event_destroy(void* event) { delete static_cast<double*>(event); }

// The five event entry points of a fake runtime in its own spelling (inside extern "C"): CREATE
// is the whole create signature, whose parameters differ (cuEventCreate takes flags), and OK the
// runtime's success code.
#define SDPA_FAKE_EVENT_CALLS(CREATE, RECORD, SYNCHRONIZE, ELAPSED, DESTROY, OK)                  \
  int CREATE {                                                                                    \
    *event = fake::event_create();                                                                \
    return OK;                                                                                    \
  }                                                                                               \
  int RECORD(void* event, void*) {                                                                \
    fake::event_record(event);                                                                    \
    return OK;                                                                                    \
  }                                                                                               \
  int SYNCHRONIZE(void*) { return OK; }                                                           \
  int ELAPSED(float* ms, void* start, void* stop) {                                               \
    *ms = fake::event_elapsed_ms(start, stop);                                                    \
    return OK;                                                                                    \
  }                                                                                               \
  int DESTROY(void* event) {                                                                      \
    fake::event_destroy(event);                                                                   \
    return OK;                                                                                    \
  }

} // namespace fake
