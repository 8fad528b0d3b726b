// kernels/attn_params: the plain parameter block every attention kernel (CPU and GPU) takes.
// Pointers, sizes and strides in elements; no framework types. Kept C++17 and free of core
// headers so that the run-time GPU compilers (NVRTC, hipRTC) compile the GPU kernels against it
// unchanged; the GPU kernels take it by value, so host and device must lay it out alike (the
// kernel source checks its size against the host's, kernels/rtc.cpp).
#pragma once

#if defined(__CUDACC_RTC__) || defined(__HIPCC_RTC__)
#include "kernels/gpu_dialect.hpp" // no <cstdint> there: the dialect spells the integer types
#else
#include <cstdint>
#endif

namespace sdpa_doctor::kernels {

// Storage type of q, k, v and o. The CPU kernels take f32 storage only (values already rounded
// to the case dtype); the GPU kernels load f16/bf16 natively.
enum class ElemType : int32_t { f32 = 0, f16 = 1, bf16 = 2 };
enum class MaskKind : int32_t { none = 0, boolean = 1, additive = 2 };

struct AttnParams {
  const void* q = nullptr; // (B, Hq, Lq, D) addressed through the q strides
  const void* k = nullptr; // (B, Hkv, Lkv, D)
  const void* v = nullptr; // (B, Hkv, Lkv, D)
  void* o = nullptr;       // (B, Hq, Lq, D), written in `elem`
  // (B, Lq, Lkv) broadcast over heads, always float: 1/0 for boolean, added to the scores for
  // additive. Null when mask_kind is none. The key stride is 1.
  const float* mask = nullptr;
  // Optional (B, Hq, Lq) contiguous: natural-log softmax denominator of each row (max included);
  // -inf for a row with nothing to attend to. Written by the flash kernels only.
  float* lse = nullptr;
  ElemType elem = ElemType::f32;
  // The dtype the stored f32 values were rounded to (the case dtype): every q, k and v value is
  // exact in it, so a CPU kernel may convert them to it losslessly and use its dot-product
  // instructions (bf16). f32 promises nothing. The GPU kernels, storing `elem`, ignore it.
  ElemType values_rounded_to = ElemType::f32;

  int64_t b = 0, hq = 0, hkv = 0, lq = 0, lkv = 0, d = 0;
  // Strides in elements; the head-dim stride is 1 for q, k, v and o.
  int64_t q_stride_b = 0, q_stride_h = 0, q_stride_l = 0;
  int64_t k_stride_b = 0, k_stride_h = 0, k_stride_l = 0;
  int64_t v_stride_b = 0, v_stride_h = 0, v_stride_l = 0;
  int64_t o_stride_b = 0, o_stride_h = 0, o_stride_l = 0;
  int64_t mask_stride_b = 0, mask_stride_q = 0;

  float scale = 1.0f; // multiplies q.k before the mask is added; PyTorch: 1/sqrt(D)
  bool causal = false;
  // Causal alignment made explicit: query i sees key j when j <= i + causal_offset. PyTorch's
  // is_causal is top-left aligned (offset 0) whatever Lq and Lkv are; bottom-right is Lkv - Lq.
  int64_t causal_offset = 0;
  MaskKind mask_kind = MaskKind::none;
};

} // namespace sdpa_doctor::kernels
