// kernels/hip_attention: the boundary between the C++20 case-level code and the HIP kernels,
// which hipcc compiles as C++17. Plain data only; depends on attn_params.hpp and std only, never
// on core (its headers are C++20) nor on the HIP headers (callers must build without them).
#pragma once

#include "kernels/attn_params.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace sdpa_doctor::kernels::hip_impl {

// Empty when HIP device `device` is usable; else one line, e.g. "no HIP device: hipErrorNoDevice".
std::string unavailable_reason(int device);
// Allocate, fill, copy back, synchronise. Empty when healthy, else what failed.
std::string health_check(int device);

struct HipRun {
  // Host buffers in params.elem storage (float or 16-bit patterns), addressed by params' strides;
  // params' pointers are ignored (device copies replace them).
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const float* mask = nullptr;
  size_t q_count = 0, kv_count = 0, mask_count = 0; // elements in each host buffer (o = q_count)
  AttnParams params;
  bool flash = true; // tiled online-softmax kernel; false: naive math with materialised scores
  int device = 0;
  int warmup = 0;
  int repeat = 1;
};

struct HipResult {
  std::vector<unsigned char> out; // q_count elements in params.elem storage, o strides
  std::vector<double> times_ms;   // per timed run, kernels only (HIP events)
};

// Empty when the kernel ran; else why not (allocation, launch or "no instance" reasons).
std::string run(const HipRun& request, HipResult& result);

// The HIP kernels live in a module of their own (k_module_file, beside the workers) that the
// workers load on first use: a worker that runs on the CPU never loads the HIP runtime (whose
// start-up costs ~15 ms of CPU per process) and starts even where that runtime is missing. The
// module exports one function, k_api_symbol, returning this table; module and caller are built
// together, so C++ types cross it.
struct Api {
  std::string (*unavailable_reason)(int device);
  std::string (*health_check)(int device);
  std::string (*run)(const HipRun& request, HipResult& result);
};
inline constexpr const char* k_module_file = "sdpa-doctor-hip-kernels.so";
inline constexpr const char* k_api_symbol = "sdpa_doctor_hip_kernels_api";

} // namespace sdpa_doctor::kernels::hip_impl
