#include "core/inputs.hpp"

#include <algorithm>

#include <cmath>
#include <cstring>
#include <limits>

namespace sdpa_doctor {

namespace {
// Inlined into the element loops below (no call per element, so they vectorise).
[[gnu::always_inline]] inline uint32_t hash32_inline(uint32_t x) {
  x ^= x >> 16;
  x *= 0x45d9f3bU;
  x ^= x >> 16;
  x *= 0x45d9f3bU;
  x ^= x >> 16;
  return x;
}

[[gnu::always_inline]] inline float unit_inline(uint32_t u) {
  return static_cast<float>(u >> 8) * 0x1p-23f - 1.0f;
}
} // namespace

uint32_t hash32(uint32_t x) { return hash32_inline(x); }

uint32_t input_key(uint64_t seed, InputTensor tensor) {
  const uint32_t t = static_cast<uint32_t>(tensor);
  return hash32(hash32(static_cast<uint32_t>(seed)) ^ (t * 0x9e3779b9U));
}

float unit_value(uint32_t key, uint64_t index) {
  return unit_inline(hash32_inline(static_cast<uint32_t>(index) + key));
}

uint16_t float_to_bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t rounding = 0x7FFFU + ((bits >> 16) & 1U);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float bf16_bits_to_float(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, sizeof out);
  return out;
}

uint16_t float_to_half_bits(float value) {
  // _Float16 conversion is IEEE round-to-nearest-even, subnormals included.
  const _Float16 h = static_cast<_Float16>(value);
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

float half_bits_to_float(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof h);
  return static_cast<float>(h);
}

float round_to_dtype(DType dtype, float value) {
  switch (dtype) {
  case DType::f32: return value;
  case DType::bf16: return bf16_bits_to_float(float_to_bf16_bits(value));
  case DType::f16: return half_bits_to_float(float_to_half_bits(value));
  }
  return value;
}

namespace {
bool cancelled(const std::atomic<bool>* cancel) {
  return cancel && cancel->load(std::memory_order_relaxed);
}

// The element loops below compute exactly what unit_value and round_to_dtype define, written so
// that they vectorise (no call per element, no _Float16, whose conversion is a libgcc call
// without F16C): a case's inputs are up to hundreds of millions of elements, and building them
// took a third of the oracle producer's time once the oracle was fast.

// Round-to-nearest-even to the dtype, returned as float, for finite values (the inputs never
// hold a NaN). f16: bits equal to the _Float16 round trip for every non-NaN float (checked over
// all 2^32 patterns): a 13-bit RNE on the bits in the normal range, past 65504 infinity, and
// below 2^-14 a float addition that rounds to a multiple of 2^-24 (the subnormal step).
template <DType T> [[gnu::always_inline]] inline float round_inline(float v) {
  const uint32_t bits = __builtin_bit_cast(uint32_t, v);
  if constexpr (T == DType::bf16) {
    return __builtin_bit_cast(float, (bits + 0x7FFFU + ((bits >> 16) & 1U)) & 0xFFFF0000U);
  } else if constexpr (T == DType::f16) {
    const uint32_t sign = bits & 0x80000000U;
    const uint32_t a = bits ^ sign;
    uint32_t r = (a + 0x0FFFU + ((a >> 13) & 1U)) & ~0x1FFFU;
    r = r > 0x477FE000U ? 0x7F800000U : r;
    const float sub = (__builtin_bit_cast(float, a) + 0.5f) - 0.5f;
    const uint32_t out = a < 0x38800000U ? __builtin_bit_cast(uint32_t, sub) : r;
    return __builtin_bit_cast(float, out | sign);
  } else {
    return v;
  }
}

// One build for every x86-64 machine, the loop cloned per ISA level (32-bit multiplies are
// one instruction from SSE4.1 on), as in kernels/cpu_flash.cpp.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__)
#define SDPA_INPUT_CLONES                                                                        \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SDPA_INPUT_CLONES
#endif

template <DType T>
[[gnu::always_inline]] inline void fill_range(float* out, uint32_t key, uint64_t begin,
                                              uint64_t end, float scale) {
  for (uint64_t i = begin; i < end; ++i)
    out[i - begin] = round_inline<T>(scale * unit_inline(hash32_inline(uint32_t(i) + key)));
}

SDPA_INPUT_CLONES void fill_chunk(DType dtype, float* out, uint32_t key, uint64_t begin,
                                  uint64_t end, float scale) {
  switch (dtype) {
  case DType::f32: fill_range<DType::f32>(out, key, begin, end, scale); break;
  case DType::bf16: fill_range<DType::bf16>(out, key, begin, end, scale); break;
  case DType::f16: fill_range<DType::f16>(out, key, begin, end, scale); break;
  }
}

// Additive mask: -2 * (unit + 1), rounded; bool mask: 1 where (u & 3) != 0 or at key 0, else 0.
template <DType T>
[[gnu::always_inline]] inline void mask_range(float* out, uint32_t key, uint64_t begin,
                                              uint64_t end, bool boolean) {
  for (uint64_t i = begin; i < end; ++i) {
    const uint32_t u = hash32_inline(uint32_t(i) + key);
    out[i - begin] = boolean ? ((u & 3U) != 0 ? 1.0f : 0.0f)
                             : round_inline<T>(-2.0f * (unit_inline(u) + 1.0f));
  }
}

SDPA_INPUT_CLONES void mask_chunk(DType dtype, float* out, uint32_t key, uint64_t begin,
                                  uint64_t end, bool boolean) {
  switch (dtype) {
  case DType::f32: mask_range<DType::f32>(out, key, begin, end, boolean); break;
  case DType::bf16: mask_range<DType::bf16>(out, key, begin, end, boolean); break;
  case DType::f16: mask_range<DType::f16>(out, key, begin, end, boolean); break;
  }
}

constexpr int64_t k_chunk = int64_t{1} << 16; // an interrupt waits for at most one chunk

std::vector<float> fill(const Case& c, InputTensor tensor, int64_t count, float scale,
                        const std::atomic<bool>* cancel) {
  std::vector<float> out(static_cast<size_t>(count));
  const uint32_t key = input_key(c.seed, tensor);
  for (int64_t start = 0; start < count && !cancelled(cancel); start += k_chunk)
    fill_chunk(c.dtype, out.data() + start, key, uint64_t(start),
               uint64_t(std::min(count, start + k_chunk)), scale);
  return out;
}
} // namespace

namespace {
// Query i keeps keys i-W < j <= i; a row with no key in its band keeps the last key.
std::vector<float> window_mask(const Case& c) {
  std::vector<float> out(static_cast<size_t>(c.lq * c.lkv), 0.0f);
  for (int64_t i = 0; i < c.lq; ++i) {
    float* row = out.data() + i * c.lkv;
    const int64_t first = std::max<int64_t>(0, i - c.window + 1);
    const int64_t last = std::min(i, c.lkv - 1);
    for (int64_t j = first; j <= last; ++j) row[j] = 1.0f;
    if (first > last) row[c.lkv - 1] = 1.0f;
  }
  return out;
}

// The mask's own values: B*Lq*Lkv for (B,1,..) and (B,H,..), Lq*Lkv for the shapes every batch
// shares.
std::vector<float> own_mask_values(const Case& c, const std::atomic<bool>* cancel) {
  if (c.window > 0) return window_mask(c);
  const bool shared = c.mask_shape == MaskShape::shared || c.mask_shape == MaskShape::plain;
  const int64_t count = (shared ? 1 : c.b) * c.lq * c.lkv;
  const uint32_t key = input_key(c.seed, InputTensor::mask);
  std::vector<float> out(static_cast<size_t>(count));
  const bool boolean = c.mask == Mask::boolean;
  for (int64_t start = 0; start < count && !cancelled(cancel); start += k_chunk)
    mask_chunk(c.mask_value_dtype(), out.data() + start, key, uint64_t(start),
               uint64_t(std::min(count, start + k_chunk)), boolean);
  // Key 0 of every row is always kept, so no row is fully masked.
  if (boolean)
    for (size_t row = 0; row < out.size(); row += size_t(c.lkv)) out[row] = 1.0f;
  // Unless the case asks for fully masked rows: every fourth, from row 3, masks all its keys.
  if (c.masked_rows) {
    const float masked = boolean ? 0.0f : -std::numeric_limits<float>::infinity();
    for (int64_t row = 0; row * c.lkv < count; ++row)
      if (row % c.lq % 4 == 3) std::fill_n(out.begin() + row * c.lkv, c.lkv, masked);
  }
  return out;
}
} // namespace

namespace {
// A dropout case's V: the identity in every (batch, head), so that the output is the dropped and
// rescaled probabilities themselves.
std::vector<float> identity_values(const Case& c) {
  std::vector<float> out(static_cast<size_t>(c.kv_elements()), 0.0f);
  for (int64_t m = 0; m < c.b * c.hkv; ++m)
    for (int64_t j = 0; j < std::min(c.lkv, c.d); ++j) out[size_t((m * c.lkv + j) * c.d + j)] = 1.0f;
  return out;
}
} // namespace

HostInputs make_inputs(const Case& c, const std::atomic<bool>* cancel) {
  HostInputs in;
  // Powers of two: `large` scales exactly.
  in.q = fill(c, InputTensor::q, c.q_elements(), c.large ? 64.0f : 4.0f, cancel);
  in.k = fill(c, InputTensor::k, c.kv_elements(), c.large ? 16.0f : 1.0f, cancel);
  in.v = c.dropout_percent > 0 ? identity_values(c)
                                : fill(c, InputTensor::v, c.kv_elements(), 1.0f, cancel);
  if (c.mask != Mask::none && !cancelled(cancel)) {
    in.mask = own_mask_values(c, cancel);
    // A mask every batch shares, repeated for each: HostInputs holds (B,Lq,Lkv).
    const size_t per_batch = size_t(c.lq * c.lkv);
    if (in.mask.size() == per_batch && c.b > 1) {
      in.mask.resize(per_batch * size_t(c.b));
      for (int64_t b = 1; b < c.b; ++b)
        std::copy_n(in.mask.begin(), per_batch, in.mask.begin() + b * per_batch);
    }
  }
  if (c.backward && !cancelled(cancel)) in.grad_out = make_upstream_gradient(c, cancel);
  return in;
}

std::vector<float> make_upstream_gradient(const Case& c, const std::atomic<bool>* cancel) {
  return fill(c, InputTensor::grad_out, c.q_elements(), 1.0f, cancel);
}

} // namespace sdpa_doctor
