// Case-level entry points: lay the inputs out as the case says, run a kernel repeatedly with
// timing, round the output (and the gradients of a backward run) to the case dtype.
#include "kernels/kernels.hpp"
#include "core/io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>

namespace sdpa_doctor::kernels {

std::string_view to_string(RefKernel kernel) {
  return kernel == RefKernel::math ? "ref-math" : "ref-flash";
}

std::optional<RefKernel> ref_kernel_from_string(std::string_view name) {
  if (name == "ref-math") return RefKernel::math;
  if (name == "ref-flash") return RefKernel::flash;
  return std::nullopt;
}

std::string cpu_scope(RefKernel kernel, const Case& c) {
  if (kernel != RefKernel::math || c.flops() <= k_cpu_math_max_flops) return {};
  return fmt::format("ref-math on the CPU takes cases up to {:.0f} GFLOP and this one is {:.1f} "
                     "GFLOP: ref-flash is the CPU witness at this size",
                     k_cpu_math_max_flops / 1e9, c.flops() / 1e9);
}

TensorPlacement placement(Layout layout, int64_t batch, int64_t heads, int64_t length,
                          int64_t d) {
  TensorPlacement t;
  // Transposed: a (B,L,H,D) buffer seen as (B,H,L,D), so heads are D apart and rows H*D apart.
  // Strided: rows 2D apart, the first D of each used. Offset: packed, one element in.
  const int64_t row = layout == Layout::strided ? 2 * d : d;
  t.stride_b = heads * length * row;
  t.stride_h = layout == Layout::transposed ? d : length * row;
  t.stride_l = layout == Layout::transposed ? heads * d : row;
  t.offset = layout == Layout::offset ? 1 : 0;
  t.size = batch * t.stride_b + t.offset;
  return t;
}

namespace {
// The output follows q's layout, as torch's does for the layouts that keep their strides.
std::array<Layout, 4> qkvo_layouts(const Case& c) {
  const auto [q, k, v] = c.qkv_layouts();
  return {q, k, v, q};
}
} // namespace

AttnParams params_for(const Case& c) {
  AttnParams p;
  p.b = c.b;
  p.hq = c.hq;
  p.hkv = c.hkv;
  p.lq = c.lq;
  p.lkv = c.lkv;
  p.d = c.d;
  const auto [lq_, lk_, lv_, lo_] = qkvo_layouts(c);
  auto set = [&](Layout layout, int64_t heads, int64_t length, int64_t& sb, int64_t& sh,
                 int64_t& sl) {
    const TensorPlacement t = placement(layout, c.b, heads, length, c.d);
    sb = t.stride_b;
    sh = t.stride_h;
    sl = t.stride_l;
  };
  set(lq_, c.hq, c.lq, p.q_stride_b, p.q_stride_h, p.q_stride_l);
  set(lk_, c.hkv, c.lkv, p.k_stride_b, p.k_stride_h, p.k_stride_l);
  set(lv_, c.hkv, c.lkv, p.v_stride_b, p.v_stride_h, p.v_stride_l);
  set(lo_, c.hq, c.lq, p.o_stride_b, p.o_stride_h, p.o_stride_l);
  p.mask_stride_b = c.lq * c.lkv;
  p.mask_stride_q = c.lkv;
  // make_inputs rounds every value to the case dtype, so the f32 copies are exact in it.
  p.values_rounded_to = c.dtype == DType::bf16  ? ElemType::bf16
                        : c.dtype == DType::f16 ? ElemType::f16
                                                : ElemType::f32;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d)));
  p.causal = c.causal;
  p.causal_offset = c.causal_offset();
  p.mask_kind = c.mask == Mask::none      ? MaskKind::none
                : c.mask == Mask::boolean ? MaskKind::boolean
                                          : MaskKind::additive;
  return p;
}

std::vector<float> to_layout(const Case& c, Layout layout, const std::vector<float>& logical,
                             int64_t heads, int64_t length) {
  if (layout == Layout::contiguous) return logical;
  const TensorPlacement t = placement(layout, c.b, heads, length, c.d);
  // What lies outside the view is NaN: a kernel that reads it shows it.
  std::vector<float> out(size_t(t.size), std::numeric_limits<float>::quiet_NaN());
  for (int64_t b = 0; b < c.b; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t l = 0; l < length; ++l)
        std::copy_n(logical.begin() + ((b * heads + h) * length + l) * c.d, c.d,
                    out.begin() + t.offset + b * t.stride_b + h * t.stride_h + l * t.stride_l);
  return out;
}

namespace {

// Values of `heads` x `length` rows in `layout` back to logical (B,H,L,D), rounded to the case
// dtype: the inverse of to_layout.
std::vector<float> from_layout(const Case& c, Layout layout, const std::vector<float>& laid_out,
                               int64_t heads, int64_t length) {
  const TensorPlacement t = placement(layout, c.b, heads, length, c.d);
  std::vector<float> out(size_t(c.b * heads * length * c.d));
  for (int64_t b = 0; b < c.b; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t l = 0; l < length; ++l) {
        const int64_t from = t.offset + b * t.stride_b + h * t.stride_h + l * t.stride_l;
        for (int64_t e = 0; e < c.d; ++e)
          out[size_t(((b * heads + h) * length + l) * c.d + e)] =
              round_to_dtype(c.dtype, laid_out[size_t(from + e)]);
      }
  return out;
}

// The case's inputs in its layout, an output buffer, and the parameters over them (the pointers
// stay valid when the struct moves: a moved vector keeps its buffer).
struct LaidOut {
  std::vector<float> q, k, v, o;
  AttnParams p;
};

LaidOut lay_out(const Case& c, const HostInputs& inputs) {
  const auto [lq_, lk_, lv_, lo_] = qkvo_layouts(c);
  const TensorPlacement o = placement(lo_, c.b, c.hq, c.lq, c.d);
  LaidOut l{to_layout(c, lq_, inputs.q, c.hq, c.lq), to_layout(c, lk_, inputs.k, c.hkv, c.lkv),
            to_layout(c, lv_, inputs.v, c.hkv, c.lkv), std::vector<float>(size_t(o.size)),
            params_for(c)};
  const auto at = [&](std::vector<float>& buffer, Layout layout) {
    return buffer.data() + (layout == Layout::offset ? 1 : 0);
  };
  l.p.q = at(l.q, lq_);
  l.p.k = at(l.k, lk_);
  l.p.v = at(l.v, lv_);
  l.p.o = at(l.o, lo_);
  l.p.mask = inputs.mask.empty() ? nullptr : inputs.mask.data();
  return l;
}

} // namespace

std::vector<float> output_from_layout(const Case& c, const std::vector<float>& laid_out) {
  return from_layout(c, qkvo_layouts(c)[3], laid_out, c.hq, c.lq);
}

Expected<KernelRun> run_cpu(RefKernel kernel, const Case& c, const HostInputs& inputs, int warmup,
                            int repeat, int threads, int budget_ms, const EachCall& each_call) {
  if (const std::string bad = validate(c); !bad.empty()) return make_error(bad);
  LaidOut laid = lay_out(c, inputs);
  const AttnParams& p = laid.p;
  if (p.mask_kind != MaskKind::none && inputs.mask.size() != size_t(c.b * c.lq * c.lkv))
    return make_error("mask has the wrong size for the case");
  KernelRun run;
  const auto start = std::chrono::steady_clock::now();
  // Past the budget the warm-ups left are skipped, and no timed run starts after the first.
  const auto spent = [&] { return budget_ms > 0 && ms_since(start) >= budget_ms; };
  const auto once = [&](bool timed) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string refused =
        kernel == RefKernel::math ? cpu_math_attention(p, threads) : cpu_flash_attention(p, threads);
    if (timed) run.times_ms.push_back(ms_since(t0));
    if (refused.empty() && each_call) each_call(output_from_layout(c, laid.o));
    return refused;
  };
  for (int r = 0; r < warmup && (r == 0 || !spent()); ++r)
    if (std::string refused = once(false); !refused.empty()) return make_error(refused);
  for (int r = 0; r < std::max(repeat, 1) && (r <= 1 || !spent()); ++r)
    if (std::string refused = once(true); !refused.empty()) return make_error(refused);
  run.out = output_from_layout(c, laid.o);
  return run;
}

Expected<KernelGradients> run_cpu_backward(RefKernel kernel, const Case& c,
                                           const HostInputs& inputs,
                                           const std::vector<float>& dout, int warmup,
                                           int repeat, int threads,
                                           const EachBackwardCall& each_call) {
  if (const std::string bad = validate(c); !bad.empty()) return make_error(bad);
  if (dout.size() != size_t(c.q_elements()))
    return make_error("the upstream gradient has the wrong size for the case");
  if (c.mask != Mask::none && inputs.mask.size() != size_t(c.b * c.lq * c.lkv))
    return make_error("mask has the wrong size for the case");
  LaidOut laid = lay_out(c, inputs);
  AttnParams& p = laid.p;
  std::vector<float> go(dout.size());
  for (size_t x = 0; x < dout.size(); ++x) go[x] = round_to_dtype(c.dtype, dout[x]);
  go = to_layout(c, qkvo_layouts(c)[3], go, c.hq, c.lq);
  std::vector<float> lse(size_t(c.b * c.hq * c.lq));
  // The gradients in the layouts of q, k and v, as torch's follow their inputs'.
  std::vector<float> dq(laid.q.size()), dk(laid.k.size()), dv(laid.v.size());
  if (kernel == RefKernel::flash) {
    p.lse = lse.data();
    if (std::string refused = cpu_flash_attention(p, threads); !refused.empty())
      return make_error(refused);
    for (float& x : laid.o) x = round_to_dtype(c.dtype, x);
  }
  const auto in_view = [&](std::vector<float>& buffer, const void* view, const float* base) {
    return buffer.data() + (static_cast<const float*>(view) - base);
  };
  const AttnGrads g{in_view(go, p.o, laid.o.data()), in_view(dq, p.q, laid.q.data()),
                    in_view(dk, p.k, laid.k.data()), in_view(dv, p.v, laid.v.data())};
  KernelGradients run;
  for (int r = 0; r < warmup + std::max(repeat, 1); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string refused = kernel == RefKernel::math
                                    ? cpu_math_attention_backward(p, g, threads)
                                    : cpu_flash_attention_backward(p, g, threads);
    if (!refused.empty()) return make_error(refused);
    if (r >= warmup) run.times_ms.push_back(ms_since(t0));
    if (each_call) {
      const auto [lq_, lk_, lv_, lo_] = qkvo_layouts(c);
      each_call(from_layout(c, lq_, dq, c.hq, c.lq), from_layout(c, lk_, dk, c.hkv, c.lkv),
                from_layout(c, lv_, dv, c.hkv, c.lkv));
    }
  }
  const auto [lq_, lk_, lv_, lo_] = qkvo_layouts(c);
  run.dq = from_layout(c, lq_, dq, c.hq, c.lq);
  run.dk = from_layout(c, lk_, dk, c.hkv, c.lkv);
  run.dv = from_layout(c, lv_, dv, c.hkv, c.lkv);
  return run;
}

} // namespace sdpa_doctor::kernels
