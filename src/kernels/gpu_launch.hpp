// kernels/gpu_launch: the launch geometry of the GPU kernels, shared by the kernel source
// (attention_gpu.cu, compiled at run time) and the host that launches it (gpu_run.cpp), so the
// two cannot disagree on block sizes, tile shapes or shared memory. Plain constexpr C++17 with no
// includes: the run-time compilers see it as one more header.
#pragma once

#if defined(__HIPCC__) || defined(__CUDACC__)
#define SDPA_GEOMETRY __host__ __device__ constexpr
#else
#define SDPA_GEOMETRY constexpr
#endif

namespace sdpa_doctor::kernels::gpu {

// ref-math: scores (one thread per key) and softmax (one block per row) use k_math_threads; P.V
// one thread per output column.
constexpr int k_math_threads = 256;
constexpr int k_pv_threads = 64;

// ref-flash: k_flash_threads threads as k_row_groups groups of k_key_lanes consecutive lanes.
constexpr int k_flash_threads = 128;
constexpr int k_key_lanes = 16;
constexpr int k_row_groups = k_flash_threads / k_key_lanes;

// The head-dim buckets of ref-flash (one compiled instance each) and their tiles: rows per thread
// (TM) and keys per lane (TN), chosen so the shared memory stays under 48 KiB at the bucket's
// largest head dim (CUDA's limit without opting in; AMD has 64 KiB).
constexpr int k_flash_max_head_dim = 256;
SDPA_GEOMETRY int flash_bucket(long long d) { return d <= 64 ? 64 : d <= 128 ? 128 : 256; }
SDPA_GEOMETRY int flash_tm(int dmax) { return dmax <= 128 ? 4 : 2; }
SDPA_GEOMETRY int flash_tn(int dmax) { return dmax <= 64 ? 4 : dmax <= 128 ? 2 : 1; }
// Query rows per block, keys per tile.
SDPA_GEOMETRY int flash_rows(int dmax) { return k_row_groups * flash_tm(dmax); }
SDPA_GEOMETRY int flash_keys(int dmax) { return k_key_lanes * flash_tn(dmax); }
// Q [rows][d+1], one K-then-V tile [keys][d+1], P [rows][keys], all f32.
SDPA_GEOMETRY long long flash_shared_bytes(int dmax, long long d) {
  return 4 * ((flash_rows(dmax) + flash_keys(dmax)) * (d + 1) +
              static_cast<long long>(flash_rows(dmax)) * flash_keys(dmax));
}
static_assert(flash_shared_bytes(64, 64) <= 48 * 1024 &&
                  flash_shared_bytes(128, 128) <= 48 * 1024 &&
                  flash_shared_bytes(256, 256) <= 48 * 1024,
              "ref-flash's shared memory must fit 48 KiB");

} // namespace sdpa_doctor::kernels::gpu
