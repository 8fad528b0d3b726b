// core/case: one attention problem (dtype x shape x causal/mask/GQA/layout x seed), its stable id,
// and the parsers for `--case` strings, case ids and case-file JSON lines.
// Depends on the standard library and nlohmann-json (header-only) only.
#pragma once

#include "core/expected.hpp"

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sdpa_doctor {

enum class DType { f16, bf16, f32 };
enum class Mask { none, boolean, additive };
// Layout of a tensor in memory, as user code produces it:
//   contiguous: packed (B,H,L,D);
//   transposed: a (B,L,H,D) buffer viewed as (B,H,L,D), `x.view(B,L,H,D).transpose(1,2)`;
//   strided: the first D of every row of a (B,H,L,2D) buffer, `wide[..., :D]` (a fused
//            projection's slice: the row stride is not the packed one);
//   offset: packed, one element into its storage (`flat[1:].view(...)`: not 16-byte aligned).
// A mask takes contiguous, strided (rows of a buffer round_up(Lkv, 16) + 1 wide: a row stride
// that is no multiple of 16) or offset.
enum class Layout { contiguous, transposed, strided, offset };
// The shape of the mask SDPA is given; its values broadcast to (B,Hq,Lq,Lkv).
enum class MaskShape { batch, batch_heads, shared, plain }; // (B,1,..) (B,H,..) (1,1,..) (Lq,Lkv)
// What attention gives for a query row whose mask masks every key: torch >= 2.5 (its
// `_safe_softmax`) and our own kernels return 0 there (and 0 gradients); torch < 2.5 NaN.
enum class MaskedRowSemantics { zero, nan };

std::string_view to_string(DType dtype);  // "fp16", "bf16", "fp32"
std::string_view to_string(Mask mask);    // "none", "bool", "additive"
std::string_view to_string(Layout layout); // "contiguous", "transposed", "strided", "offset"
std::string_view to_string(MaskShape shape); // "b1qk", "bhqk", "11qk", "qk"
std::string_view to_string(MaskedRowSemantics semantics); // "zero", "nan"
std::optional<MaskedRowSemantics> masked_row_semantics_from_string(std::string_view text);
std::optional<DType> dtype_from_string(std::string_view text); // also float16/half/bfloat16/float32
std::optional<Mask> mask_from_string(std::string_view text);
std::optional<Layout> layout_from_string(std::string_view text);
std::optional<MaskShape> mask_shape_from_string(std::string_view text);
int dtype_size_bytes(DType dtype);

// Upper bounds a case must respect; past them the parsers refuse it (exit 2).
inline constexpr int64_t k_max_dim = 1 << 20;           // any single size
inline constexpr int64_t k_max_elements = int64_t{1} << 34; // of any one tensor
inline constexpr int k_max_dropout_percent = 90;

struct Case {
  DType dtype = DType::f16;
  int64_t b = 1;    // batch
  int64_t hq = 8;   // query heads
  int64_t hkv = 8;  // key/value heads (GQA when hq != hkv; hq % hkv == 0)
  int64_t lq = 128; // query length
  int64_t lkv = 128; // key/value length
  int64_t d = 64;   // head dim (q, k and v share it)
  bool causal = false; // top-left aligned when lq != lkv, as torch's is_causal
  // With causal: the diagonal aligned bottom-right instead, query i sees key j <= i + lkv - lq,
  // as torch's causal_lower_right (decoding, chunked prefill). Only where lq < lkv: at lq == lkv
  // it is top-left exactly (the parsers normalise it so), past it rows would see no key.
  bool causal_bottom_right = false;
  Mask mask = Mask::none;
  Layout layout = Layout::contiguous; // of q, k and v, unless a tensor's own layout says otherwise
  // A tensor's own layout, set only where q, k and v differ (set_layouts keeps it so).
  std::optional<Layout> q_layout, k_layout, v_layout;
  std::optional<DType> mask_dtype; // an additive mask's own dtype, set only where it is not `dtype`
  MaskShape mask_shape = MaskShape::batch;
  Layout mask_layout = Layout::contiguous; // contiguous, strided or offset
  int64_t window = 0; // > 0: the bool mask is a sliding window, a causal band of this many keys
  bool large = false; // q and k scaled by 16 each: scores reach about 1e4 (low-precision overflow)
  // Every query row i with i % 4 == 3 is fully masked (all keys) in every batch and head; needs a
  // bool or additive mask, not a window.
  bool masked_rows = false;
  uint64_t seed = 0;
  // Forward, then backward for a seeded upstream gradient: dq, dk and dv are checked too.
  bool backward = false;
  // dropout_p in hundredths (0: none). A dropout case's V is the identity (Lkv = D), so its
  // output is the dropped and rescaled probability matrix, judged statistically, not elementwise.
  int dropout_percent = 0;

  bool operator==(const Case&) const = default;

  // Stable, human-readable and parseable back with parse_case_id, e.g.
  // "bf16-b1-h32-q4096-k4096-d128-causal" (bottom-right "-causal_br") or
  // "fp16-b2-h8:2-q1-k77-d64-mask_bool-tr-s3"; a
  // case with fully masked rows has "-mrows" and a dropout case "-drop0.25" before its seed; a
  // backward case ends in "-bwd".
  std::string id() const;

  std::array<Layout, 3> qkv_layouts() const; // of q, k and v
  // Sets the three layouts in the one form: alike -> `layout`; else each non-contiguous one's own.
  void set_layouts(Layout q, Layout k, Layout v);
  // Query i sees key j when j <= i + causal_offset() (under causal): 0 top-left, lkv - lq
  // bottom-right.
  int64_t causal_offset() const { return causal && causal_bottom_right ? lkv - lq : 0; }
  DType mask_value_dtype() const { return mask_dtype.value_or(dtype); }
  double dropout_p() const { return dropout_percent / 100.0; }

  int64_t q_elements() const { return b * hq * lq * d; }
  int64_t kv_elements() const { return b * hkv * lkv * d; }
  // Bytes of q, k, v, output (and mask, in its own dtype and shape) in the case dtype; a strided
  // tensor counts its whole buffer.
  int64_t input_bytes() const;
  // Bytes the math backend materialises for the scores (B*Hq*Lq*Lkv in fp32, twice: scores and
  // softmax), which is what a memory guard must budget for.
  int64_t math_scores_bytes() const;
  // 4*B*Hq*Lq*Lkv*D, halved for causal (bottom-right: times the fraction of scores seen): the
  // usual attention FLOP count; a backward case counts
  // its forward and backward, 3.5 times that (the backward recomputes the scores and makes four
  // products of that size).
  double flops() const;
  // The same case in the forward direction only.
  Case forward_only() const {
    Case c = *this;
    c.backward = false;
    return c;
  }
};

// Checks sizes, GQA divisibility and the bounds above. Empty string when valid.
std::string validate(const Case& c);

// `--case "dtype=bf16,b=1,h=32,l=4096,d=128,causal"`: keys dtype, b, h (sets hq and hkv), hq, hkv,
// l (sets lq and lkv), lq, lkv, d, causal[=0|1|top_left|bottom_right] (bottom_right needs
// lq <= lkv; at lq == lkv it is top_left), mask=none|bool|additive,
// layout=contiguous|transposed|strided|offset (q, k and v), q_layout, k_layout, v_layout (one
// tensor's, over layout's), mask_dtype=fp16|bf16|fp32 (additive), mask_shape=b1qk|bhqk|11qk|qk,
// mask_layout=contiguous|strided|offset, window=W (a bool sliding-window mask), large[=0|1],
// seed, masked_rows[=0|1] (rows i % 4 == 3 fully masked; needs a mask and lq >= 4),
// backward[=0|1], dropout=P (0 <= P <= 0.9 in steps of 0.01; needs lkv = d and no backward).
// Unknown keys and bad values are errors.
Expected<Case> parse_case_spec(std::string_view spec);
Expected<Case> parse_case_id(std::string_view id);

// JSON form (case files: one object per line with the same keys as parse_case_spec; "causal" is
// true, false or "bottom_right").
nlohmann::json to_json(const Case& c);
Expected<Case> case_from_json(const nlohmann::json& j);

// Tolerance for one comparison against the float64 oracle: an element is outside when
// |out - ref| > atol + rtol * |ref|.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
  bool operator==(const Tolerance&) const = default;
};

} // namespace sdpa_doctor
