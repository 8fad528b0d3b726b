#include "core/inputs.hpp"

#include <algorithm>

#include <cmath>
#include <cstring>

namespace sdpa_doctor {

uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x45d9f3bU;
  x ^= x >> 16;
  x *= 0x45d9f3bU;
  x ^= x >> 16;
  return x;
}

uint32_t input_key(uint64_t seed, InputTensor tensor) {
  const uint32_t t = static_cast<uint32_t>(tensor);
  return hash32(hash32(static_cast<uint32_t>(seed)) ^ (t * 0x9e3779b9U));
}

namespace {
uint32_t bits_at(uint32_t key, uint64_t index) {
  return hash32(static_cast<uint32_t>(index) + key);
}
float unit_from_bits(uint32_t u) {
  return static_cast<float>(u >> 8) * 0x1p-23f - 1.0f;
}
} // namespace

float unit_value(uint32_t key, uint64_t index) { return unit_from_bits(bits_at(key, index)); }

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

std::vector<float> fill(const Case& c, InputTensor tensor, int64_t count, float scale,
                        const std::atomic<bool>* cancel) {
  std::vector<float> out(static_cast<size_t>(count));
  const uint32_t key = input_key(c.seed, tensor);
  constexpr int64_t k_chunk = int64_t{1} << 16; // an interrupt waits for at most one chunk
  for (int64_t start = 0; start < count && !cancelled(cancel); start += k_chunk)
    for (int64_t i = start, end = std::min(count, start + k_chunk); i < end; ++i)
      out[size_t(i)] = round_to_dtype(c.dtype, scale * unit_value(key, uint64_t(i)));
  return out;
}
} // namespace

HostInputs make_inputs(const Case& c, const std::atomic<bool>* cancel) {
  HostInputs in;
  in.q = fill(c, InputTensor::q, c.q_elements(), 4.0f, cancel);
  in.k = fill(c, InputTensor::k, c.kv_elements(), 1.0f, cancel);
  in.v = fill(c, InputTensor::v, c.kv_elements(), 1.0f, cancel);
  if (c.mask != Mask::none && !cancelled(cancel)) {
    const int64_t count = c.b * c.lq * c.lkv;
    const uint32_t key = input_key(c.seed, InputTensor::mask);
    in.mask.resize(size_t(count));
    for (int64_t i = 0; i < count; ++i) {
      const uint32_t u = bits_at(key, uint64_t(i));
      if (c.mask == Mask::boolean) {
        const bool first_key = (i % c.lkv) == 0;
        in.mask[size_t(i)] = (first_key || (u & 3U) != 0) ? 1.0f : 0.0f;
      } else {
        in.mask[size_t(i)] = round_to_dtype(c.dtype, -2.0f * (unit_from_bits(u) + 1.0f));
      }
    }
  }
  return in;
}

} // namespace sdpa_doctor
