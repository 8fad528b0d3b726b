// kernels/attention_core: the math shared by every kernel, CPU and GPU alike: which (query, key)
// pairs are visible, the masked score, the online-softmax row update and its final scaling, and
// the exp they all use. Header-only; compiles as plain inline C++17 with g++ and as
// __host__ __device__ with NVRTC, hipRTC and hipcc. Depends on attn_params.hpp only (no std
// headers: the run-time compilers have none).
#pragma once

#include "kernels/attn_params.hpp"

#if defined(__HIPCC__) || defined(__CUDACC__)
#define SDPA_HD __host__ __device__ inline
#else
#define SDPA_HD inline
#endif

namespace sdpa_doctor::kernels::core {

// -inf without <limits>/<cmath>, which device code does not always have (nor NVRTC the
// __builtin_inff of GCC and Clang): the bits of IEEE-754 single -inf.
SDPA_HD constexpr float neg_inf() { return __builtin_bit_cast(float, 0xff800000u); }

// Whether query row i may attend key j before any additive mask.
SDPA_HD bool visible(bool causal, int64_t causal_offset, MaskKind kind, float mask_value,
                     int64_t i, int64_t j) {
  if (causal && j > i + causal_offset) return false;
  if (kind == MaskKind::boolean && mask_value == 0.0f) return false;
  return true;
}

// The score that enters the softmax: scaled dot product plus additive mask, -inf when dropped.
SDPA_HD float masked_score(float dot, float scale, bool causal, int64_t causal_offset,
                           MaskKind kind, float mask_value, int64_t i, int64_t j) {
  if (!visible(causal, causal_offset, kind, mask_value, i, j)) return neg_inf();
  const float s = dot * scale;
  return kind == MaskKind::additive ? s + mask_value : s;
}

// exp(x) for x <= 0 (what softmax needs after the max is subtracted) in plain arithmetic, so
// that CPU loops vectorise without -ffast-math and CPU and GPU round the same way: Cody-Waite
// range reduction and the Cephes expf polynomial, about 1 ulp; 0 below -87 and for -inf.
SDPA_HD float exp_nonpositive(float x) {
  const float xc = x < -87.0f ? -87.0f : x;
  // Adding 1.5 * 2^23 rounds to the nearest integer in the default rounding mode.
  const float shifter = 12582912.0f;
  const float t = xc * 1.44269504088896341f + shifter;
  const float n = t - shifter;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  const int32_t ni = __builtin_bit_cast(int32_t, t) - __builtin_bit_cast(int32_t, shifter);
  const float two_n = __builtin_bit_cast(float, (ni + 127) << 23);
  const float y = er * two_n;
  return x < -87.0f ? 0.0f : y;
}

// Running state of one query row in the online softmax: max so far and the sum of
// exp(score - max) so far.
struct RowState {
  float max;
  float sum;
};

SDPA_HD RowState row_start() { return RowState{neg_inf(), 0.0f}; }

// Takes the max of the next tile's scores for this row; returns the factor by which the row's
// accumulator (and sum) must be multiplied so that everything is relative to the new max.
SDPA_HD float row_rescale(RowState& st, float tile_max) {
  const float new_max = tile_max > st.max ? tile_max : st.max;
  // Nothing visible yet: keep the (zero) accumulator as it is instead of computing exp(-inf+inf).
  const float alpha = new_max == neg_inf() ? 1.0f : exp_nonpositive(st.max - new_max);
  st.sum *= alpha;
  st.max = new_max;
  return alpha;
}

// Unnormalised probability of one score against the row's current max (0 for a dropped key).
SDPA_HD float row_prob(const RowState& st, float score) {
  return score == neg_inf() ? 0.0f : exp_nonpositive(score - st.max);
}

// The one normalisation at the end; a row that saw no key ends as zeros, never NaN.
SDPA_HD float row_final_scale(const RowState& st) { return st.sum > 0.0f ? 1.0f / st.sum : 0.0f; }

// Natural-log softmax denominator, max included; -inf for an empty row. log_fn is the caller's
// log (std::log on the host, logf on the device): no shared header offers both.
template <typename LogFn> SDPA_HD float row_lse(const RowState& st, LogFn log_fn) {
  return st.sum > 0.0f ? st.max + log_fn(st.sum) : neg_inf();
}

} // namespace sdpa_doctor::kernels::core
