// ref-math's backward on the CPU: the chain rule through ref-math's forward as a math backend's
// autograd takes it, one query row at a time in fp32 with sequential sums: the row's scores and
// softmax as the forward computes them, dP = dO.V^T, dS = P (dP - sum_j P_j dP_j) (the softmax's
// own backward, where ref-flash uses dO.O), then dQ, and each query head's dK and dV. It shares
// only the masking rules with ref-flash's backward, so the two fail independently.
#include "kernels/cpu_math_row.hpp"
#include "kernels/kernels.hpp"
#include "kernels/parallel_for.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace sdpa_doctor::kernels {

std::string cpu_math_attention_backward(const AttnParams& p, const AttnGrads& g, int threads) {
  if (p.elem != ElemType::f32) return "the CPU kernels take f32 storage";
  if (p.hkv <= 0 || p.hq % p.hkv != 0) return "query heads must be a multiple of key/value heads";
  const int64_t group = p.hq / p.hkv;
  const int n_threads = threads > 0 ? threads : default_thread_count();
  // Each query head's dK and dV, contiguous (Lkv, D); summed per kv head afterwards in head
  // order, so that the sums do not depend on which thread finished first.
  const int64_t head_kv = p.lkv * p.d;
  std::vector<float> dk_heads(size_t(p.b * p.hq * head_kv)), dv_heads(dk_heads.size());
  struct Row {
    std::vector<float> s, dp;
  };
  std::vector<Row> rows(size_t(n_threads), Row{std::vector<float>(size_t(p.lkv)),
                                               std::vector<float>(size_t(p.lkv))});

  auto head = [&](int64_t bh, int worker) {
    const int64_t b = bh / p.hq;
    const int64_t h = bh % p.hq;
    const int64_t hk = h / group;
    const float* q = static_cast<const float*>(p.q) + b * p.q_stride_b + h * p.q_stride_h;
    const float* k = static_cast<const float*>(p.k) + b * p.k_stride_b + hk * p.k_stride_h;
    const float* v = static_cast<const float*>(p.v) + b * p.v_stride_b + hk * p.v_stride_h;
    const float* go = g.dout + b * p.o_stride_b + h * p.o_stride_h;
    float* dq = g.dq + b * p.q_stride_b + h * p.q_stride_h;
    float* dk = dk_heads.data() + bh * head_kv;
    float* dv = dv_heads.data() + bh * head_kv;
    std::fill_n(dk, head_kv, 0.0f);
    std::fill_n(dv, head_kv, 0.0f);
    const float* mask = p.mask_kind == MaskKind::none ? nullptr : p.mask + b * p.mask_stride_b;
    std::vector<float>& s = rows[size_t(worker)].s;
    std::vector<float>& dp = rows[size_t(worker)].dp;
    for (int64_t i = 0; i < p.lq; ++i) {
      const float* qrow = q + i * p.q_stride_l;
      const float* gorow = go + i * p.o_stride_l;
      float* dqrow = dq + i * p.q_stride_l;
      std::fill_n(dqrow, p.d, 0.0f);
      const float f = math_row_softmax(p, qrow, k, mask, i, s.data());
      if (f == 0.0f) continue; // a fully masked row: output 0, no gradient through it
      // P, dP = dO.V^T and sum_j P_j dP_j, the softmax backward's row term.
      float p_dot_dp = 0.0f;
      for (int64_t j = 0; j < p.lkv; ++j) {
        s[size_t(j)] *= f;
        const float* vrow = v + j * p.v_stride_l;
        float dot = 0.0f;
        for (int64_t e = 0; e < p.d; ++e) dot += gorow[e] * vrow[e];
        dp[size_t(j)] = dot;
        p_dot_dp += s[size_t(j)] * dot;
      }
      for (int64_t j = 0; j < p.lkv; ++j) {
        const float pj = s[size_t(j)];
        if (pj == 0.0f) continue;
        // dS through the scale: the score is scale * q.k (plus a mask that takes no gradient).
        const float ds = pj * (dp[size_t(j)] - p_dot_dp) * p.scale;
        const float* krow = k + j * p.k_stride_l;
        for (int64_t e = 0; e < p.d; ++e) {
          dv[j * p.d + e] += pj * gorow[e];
          dqrow[e] += ds * krow[e];
          dk[j * p.d + e] += ds * qrow[e];
        }
      }
    }
  };
  auto reduce = [&](int64_t bk, int) {
    const int64_t b = bk / p.hkv;
    const int64_t hk = bk % p.hkv;
    float* dk = g.dk + b * p.k_stride_b + hk * p.k_stride_h;
    float* dv = g.dv + b * p.v_stride_b + hk * p.v_stride_h;
    const float* dk_h = dk_heads.data() + (b * p.hq + hk * group) * head_kv;
    const float* dv_h = dv_heads.data() + (b * p.hq + hk * group) * head_kv;
    for (int64_t j = 0; j < p.lkv; ++j)
      for (int64_t e = 0; e < p.d; ++e) {
        float sum_k = 0.0f, sum_v = 0.0f;
        for (int64_t x = 0; x < group; ++x) {
          sum_k += dk_h[x * head_kv + j * p.d + e];
          sum_v += dv_h[x * head_kv + j * p.d + e];
        }
        dk[j * p.k_stride_l + e] = sum_k;
        dv[j * p.v_stride_l + e] = sum_v;
      }
  };
  parallel_for_two_phase(p.b * p.hq, head, p.b * p.hkv, reduce, n_threads);
  return {};
}

} // namespace sdpa_doctor::kernels
