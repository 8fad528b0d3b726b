// kernels/gpu_dialect: the few words the GPU kernels (attention_gpu.cu) spell differently on each
// compiler that builds them: NVRTC (CUDA), hipRTC (HIP), hipcc (the tests' AMD code-generation
// check) and the tests' CPU emulator (SDPA_GPU_EMULATION). Kernel code uses only the sdpa_/SDPA_
// names below, never a vendor's. Depends on nothing: the run-time compilers have no C++ standard
// library, so the fixed-width integers are spelled here for them.
#pragma once

#if defined(__CUDACC_RTC__) || defined(__HIPCC_RTC__)
// The same types hipRTC keeps in __hip_internal (long long, not long): a compiler that one day
// declares these too then declares the same types, which C++ allows.
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#endif

#if defined(SDPA_GPU_EMULATION)
// Threads of a block as CPU threads; defines every name below (tests/kernels/gpu_emulator.hpp).
#include "gpu_emulator.hpp"

#else
#if defined(__HIPCC__) && !defined(__HIPCC_RTC__)
#include <hip/hip_runtime.h> // hipcc; hipRTC includes its runtime header by itself
#endif

// A kernel the host launches by name: C linkage, at most `threads` threads per block.
#define SDPA_KERNEL(threads) extern "C" __global__ void __launch_bounds__(threads)
#define SDPA_DEVICE __device__ inline
// The block's shared memory, sized at launch.
#define SDPA_SHARED_ARRAY(type, name) extern __shared__ type name[]
#define SDPA_SYNC() __syncthreads()
// Before a loop over a compile-time count that indexes a register array: unrolled, the array
// stays in registers.
#define SDPA_UNROLL _Pragma("unroll")

SDPA_DEVICE int sdpa_thread_x() { return int(threadIdx.x); }
SDPA_DEVICE long long sdpa_block_x() { return static_cast<long long>(blockIdx.x); }
SDPA_DEVICE long long sdpa_block_y() { return static_cast<long long>(blockIdx.y); }

#if defined(__CUDACC__)
// Every lane of the warp takes part (the kernels call it outside divergent code).
SDPA_DEVICE float sdpa_shfl_xor(float x, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, x, lane_mask);
}
SDPA_DEVICE float sdpa_half_to_float(unsigned short bits) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
  return f;
}
SDPA_DEVICE unsigned short sdpa_float_to_half(float f) { // round to nearest even
  unsigned short bits;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(f));
  return bits;
}
#else
SDPA_DEVICE float sdpa_shfl_xor(float x, int lane_mask) { return __shfl_xor(x, lane_mask); }
SDPA_DEVICE float sdpa_half_to_float(unsigned short bits) {
  return float(__builtin_bit_cast(_Float16, bits));
}
SDPA_DEVICE unsigned short sdpa_float_to_half(float f) { // round to nearest even
  return __builtin_bit_cast(unsigned short, _Float16(f));
}
#endif

SDPA_DEVICE float sdpa_fmax(float a, float b) { return fmaxf(a, b); }
SDPA_DEVICE float sdpa_log(float x) { return logf(x); }
#endif
