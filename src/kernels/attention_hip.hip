// ref-math and ref-flash on HIP devices, over the shared math core (attention_core.hpp).
// Wave size is never assumed: kernels read warpSize, the host reads hipDeviceProp_t::warpSize,
// so the same source serves wave64 (CDNA, GCN) and wave32 (RDNA) targets.
#include "kernels/attention_core.hpp"
#include "kernels/hip_attention.hpp"

#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace sdpa_doctor::kernels::hip_impl {
namespace {

// --- storage types ---------------------------------------------------------------------
struct Bf16 {
  uint16_t bits;
};

__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(__half x) { return __half2float(x); }
__device__ inline float to_float(Bf16 x) { return __uint_as_float(uint32_t(x.bits) << 16); }

template <typename T> __device__ inline T from_float(float x);
template <> __device__ inline float from_float<float>(float x) { return x; }
template <> __device__ inline __half from_float<__half>(float x) { return __float2half(x); }
template <> __device__ inline Bf16 from_float<Bf16>(float x) {
  const uint32_t bits = __float_as_uint(x);
  if (x != x) return Bf16{uint16_t((bits >> 16) | 0x40)};
  return Bf16{uint16_t((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16)};
}

__device__ inline float wave_max(float x) {
  for (int offset = warpSize / 2; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor(x, offset));
  return x;
}
__device__ inline float wave_sum(float x) {
  for (int offset = warpSize / 2; offset > 0; offset /= 2) x += __shfl_xor(x, offset);
  return x;
}

// --- ref-math: scores, softmax, P.V as three plain kernels (scores materialised) ----------
template <typename T>
__global__ void math_scores(AttnParams p, const T* q, const T* k, const float* mask, float* s) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t i = blockIdx.y;
  const int64_t bh = blockIdx.z;
  if (j >= p.lkv) return;
  const int64_t b = bh / p.hq, h = bh % p.hq, hk = h / (p.hq / p.hkv);
  const T* qrow = q + b * p.q_stride_b + h * p.q_stride_h + i * p.q_stride_l;
  const T* krow = k + b * p.k_stride_b + hk * p.k_stride_h + j * p.k_stride_l;
  float dot = 0.0f;
  for (int64_t e = 0; e < p.d; ++e) dot += to_float(qrow[e]) * to_float(krow[e]);
  const float mv = mask ? mask[b * p.mask_stride_b + i * p.mask_stride_q + j] : 1.0f;
  s[(bh * p.lq + i) * p.lkv + j] =
      core::masked_score(dot, p.scale, p.causal, p.causal_offset, p.mask_kind, mv, i, j);
}

// One block per row; the block reduces through shared memory, one partial per wave.
__global__ void math_softmax(AttnParams p, float* s) {
  extern __shared__ float partial[];
  float* row = s + int64_t(blockIdx.x) * p.lkv;
  const int lane = threadIdx.x % warpSize, wave = threadIdx.x / warpSize;
  const int waves = (blockDim.x + warpSize - 1) / warpSize;
  float m = core::neg_inf();
  for (int64_t j = threadIdx.x; j < p.lkv; j += blockDim.x) m = fmaxf(m, row[j]);
  m = wave_max(m);
  if (lane == 0) partial[wave] = m;
  __syncthreads();
  m = core::neg_inf();
  for (int w = 0; w < waves; ++w) m = fmaxf(m, partial[w]);
  __syncthreads();
  core::RowState st{m, 0.0f};
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < p.lkv; j += blockDim.x) sum += core::row_prob(st, row[j]);
  sum = wave_sum(sum);
  if (lane == 0) partial[wave] = sum;
  __syncthreads();
  st.sum = 0.0f;
  for (int w = 0; w < waves; ++w) st.sum += partial[w];
  const float f = core::row_final_scale(st);
  for (int64_t j = threadIdx.x; j < p.lkv; j += blockDim.x) row[j] = core::row_prob(st, row[j]) * f;
}

template <typename T>
__global__ void math_pv(AttnParams p, const float* s, const T* v, T* o) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t i = blockIdx.y;
  const int64_t bh = blockIdx.z;
  if (e >= p.d) return;
  const int64_t b = bh / p.hq, h = bh % p.hq, hk = h / (p.hq / p.hkv);
  const float* prow = s + (bh * p.lq + i) * p.lkv;
  const T* vb = v + b * p.v_stride_b + hk * p.v_stride_h;
  float acc = 0.0f;
  for (int64_t j = 0; j < p.lkv; ++j) acc += prow[j] * to_float(vb[j * p.v_stride_l + e]);
  o[b * p.o_stride_b + h * p.o_stride_h + i * p.o_stride_l + e] = from_float<T>(acc);
}

// --- ref-flash: LDS tiles of K and V, each wave owns k_rows_per_wave query rows -----------
constexpr int k_flash_waves = 4;
constexpr int k_rows_per_wave = 4;
constexpr int k_flash_keys = 32;   // keys per LDS tile: at most one per lane on any wave size
constexpr int k_flash_max_d = 128; // LDS: 2 * 32 * 128 floats = 32 KiB
constexpr int k_min_wave = 32;
constexpr int k_max_e_per_lane = k_flash_max_d / k_min_wave;

template <typename T>
__global__ void flash_forward(AttnParams p, const T* q, const T* k, const T* v, const float* mask,
                              T* o) {
  __shared__ float k_tile[k_flash_keys][k_flash_max_d];
  __shared__ float v_tile[k_flash_keys][k_flash_max_d];
  const int lane = threadIdx.x % warpSize, wave = threadIdx.x / warpSize;
  const int64_t bh = blockIdx.y;
  const int64_t b = bh / p.hq, h = bh % p.hq, hk = h / (p.hq / p.hkv);
  const int64_t block_row0 = int64_t(blockIdx.x) * k_flash_waves * k_rows_per_wave;
  const int64_t row0 = block_row0 + int64_t(wave) * k_rows_per_wave;
  const T* qb = q + b * p.q_stride_b + h * p.q_stride_h;
  const T* kb = k + b * p.k_stride_b + hk * p.k_stride_h;
  const T* vb = v + b * p.v_stride_b + hk * p.v_stride_h;

  // Output elements e = lane + n * warpSize belong to this lane.
  float acc[k_rows_per_wave][k_max_e_per_lane];
  core::RowState st[k_rows_per_wave];
  for (int r = 0; r < k_rows_per_wave; ++r) {
    st[r] = core::row_start();
    for (int n = 0; n < k_max_e_per_lane; ++n) acc[r][n] = 0.0f;
  }
  const int64_t block_last = min(block_row0 + k_flash_waves * k_rows_per_wave, p.lq) - 1;
  for (int64_t j0 = 0; j0 < p.lkv; j0 += k_flash_keys) {
    if (p.causal && j0 > block_last + p.causal_offset) break; // causal tile skipping
    __syncthreads();
    for (int64_t x = threadIdx.x; x < int64_t(k_flash_keys) * p.d; x += blockDim.x) {
      const int64_t jj = x / p.d, e = x % p.d;
      const bool in = j0 + jj < p.lkv;
      k_tile[jj][e] = in ? to_float(kb[(j0 + jj) * p.k_stride_l + e]) : 0.0f;
      v_tile[jj][e] = in ? to_float(vb[(j0 + jj) * p.v_stride_l + e]) : 0.0f;
    }
    __syncthreads();
    for (int r = 0; r < k_rows_per_wave; ++r) {
      const int64_t i = row0 + r;
      if (i >= p.lq) break;
      // Lane `lane` scores key j0 + lane (lanes past the tile hold -inf).
      const int64_t j = j0 + lane;
      float score = core::neg_inf();
      if (lane < k_flash_keys && j < p.lkv) {
        const T* qrow = qb + i * p.q_stride_l;
        float dot = 0.0f;
        for (int64_t e = 0; e < p.d; ++e) dot += to_float(qrow[e]) * k_tile[lane][e];
        const float mv = mask ? mask[b * p.mask_stride_b + i * p.mask_stride_q + j] : 1.0f;
        score = core::masked_score(dot, p.scale, p.causal, p.causal_offset, p.mask_kind, mv, i, j);
      }
      const float alpha = core::row_rescale(st[r], wave_max(score));
      const float prob = core::row_prob(st[r], score);
      st[r].sum += wave_sum(prob);
      for (int n = 0; n < k_max_e_per_lane; ++n) acc[r][n] *= alpha;
      // Each lane's probability reaches the others by shuffle: no LDS round trip, no barrier.
      for (int jj = 0; jj < k_flash_keys; ++jj) {
        const float pj = __shfl(prob, jj);
        for (int n = 0; n < k_max_e_per_lane; ++n) {
          const int64_t e = lane + int64_t(n) * warpSize;
          if (e < p.d) acc[r][n] += pj * v_tile[jj][e];
        }
      }
    }
  }
  for (int r = 0; r < k_rows_per_wave; ++r) {
    const int64_t i = row0 + r;
    if (i >= p.lq) break;
    const float f = core::row_final_scale(st[r]);
    T* orow = o + b * p.o_stride_b + h * p.o_stride_h + i * p.o_stride_l;
    for (int n = 0; n < k_max_e_per_lane; ++n) {
      const int64_t e = lane + int64_t(n) * warpSize;
      if (e < p.d) orow[e] = from_float<T>(acc[r][n] * f);
    }
    if (p.lse && lane == 0)
      p.lse[bh * p.lq + i] = core::row_lse(st[r], [](float x) { return logf(x); });
  }
}

// --- host side ----------------------------------------------------------------------------
std::string hip_error(const char* what, hipError_t err) {
  return std::string(what) + ": " + hipGetErrorName(err);
}
#define SDPA_HIP_TRY(call)                                                                      \
  do {                                                                                          \
    const hipError_t sdpa_err_ = (call);                                                        \
    if (sdpa_err_ != hipSuccess) return hip_error(#call, sdpa_err_);                            \
  } while (0)

// Device memory freed on every return path.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (m_ptr) (void)hipFree(m_ptr);
  }
  hipError_t allocate(size_t bytes) { return hipMalloc(&m_ptr, bytes == 0 ? 1 : bytes); }
  void* get() const { return m_ptr; }

private:
  void* m_ptr = nullptr;
};

size_t elem_bytes(ElemType elem) { return elem == ElemType::f32 ? 4 : 2; }

template <typename T>
std::string launch(const HipRun& rq, const AttnParams& p, int wave, void* q, void* k, void* v,
                   const float* mask, void* o, float* scores) {
  const T* tq = static_cast<const T*>(q);
  const T* tk = static_cast<const T*>(k);
  const T* tv = static_cast<const T*>(v);
  T* to = static_cast<T*>(o);
  if (rq.flash) {
    const int rows_per_block = k_flash_waves * k_rows_per_wave;
    const dim3 grid(unsigned((p.lq + rows_per_block - 1) / rows_per_block), unsigned(p.b * p.hq));
    hipLaunchKernelGGL(flash_forward<T>, grid, dim3(unsigned(k_flash_waves * wave)), 0, nullptr, p,
                       tq, tk, tv, mask, to);
  } else {
    const unsigned threads = 256;
    hipLaunchKernelGGL(math_scores<T>, dim3(unsigned((p.lkv + threads - 1) / threads),
                                            unsigned(p.lq), unsigned(p.b * p.hq)),
                       dim3(threads), 0, nullptr, p, tq, tk, mask, scores);
    hipLaunchKernelGGL(math_softmax, dim3(unsigned(p.b * p.hq * p.lq)), dim3(threads),
                       size_t(threads / unsigned(wave) + 1) * sizeof(float), nullptr, p, scores);
    hipLaunchKernelGGL(math_pv<T>, dim3(unsigned((p.d + 63) / 64), unsigned(p.lq),
                                        unsigned(p.b * p.hq)),
                       dim3(64), 0, nullptr, p, scores, tv, to);
  }
  SDPA_HIP_TRY(hipGetLastError());
  return {};
}

} // namespace

std::string unavailable_reason(int device) {
  int count = 0;
  const hipError_t err = hipGetDeviceCount(&count);
  if (err != hipSuccess) return std::string("no HIP device: ") + hipGetErrorName(err);
  if (count == 0) return "no HIP device: hipErrorNoDevice";
  if (device < 0 || device >= count)
    return "no HIP device cuda:" + std::to_string(device) + " (" + std::to_string(count) +
           " visible)";
  return {};
}

std::string health_check(int device) {
  if (std::string why = unavailable_reason(device); !why.empty()) return why;
  SDPA_HIP_TRY(hipSetDevice(device));
  constexpr size_t k_count = size_t(1) << 20;
  DeviceBuffer buffer;
  SDPA_HIP_TRY(buffer.allocate(k_count));
  SDPA_HIP_TRY(hipMemset(buffer.get(), 0x5a, k_count));
  std::vector<unsigned char> back(k_count, 0);
  SDPA_HIP_TRY(hipMemcpy(back.data(), buffer.get(), k_count, hipMemcpyDeviceToHost));
  SDPA_HIP_TRY(hipDeviceSynchronize());
  for (unsigned char c : back)
    if (c != 0x5a) return "device memory read back wrong values";
  return {};
}

std::string run(const HipRun& rq, HipResult& result) {
  if (std::string why = unavailable_reason(rq.device); !why.empty()) return why;
  AttnParams p = rq.params;
  if (rq.flash && p.d > k_flash_max_d)
    return "no ref-flash HIP instance for head dim " + std::to_string(p.d) + " (max " +
           std::to_string(k_flash_max_d) + ")";
  if (p.hkv <= 0 || p.hq % p.hkv != 0) return "query heads must be a multiple of key/value heads";
  SDPA_HIP_TRY(hipSetDevice(rq.device));
  hipDeviceProp_t prop;
  SDPA_HIP_TRY(hipGetDeviceProperties(&prop, rq.device));
  const int wave = prop.warpSize;
  const size_t eb = elem_bytes(p.elem);

  DeviceBuffer q, k, v, mask, o, scores;
  SDPA_HIP_TRY(q.allocate(rq.q_count * eb));
  SDPA_HIP_TRY(k.allocate(rq.kv_count * eb));
  SDPA_HIP_TRY(v.allocate(rq.kv_count * eb));
  SDPA_HIP_TRY(o.allocate(rq.q_count * eb));
  SDPA_HIP_TRY(hipMemcpy(q.get(), rq.q, rq.q_count * eb, hipMemcpyHostToDevice));
  SDPA_HIP_TRY(hipMemcpy(k.get(), rq.k, rq.kv_count * eb, hipMemcpyHostToDevice));
  SDPA_HIP_TRY(hipMemcpy(v.get(), rq.v, rq.kv_count * eb, hipMemcpyHostToDevice));
  if (rq.mask && p.mask_kind != MaskKind::none) {
    SDPA_HIP_TRY(mask.allocate(rq.mask_count * sizeof(float)));
    SDPA_HIP_TRY(hipMemcpy(mask.get(), rq.mask, rq.mask_count * sizeof(float),
                           hipMemcpyHostToDevice));
  } else {
    p.mask_kind = MaskKind::none;
  }
  if (!rq.flash)
    SDPA_HIP_TRY(scores.allocate(size_t(p.b * p.hq * p.lq * p.lkv) * sizeof(float)));
  p.lse = nullptr;

  hipEvent_t start, stop;
  SDPA_HIP_TRY(hipEventCreate(&start));
  SDPA_HIP_TRY(hipEventCreate(&stop));
  std::string failure;
  const int runs = std::max(rq.warmup, 0) + std::max(rq.repeat, 1);
  for (int r = 0; r < runs && failure.empty(); ++r) {
    if (hipError_t e = hipEventRecord(start, nullptr); e != hipSuccess) {
      failure = hip_error("hipEventRecord", e);
      break;
    }
    const float* m = static_cast<const float*>(mask.get());
    float* sc = static_cast<float*>(scores.get());
    switch (p.elem) {
    case ElemType::f32: failure = launch<float>(rq, p, wave, q.get(), k.get(), v.get(), m, o.get(), sc); break;
    case ElemType::f16: failure = launch<__half>(rq, p, wave, q.get(), k.get(), v.get(), m, o.get(), sc); break;
    case ElemType::bf16: failure = launch<Bf16>(rq, p, wave, q.get(), k.get(), v.get(), m, o.get(), sc); break;
    }
    if (!failure.empty()) break;
    hipError_t e = hipEventRecord(stop, nullptr);
    if (e == hipSuccess) e = hipEventSynchronize(stop);
    float ms = 0;
    if (e == hipSuccess) e = hipEventElapsedTime(&ms, start, stop);
    if (e != hipSuccess) failure = hip_error("kernel", e);
    else if (r >= std::max(rq.warmup, 0)) result.times_ms.push_back(double(ms));
  }
  (void)hipEventDestroy(start);
  (void)hipEventDestroy(stop);
  if (!failure.empty()) return failure;
  result.out.resize(rq.q_count * eb);
  SDPA_HIP_TRY(hipMemcpy(result.out.data(), o.get(), rq.q_count * eb, hipMemcpyDeviceToHost));
  return {};
}

} // namespace sdpa_doctor::kernels::hip_impl
