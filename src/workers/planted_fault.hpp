// workers/planted_fault: the faults a test plants in a worker through SDPA_DOCTOR_TEST_FAULT,
// parsed and fired here; the Python worker reads the same syntax. Not the fault-injection worker
// of isolate/ (`isolate::PlantedFault`), which is a whole fake worker. Depends on core only.
//
//   SDPA_DOCTOR_TEST_FAULT="variant=<name|*>,case=<id|*>,action=<abort|segv|hang|nan|perturb|
//                           exit3|poison|zeros>[,when=COND]...[,stage=backward][,once=/abs/path]"
// makes the torch, Python and reference workers (a verify re-run's variant is `verify:ID`)
// misbehave at the matching case, so end-to-end tests prove that crashes, NaNs and mismatches are
// caught and attributed. `poison` leaves the case alone and fails the canary after it (a deferred
// GPU error); `zeros` zeroes the output and fails the canary with HIP's "invalid argument", as a
// fused kernel whose launch failed does.
// Specs are separated by `;` (the first that matches decides). `when=NAME>N` (also <, >=, <=, =,
// a bare flag such as `causal`, or `dtype=bf16`; all must hold) narrows a spec, which is how the
// shrinking tests plant a boundary; names: b, hq, hkv, lq, lkv, d, causal, gqa, mask (0 none,
// 1 bool, 2 additive), transposed, q_layout, k_layout, v_layout, mask_layout (0 contiguous,
// 1 transposed, 2 strided, 3 offset), mask_dtype, mask_shape (0 (B,1,..), 1 (B,H,..), 2 (1,1,..),
// 3 (Lq,Lkv)), window, large, bwd, dropout (in hundredths). `stage=backward` strikes when a
// backward case's backward starts (nan, perturb and zeros then corrupt dq); `once=PATH` fires only
// for the match that creates that marker file, in whatever process (a flaky failure). The doctor
// never sets it and forwards it only from its own environment.
#pragma once

#include "core/case.hpp"
#include "core/expected.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sdpa_doctor::workers {

enum class FaultAction { none, abort, segv, hang, nan, perturb, exit3, poison, zeros };

// A shape condition of a fault, `when=d>128`: NAME, NAME>N, NAME<N, NAME>=N, NAME<=N or NAME=N
// (`when=causal,when=lq<=16`: the causal cases with at most 16 queries). NAME is b, hq,
// hkv, lq, lkv, d, causal (0/1: either alignment), bottom_right (0/1: causal aligned
// bottom-right), gqa (0/1: hq != hkv), mask (0 none, 1 bool, 2 additive),
// transposed (0/1: q, k and v all transposed), q_layout, k_layout, v_layout, mask_layout (0
// contiguous, 1 transposed, 2 strided, 3 offset), mask_dtype (0/1: the mask's dtype is not q's),
// mask_shape (0 (B,1,..), 1 (B,H,..), 2 (1,1,..), 3 (Lq,Lkv)), window (W), large (0/1), bwd (0/1:
// a backward case), dropout (dropout_p in hundredths), mrows (0/1: a masked_rows case; with
// action=nan, NaN only where rows are fully masked) or dtype (only `dtype=fp16|bf16|fp32`); a bare
// NAME means its value is not 0.
// V alone non-contiguous: `when=v_layout,when=q_layout=0,when=k_layout=0`.
struct FaultCondition {
  std::string name;
  std::string op;     // ">", "<", ">=", "<=", "=" or empty for a bare NAME
  int64_t value = 0;
  std::string text;   // the dtype name for dtype=...
  bool holds(const Case& c) const;
};

struct PlantedFault {
  std::string variant = "*"; // a Variant::name() or "*"
  std::string case_id = "*"; // a case id or "*"
  FaultAction action = FaultAction::none;
  std::vector<FaultCondition> when; // all must hold; empty = every case
  std::string once; // a marker file: the fault fires only for the match that creates it (flaky)
  // Where it strikes: the start of the case (forward), or the start of a backward case's
  // backward, after its forward ran and was judged (a forward case never matches then). nan,
  // perturb and zeros corrupt the output in the forward, dq in the backward.
  enum class Stage { forward, backward } stage = Stage::forward;

  bool matches(std::string_view variant_name, std::string_view id) const;
  // True unless `once` is set and its marker exists already (then it is made).
  bool fires() const;
  bool matches(std::string_view variant_name, std::string_view id, const Case& c) const;
};

// "variant=<name|*>,case=<id|*>,when=<cond>,...,once=<path>,stage=<forward|backward>,
// action=<abort|segv|hang|nan|perturb|exit3|poison|zeros>".
// poison leaves the case alone and makes the canary after it fail, as a deferred asynchronous GPU
// error would; zeros replaces the output by zeros and fails the canary with HIP's "invalid
// argument", as a fused kernel that failed to launch (AOTriton's hipErrorInvalidValue) leaves
// them. `when` may repeat (all must hold).
Expected<PlantedFault> parse_planted_fault(std::string_view text);
// Several specs separated by ';'; the first that matches a case decides its fault.
Expected<std::vector<PlantedFault>> parse_planted_faults(std::string_view text);
// The first spec matching (variant, case), or nullptr (also when that one does not fire: `once`).
const PlantedFault* matching_fault(const std::vector<PlantedFault>& specs, std::string_view variant_name,
                                const Case& c, std::string_view id);
// From the environment; empty when unset or empty. A malformed value is an error.
Expected<std::vector<PlantedFault>> planted_faults_from_environment();
// abort, segv, hang and exit3 happen here, for real (this function does not return for them).
void trigger_process_fault(FaultAction action);
// nan, perturb and zeros corrupt the output (or dq) of case `c` before it is compared (element
// n/2, or for a masked_rows case the first of query row 3, fully masked: NaN, resp. +0.5; every
// element 0).
void corrupt_output(FaultAction action, std::vector<float>& output, const Case& c);
// The canary after a case with this fault: poison's and zeros' planted failure, else `measured`.
std::string planted_canary(FaultAction action, std::string measured);

} // namespace sdpa_doctor::workers
