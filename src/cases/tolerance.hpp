// cases/tolerance: the one place where the per-dtype tolerances of the oracle comparison live,
// with the parser for user overrides ("bf16=atol:rtol,fp16=atol:rtol").
// Depends on core only; knows nothing of torch or of processes.
//
// Why these numbers. Inputs are bounded (q in [-4,4), k and v in [-1,1)), so every output element
// is a convex combination of values of v and |out| < 1. The oracle is float64 over the same
// dtype-rounded inputs, so the error of a backend is its own intermediate rounding:
//  - fp32: unit roundoff 2^-24 (6e-8); a softmax over Lkv terms and a D-long dot product lose a few
//    ulps. Measured on the quick suite (torch 2.13 CPU math and flash): max abs err 7.5e-7.
//    1e-5 + 1e-5 relative is ~13x that and still rejects any real bug.
//  - fp16: unit roundoff 2^-11 (4.9e-4); the output is rounded once (<= 2.4e-4 abs below 1) and
//    fused kernels round the probabilities to fp16 before P.V. Measured: math 2.4e-4, flash
//    3.5e-4. 2e-3 + 2e-3 relative is ~6x that, room for GPU kernels' exp2 approximations.
//  - bf16: unit roundoff 2^-8 (3.9e-3): output rounding alone is up to 2e-3 abs. Measured: math
//    2.0e-3, flash 3.0e-3. 1.6e-2 + 1.6e-2 relative is ~5x that.
// A corrupted element (the test fault adds 0.5) or a zero output fails all of them.
#pragma once

#include "core/case.hpp"
#include "core/expected.hpp"

#include <string>
#include <string_view>

namespace sdpa_doctor::cases {

inline constexpr Tolerance k_tolerance_fp32{1e-5, 1e-5};
inline constexpr Tolerance k_tolerance_fp16{2e-3, 2e-3};
inline constexpr Tolerance k_tolerance_bf16{1.6e-2, 1.6e-2};

Tolerance default_tolerance(DType dtype);

// The tolerances of one run: a default per dtype, each overridable.
struct TolerancePolicy {
  Tolerance fp16 = k_tolerance_fp16;
  Tolerance bf16 = k_tolerance_bf16;
  Tolerance fp32 = k_tolerance_fp32;

  Tolerance for_dtype(DType dtype) const;
  bool operator==(const TolerancePolicy&) const = default;
};

// Parses "bf16=atol:rtol,fp16=atol:rtol" (any dtype name core accepts; values >= 0, finite) on
// top of `base`. An empty text returns `base`. Errors name the offending item.
Expected<TolerancePolicy> parse_tolerance_overrides(std::string_view text,
                                                    TolerancePolicy base = {});

// "fp16=0.002:0.002,bf16=0.016:0.016,fp32=1e-05:1e-05": parseable back by the function above.
std::string to_string(const TolerancePolicy& policy);

} // namespace sdpa_doctor::cases
