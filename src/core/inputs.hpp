// core/inputs: the deterministic inputs every worker builds for a case, bit for bit the same in
// C++ (torch and reference workers) and Python (the probe's sdpa_probe/inputs.py mirrors this
// file exactly).
// Depends on the standard library only.
//
// Definition (keep sdpa_probe/inputs.py in step with it):
//   hash32(x) = x ^= x >> 16; x *= 0x45d9f3b; x ^= x >> 16; x *= 0x45d9f3b; x ^= x >> 16  (mod 2^32)
//   key(seed, t) = hash32(hash32(seed mod 2^32) ^ (t * 0x9e3779b9 mod 2^32)),
//                  t: q=0 k=1 v=2 mask=3 upstream gradient=4
//   u(i) = hash32((i + key) mod 2^32) for the element at logical row-major index i
//   unit(i) = (u(i) >> 8) * 2^-23 - 1, in [-1, 1), exact in fp32
//   q = 4 * unit (sharper softmax), k = v = unit, the upstream gradient dO = unit (B,Hq,Lq,D); additive mask = -2 * (unit + 1), in (-4, 0];
//   bool mask keeps (u & 3) != 0 and always keeps key 0 (no fully masked rows).
//   `large`: q = 64 * unit and k = 16 * unit, so that q.k reaches about 1e4.
//   A dropout case's V is the identity in every (batch, head) (Lkv = D, no hash): the output is the
//   dropped and rescaled probability matrix.
//   A sliding window W (no hash): query i keeps keys i-W < j <= i; a row whose band holds no key
//   (i >= Lkv + W - 1) keeps key Lkv-1, so no row is fully masked.
//   `masked_rows`: every query row i with i % 4 == 3 is fully masked, in every batch (and head):
//   a bool mask is 0 for all its keys, an additive mask -inf (in its own dtype).
// Values are then rounded to the case dtype (round-to-nearest-even, as torch's .to() does), an
// additive mask to its own dtype (Case::mask_value_dtype).
// q/k/v are logical (B,H,L,D). The mask's values are defined over the shape SDPA is given, in
// row-major order: (B,1,Lq,Lkv) indexes b*Lq*Lkv + i*Lkv + j; (1,1,Lq,Lkv) and (Lq,Lkv) index
// i*Lkv + j, the same for every batch; (B,H,Lq,Lkv) repeats the (B,1,Lq,Lkv) values over its
// heads. So every shape reduces to the (B,Lq,Lkv) form HostInputs holds and the oracle and our
// kernels read. Every factor is a power of two, so every value is exact in fp16, bf16 and fp32
// before the final rounding.
// A case's tensors reach torch in their own layouts (contiguous, transposed, strided or offset;
// the mask in its dtype, shape and layout): workers hand over these logical values and the
// LibTorch plugin (laid_out, to_mask) and the probe's inputs.place_inputs lay them out on the
// device itself, since .to(device) of a strided or offset view makes it contiguous. Our kernels
// read the same layouts through AttnParams strides (kernels::placement); the oracle reads logical
// values.
#pragma once

#include "core/case.hpp"

#include <atomic>
#include <cstdint>
#include <vector>

namespace sdpa_doctor {

enum class InputTensor : uint32_t { q = 0, k = 1, v = 2, mask = 3, grad_out = 4 };

uint32_t hash32(uint32_t x);
uint32_t input_key(uint64_t seed, InputTensor tensor);
// The value before dtype rounding, in [-1, 1).
float unit_value(uint32_t key, uint64_t index);

// Round-to-nearest-even to the dtype, returned as float.
float round_to_dtype(DType dtype, float value);
uint16_t float_to_bf16_bits(float value);
float bf16_bits_to_float(uint16_t bits);
uint16_t float_to_half_bits(float value);
float half_bits_to_float(uint16_t bits);

struct HostInputs {
  std::vector<float> q; // B*Hq*Lq*D, logical (B,H,L,D) row-major
  std::vector<float> k; // B*Hkv*Lkv*D
  std::vector<float> v; // B*Hkv*Lkv*D
  // B*Lq*Lkv (broadcast over heads), whatever shape SDPA is given (see above); empty for
  // Mask::none. Bool masks hold 1 (attend) or 0.
  std::vector<float> mask;
  // Backward cases: the upstream gradient dO, logical (B,Hq,Lq,D) (make_upstream_gradient);
  // empty otherwise.
  std::vector<float> grad_out;
};

// With `cancel` set midway the result is incomplete: look at the flag before using it.
HostInputs make_inputs(const Case& c, const std::atomic<bool>* cancel = nullptr);
// A backward case's upstream gradient dO, logical (B,Hq,Lq,D), rounded to the case dtype.
std::vector<float> make_upstream_gradient(const Case& c, const std::atomic<bool>* cancel = nullptr);

} // namespace sdpa_doctor
