// core/measure: what a worker measures of a case's outputs, as plain numbers, and their one JSON
// form. Every worker (C++ or Python) sends these in its `result` event; `cases::judge` alone turns
// them into a status and a reason, so a verdict is written once whichever probe measured.
#pragma once

#include "core/case.hpp"
#include "core/expected.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sdpa_doctor {

// The status a worker's `result` carries when the case ran to the end: the verdict is the
// doctor's, from what the event's "measured" holds.
inline constexpr std::string_view k_measured_status = "measured";

// One tensor (an output or a gradient) against its float64 oracle, element by element. An element
// is outside when it is finite and |got - ref| > atol * scale + rtol * |ref| (scale: 1 for an
// output; for a gradient the larger of 1 and its largest finite |ref|), when it is NaN or Inf
// where the oracle is finite, or when it is finite where the oracle is NaN (a fully masked row
// under torch < 2.5, where NaN is right). Errors are taken where both are finite.
struct TensorErrors {
  int64_t n = 0;
  Tolerance tolerance;            // what `outside` was counted with (atol before the scale)
  double max_abs_err = 0;
  double rel_l2_err = 0;          // ||got - ref|| / ||ref||; ||got - ref|| when ref is all 0
  int64_t outside = 0;
  int64_t first_mismatch = -1;    // the first finite element beyond the tolerance...
  double mismatch_got = 0;        // ...its value
  double mismatch_expected = 0;   // ...and the oracle's (a dropout case: probability / (1 - p))
  int64_t nan_count = 0;          // where the oracle is not NaN
  int64_t inf_count = 0;
  int64_t first_nonfinite = -1;
  int64_t nonfinite_in_masked_rows = 0; // of nan_count + inf_count, in a case's fully masked rows
  int64_t expected_nan = 0;       // oracle elements that are NaN
  int64_t finite_where_nan = 0;   // of those, finite in the output
  bool all_zero = false;          // n > 0 and every output element is 0
  bool oracle_all_zero = false;   // every oracle element is 0
  bool operator==(const TensorErrors&) const = default;
};

// A dropout case's statistics besides its TensorErrors (which then compare each kept element
// with its probability / (1 - p) and leave the dropped ones out).
struct DropoutStats {
  double p = 0;
  int64_t counted = 0;           // probabilities large enough to be counted
  int64_t dropped = 0;           // of those, 0 in the output
  int64_t differ_same_seed = 0;  // elements that differ bit for bit from a run under the same seed
  int64_t differ_other_seed = 0; // ... from a run under another seed
  bool operator==(const DropoutStats&) const = default;
};

// Every later call of a case compared with its first, the checked call: a race or an
// uninitialised buffer shows on any call, not only the first. The forward output must be equal
// bit for bit (no dropout case is compared so: its calls draw other masks); a gradient within the
// gradient tolerance (backward kernels add with atomics), bit for bit under deterministic
// algorithms. The first call that differs is described.
struct RepeatStats {
  int calls = 1;                // calls made, the first included
  int differing_call = 0;       // the first later call that differs (1-based); 0: none
  std::string tensor;           // what differed in it: "out", "dq", "dk" or "dv"
  int64_t differing = 0;        // of its elements
  double max_abs_delta = 0;     // over the elements finite in both calls
  int64_t nan_count = 0;        // in that call's tensor
  int64_t inf_count = 0;
  bool operator==(const RepeatStats&) const = default;
};

// A case's measurements: the output (a forward, or the forward of a backward case), dropout's
// statistics, and the gradients of a backward case. What is absent was not measured.
struct Measured {
  std::optional<TensorErrors> out;
  std::optional<DropoutStats> dropout;
  std::optional<TensorErrors> dq, dk, dv;
  std::optional<RepeatStats> repeats;
  bool operator==(const Measured&) const = default;
};

// Measurements of the output alone (a forward, before any gradient).
inline Measured output_only(const TensorErrors& out) {
  Measured m;
  m.out = out;
  return m;
}

// The wire form: {"out": {...}, "dropout": {...}, "dq": {...}, ...}; non-finite numbers as null.
nlohmann::json to_json(const Measured& m);
// Refuses anything else with one line naming the field (a worker may be half broken).
Expected<Measured> measured_from_json(const nlohmann::json& j);

} // namespace sdpa_doctor
