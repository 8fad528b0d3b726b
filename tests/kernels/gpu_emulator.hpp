// The GPU dialect (src/kernels/gpu_dialect.hpp) on the CPU, for the tests: the kernel source
// attention_gpu.cu compiled by g++ with SDPA_GPU_EMULATION runs here as it would on a device.
// Each thread of a block is a fiber (ucontext) on the calling thread; __syncthreads is a switch
// back to the scheduler, which resumes every fiber of the block in turn, so a barrier phase ends
// when all have reached it; a shuffle is an exchange through the block's memory between two
// barriers. Blocks run one after another, so the block's shared memory is one buffer of exactly
// the size the launch asked for (an overrun shows under AddressSanitizer). A kernel whose threads
// do not all reach the same barriers (undefined on a GPU) is reported and the test process stops.
#pragma once

#include "core/inputs.hpp" // half <-> float conversions, the host's

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <ucontext.h>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

namespace sdpa_emu {

// AddressSanitizer must be told of every switch between stacks, or it takes the fibers' stacks
// for overflows of the scheduler's; elsewhere these do nothing.
inline void switch_to(void** save, const void* bottom, size_t size) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(save, bottom, size);
#else
  (void)save, (void)bottom, (void)size;
#endif
}
inline void switched(void* save, const void** bottom_from, size_t* size_from) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(save, bottom_from, size_from);
#else
  (void)save, (void)bottom_from, (void)size_from;
#endif
}

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct State {
  unsigned thread_x = 0;
  long long block_x = 0, block_y = 0;
  unsigned char* shared = nullptr;
  float* exchange = nullptr; // one slot per thread of the block
  ucontext_t scheduler{};
  ucontext_t* current = nullptr;
  const std::function<void()>* kernel = nullptr;
  std::vector<bool>* done = nullptr;
  const void* scheduler_stack = nullptr; // the scheduler's stack, as ASan reports it
  size_t scheduler_stack_size = 0;
};
inline thread_local State t_state;

inline void fiber_main() {
  switched(nullptr, &t_state.scheduler_stack, &t_state.scheduler_stack_size);
  (*t_state.kernel)();
  (*t_state.done)[t_state.thread_x] = true;
  // Returning ends the fiber (its stack is done with): uc_link resumes the scheduler.
  switch_to(nullptr, t_state.scheduler_stack, t_state.scheduler_stack_size);
}

// Runs `kernel` over the grid (x and y; z must be 1), block.x threads per block.
inline void launch(Dim3 grid, Dim3 block, size_t shared_bytes,
                   const std::function<void()>& kernel) {
  const unsigned threads = block.x * block.y * block.z;
  constexpr size_t k_stack = 128 * 1024;
  std::vector<unsigned char> shared(shared_bytes);
  std::vector<float> exchange(threads);
  std::vector<ucontext_t> fibers(threads);
  std::unique_ptr<char[]> stacks(new char[k_stack * threads]);
  std::vector<bool> done(threads);
  State& s = t_state;
  s.shared = shared.data();
  s.exchange = exchange.data();
  s.kernel = &kernel;
  s.done = &done;
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      s.block_x = bx;
      s.block_y = by;
      for (unsigned t = 0; t < threads; ++t) {
        done[t] = false;
        getcontext(&fibers[t]);
        fibers[t].uc_stack.ss_sp = stacks.get() + size_t(t) * k_stack;
        fibers[t].uc_stack.ss_size = k_stack;
        fibers[t].uc_link = &s.scheduler;
        makecontext(&fibers[t], fiber_main, 0);
      }
      // One pass resumes every thread up to its next barrier (or its end): one barrier phase.
      for (;;) {
        for (unsigned t = 0; t < threads; ++t) {
          if (done[t]) continue;
          s.thread_x = t;
          s.current = &fibers[t];
          void* save = nullptr;
          switch_to(&save, stacks.get() + size_t(t) * k_stack, k_stack);
          swapcontext(&s.scheduler, &fibers[t]);
          switched(save, nullptr, nullptr);
        }
        unsigned all_done = 0;
        for (unsigned t = 0; t < threads; ++t) all_done += done[t] ? 1 : 0;
        if (all_done == threads) break;
        if (all_done > 0) {
          std::fprintf(stderr, "gpu emulator: block (%u,%u): %u of %u threads ended while the "
                               "others wait at a barrier\n",
                       bx, by, all_done, threads);
          std::abort();
        }
      }
    }
}

inline void sync() {
  void* save = nullptr;
  switch_to(&save, t_state.scheduler_stack, t_state.scheduler_stack_size);
  swapcontext(t_state.current, &t_state.scheduler);
  switched(save, &t_state.scheduler_stack, &t_state.scheduler_stack_size);
}

inline float shfl_xor(float x, int lane_mask) {
  t_state.exchange[t_state.thread_x] = x;
  sync();
  const float other = t_state.exchange[t_state.thread_x ^ unsigned(lane_mask)];
  sync();
  return other;
}

} // namespace sdpa_emu

#define SDPA_KERNEL(threads) extern "C" __attribute__((visibility("default"))) void
#define SDPA_DEVICE inline
#define SDPA_SHARED_ARRAY(type, name)                                                              \
  type* name = reinterpret_cast<type*>(sdpa_emu::t_state.shared)
#define SDPA_SYNC() sdpa_emu::sync()
#define SDPA_UNROLL

inline int sdpa_thread_x() { return int(sdpa_emu::t_state.thread_x); }
inline long long sdpa_block_x() { return sdpa_emu::t_state.block_x; }
inline long long sdpa_block_y() { return sdpa_emu::t_state.block_y; }
inline float sdpa_shfl_xor(float x, int lane_mask) { return sdpa_emu::shfl_xor(x, lane_mask); }
inline float sdpa_half_to_float(unsigned short bits) {
  return sdpa_doctor::half_bits_to_float(bits);
}
inline unsigned short sdpa_float_to_half(float f) { return sdpa_doctor::float_to_half_bits(f); }
inline float sdpa_fmax(float a, float b) { return std::fmax(a, b); }
inline float sdpa_log(float x) { return std::log(x); }
