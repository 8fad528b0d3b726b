// cases: what a check plans and how it judges it, as plain data: the case suites and case files,
// model configs (check --model), the planned cases (plan_cases; a suite's GPU-only cases kept
// apart for GPU targets), tolerances (tolerance.hpp), the measurements of outputs, gradients,
// dropout and repeated calls against the oracle (the C++ workers' numbers, core/measure.hpp), and
// the one judge of what any worker measured (judge; judge_worker_event writes its verdict into a
// worker's `result` and `phase` events, the runner's judge hook, before anything reads a status).
// Also deadlines, the memory guard and the target guard (limits.cpp), targets, the variants each
// probe runs (plan_variants) and the backends' refusal texts (generated from
// data/backend_refusals.json, which the Python probe reads too).
// Depends on core only. Must not depend on kernels, protocol, torch, HIP, isolate or report: the
// doctor and every worker read the same plan data and the same rules.
#pragma once

#include "core/case.hpp"
#include "core/expected.hpp"
#include "core/measure.hpp"
#include "core/model.hpp"
#include "core/status.hpp"
#include "core/variant.hpp"
#include "cases/tolerance.hpp"

#include <array>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sdpa_doctor::cases {

// --- suites and case files ----------------------------------------------------------------------

inline constexpr std::string_view k_suites[] = {"quick", "full"};
inline constexpr std::string_view k_default_suite = "quick";

// The cases of a named suite, in a fixed order. "quick": a few dozen small cases that cover every
// backend gate (dtypes, head dims 64/128/256/512, odd lengths, decode, causal decode, Lq != Lkv,
// GQA, causal, masks, transposed layout) and three backward cases, seconds on a CPU. "full":
// hundreds, head dims 16..512, lengths up to 8k, causal queries of 1..16 against odd key lengths,
// the backward of the short ones at every head dim, and a few of each tensor in its own layout,
// masks in fp32 and of every shape and storage, GQA with a mask, a sliding window and scores near
// 1e4. Unknown names are an error that lists the known suites.
Expected<std::vector<Case>> suite_cases(std::string_view suite);
// The cases a suite adds for GPU targets only, after its own ("full": batch x heads past 65,535,
// the limit of a launch grid's y and z axes). A CPU target never runs them: target_guard.
std::vector<Case> gpu_suite_cases(std::string_view suite);

// Refused above this size: a case file is a list of shapes, not data.
inline constexpr int64_t k_max_case_file_bytes = int64_t{64} << 20;

// Reads a JSON-lines case file (one core::case_from_json object per line; blank lines and lines
// starting with '#' are skipped); "-" reads stdin, and a FIFO or pipe is read as a stream. Errors
// name the file and line; binary, empty and oversized files are refused.
Expected<std::vector<Case>> load_case_file(const std::string& path);

// Reads a small text input (a case file, a model config; "-" is stdin): directories, unreadable,
// oversized (k_max_case_file_bytes, a stream too) and binary files are refused; `what` names it
// in the error.
Expected<std::string> read_input_file(const std::string& path, std::string_view what);

// --- model configs (`check --model`) ----------------------------------------------------------------

// The attention shape of a model, from its Hugging Face config.json.
struct ModelShapes {
  std::string name;          // _name_or_path, else the config file's name (with its folder when
                             // that name is config.json)
  int64_t heads = 0;         // num_attention_heads
  int64_t kv_heads = 0;      // num_key_value_heads (default: heads)
  int64_t head_dim = 0;      // head_dim, else hidden_size / num_attention_heads
  int64_t max_positions = 0; // max_position_embeddings
  DType dtype = DType::bf16; // torch_dtype (float16, bfloat16, float32; default bfloat16)
  int64_t sliding_window = 0; // tokens; 0 = none (null, absent, or use_sliding_window false)

  // "meta-llama/Meta-Llama-3-8B (32 heads, 8 kv heads, d=128)", plus ", window 4096" if any.
  std::string describe() const;
};

// The default --max-len: prefill and decode lengths small enough for a CPU to run in seconds.
inline constexpr int64_t k_default_model_max_len = 256;

// Reads and checks a config.json; every error is one line naming the file and the field. A
// multimodal config keeps its language model's attention settings under `text_config`: they are
// read from there when the top level has no num_attention_heads.
Expected<ModelShapes> load_model_config(const std::string& path);
// The cases such a model runs, batch 1, its dtype and GQA: causal prefill at 64, 128 and
// `max_len` (those <= max_len, never past max_positions), chunked prefill (max_len / 4 queries
// against max_len keys, causal bottom-right), then decode (Lq = 1) against a KV of max_len. A
// sliding window is not a Case mask kind: cases longer than it run full causal attention, and
// describe() records the window.
std::vector<Case> model_cases(const ModelShapes& model, int64_t max_len);
// The model's own longest prefill (L = max_positions), the shape for the advice's memory note.
Case model_target_case(const ModelShapes& model);

// --- the planned cases (`check` and `cases` share this rule) -------------------------------------

// Where a plan's cases come from: the flags of `check` and `cases`, parsed.
struct CaseSources {
  std::string suite;                 // --suite; empty: not given
  std::vector<std::string> specs;    // --case, in order
  std::string case_file;             // --case-file; empty: none
  std::optional<ModelShapes> model;  // --model, loaded
  int64_t max_len = k_default_model_max_len;
  std::vector<DType> dtypes;         // --dtype; empty: every dtype
  bool train = false;                // --train: each planned case runs its backward too
  bool compile_all = false;          // --mode compiled: every planned case gets compiled cells
};

struct PlannedCases {
  std::vector<Case> cases;        // unique by id, in planned order
  // The suite's GPU-only cases (gpu_suite_cases, in the --dtype given): planned where a GPU is a
  // target, skipped by a CPU one (target_guard).
  std::vector<Case> gpu_only;
  std::string label;              // the report's `suite`: quick, full, custom, model, quick+custom
  std::vector<std::string> notes; // what the plan leaves out (a model's sliding window)
  // The ids of the cases that also get compiled cells, in planned order: the suite's compile
  // family (in_compile_family), and every case under compile_all.
  std::vector<std::string> compiled;
};

// Whether a case of `suite` is of its compile family, the cases the python probe also runs
// through torch.compile: in the quick suite a handful (a causal forward, a causal backward, GQA,
// an additive mask, in fp16, and causal decode under GQA: bottom-right's, in any dtype), chosen
// by what the case is, never by its id, so a new case of those kinds joins by itself; in the full
// suite also every other case of at most 256 x 256 scores without dropout or large values.
bool in_compile_family(const Case& c, std::string_view suite);

// The suite's cases when --suite is given or no --case, --case-file or --model is (then the quick
// suite); then each --case, the --case-file's cases and --model's (in each --dtype given, else in
// the config's dtype). A case planned twice runs once; with --dtype, only cases of those dtypes.
// With --train, each planned case that has more than one query also gets its backward twin (a
// model's prefill, not its decode: training does not decode), after it.
// Errors: a bad spec or file, a --dtype no planned case has, and a causal case with an explicit
// mask (torch refuses is_causal together with attn_mask).
Expected<PlannedCases> plan_cases(const CaseSources& sources);

// --- measuring and judging --------------------------------------------------------------------
// A worker measures (numbers only: core/measure.hpp); the doctor judges, with `judge` alone, what
// any worker measured. The C++ workers measure with measure_tensor, measure_gradients and
// measure_dropout; the Python probe measures the same numbers (sdpa_probe/oracle.py), and a test
// holds the two to each other (tests/cases/golden_measure_test).

// What a mismatch's reason opens with when every output element is 0 and the oracle is not all
// 0: what a kernel that never ran leaves (AOTriton's hipErrorInvalidValue).
inline constexpr std::string_view k_all_zero_output = "all-zero output where the oracle is not";

struct Comparison {
  Metrics metrics;     // error metrics only; timing fields are left empty
  Status status = Status::pass; // pass, mismatch or nonfinite
  std::string reason;  // empty for pass; otherwise one line with the numbers
};

// The elements of an output (or dq), logical (.., Lq, D), in the query rows a masked_rows case
// masks fully: row i with i % 4 == 3. lq == 0: none.
struct MaskedRows {
  int64_t lq = 0, d = 0;
  bool contains(size_t index) const {
    return lq > 0 && d > 0 && int64_t(index) / d % lq % 4 == 3;
  }
};
MaskedRows masked_rows_of(const Case& c); // none unless c.masked_rows

// Measures `n` values against their oracle as TensorErrors defines it; `gradient`: atol is per
// unit of the tensor's scale (the larger of 1 and its largest finite |oracle|).
TensorErrors measure_tensor(const float* out, const double* oracle, size_t n, Tolerance tol,
                            MaskedRows rows = {}, bool gradient = false);

// One gradient of a backward case and its float64 oracle.
struct GradientPair {
  std::string_view name; // "dq", "dk", "dv"
  const float* got;
  const double* oracle;
  size_t n;
  MaskedRows rows = {}; // dq's, of a masked_rows case
};

// The tolerance a gradient is measured with: the case's widened by k_gradient_slack (and its atol
// per unit of the gradient's scale, measure_tensor). A gradient is a sum over a whole row or
// column of products, so its rounding error scales with its magnitude, and low-precision backward
// kernels round dS and the partial products once more than the forward rounds P. The case line
// carries it, so that every worker measures with the same numbers.
inline constexpr double k_gradient_slack = 2.0;
Tolerance gradient_tolerance(Tolerance case_tolerance);

// dq, dk and dv measured (Measured with only the gradients set).
Measured measure_gradients(const GradientPair& dq, const GradientPair& dk, const GradientPair& dv,
                           Tolerance gradient_tol);

// A tensor's verdict. nonfinite: a NaN or Inf where the oracle is finite (the reason ends by
// naming the fully masked rows when every one is in them); mismatch: any element outside (the
// reason gives the count, the first such element and the error norms; an all-zero output where
// the oracle is not opens with k_all_zero_output and ": "; finite elements where the oracle is NaN
// are said first).
Comparison judge_tensor(const TensorErrors& m);

// dq, dk and dv in turn: the worst status of the three, the reason of the first that failed,
// opened with its name ("dk: 12 of ..."), and the worst of each metric.
Comparison judge_gradients(const TensorErrors& dq, const TensorErrors& dk, const TensorErrors& dv);

// A backward case's verdict from its forward's (the output) and backward's (the gradients): the
// worse status, a reason that names the direction that failed ("backward: dk: ..."; both: "forward:
// ...; backward: ..."; only the forward: its reason as a forward case has it), the worst metrics.
Comparison combine_directions(const Comparison& forward, const Comparison& backward);

// --- every call of a case ------------------------------------------------------------------------

// Measures every later call of a case against its first, the checked one (RepeatStats): the
// forward output bit for bit, each gradient as measure_tensor measures it against the first
// call's with the gradient tolerance (bit for bit with `bitwise_gradients`, under deterministic
// algorithms). A dropout case is not compared so: its calls draw other masks.
class RepeatComparer {
public:
  explicit RepeatComparer(Tolerance gradient_tolerance, bool bitwise_gradients = false);
  // The first call's output and, for a backward case, its gradients (else empty).
  void first(std::vector<float> out, std::vector<float> dq = {}, std::vector<float> dk = {},
             std::vector<float> dv = {});
  void later(const std::vector<float>& out, const std::vector<float>& dq = {},
             const std::vector<float>& dk = {}, const std::vector<float>& dv = {});
  const RepeatStats& stats() const { return m_stats; }

private:
  Tolerance m_gradient_tolerance;
  bool m_bitwise_gradients;
  std::array<std::vector<float>, 4> m_first; // out, dq, dk, dv
  RepeatStats m_stats;
};

// A later call that differs fails the case: nonfinite when that call has NaN or Inf, else
// mismatch; the reason names the call ("call 3 of 5 differs from call 1: 12 elements, max
// |delta| 0.31, 64 NaN"; a gradient: "... differs from call 1 in dq: 12 elements beyond the
// gradient tolerance, ..."). The case's result carries calls and differing_call.
Comparison judge_repeats(const RepeatStats& r);

// The one judge: a case's verdict from what a worker measured, per direction and overall.
struct Verdict {
  Comparison forward;                // the output (a dropout case's statistics included)
  std::optional<Comparison> backward; // a backward case's gradients
  Comparison all;                    // the case's: combine_directions of the two
};
Verdict judge(const Measured& m);

// measure_tensor then judge_tensor, and measure_gradients (with gradient_tolerance(tol)) then
// judge_gradients: for tests and for the kernels' own checks.
Comparison compare_to_oracle(const float* out, const double* oracle, size_t n, Tolerance tol,
                             MaskedRows rows = {});
Comparison compare_gradients(const std::vector<GradientPair>& dq_dk_dv, Tolerance tol);

// --- dropout --------------------------------------------------------------------------------------

// The generator seeds of a dropout case's runs (torch.manual_seed): `run` 0 for the checked run and
// its repeat under the same seed, 1 for the run under another seed. sdpa_probe/oracle.py has the
// same.
uint64_t dropout_seed(const Case& c, int run);

// A dropout case's outputs, logical (B,Hq,Lq,D) = (B,Hq,Lq,Lkv) (V is the identity): the checked
// run, a second run under the same seed and one under another seed.
struct DropoutRuns {
  const float* first;
  const float* same_seed;
  const float* other_seed;
};

// Probabilities below this are not counted when the dropped fraction is measured: a kept one might
// round to 0 in a low-precision dtype.
inline constexpr double k_dropout_min_probability = 1e-3;
// Fewer counted probabilities than this and the dropped fraction is not judged.
inline constexpr int64_t k_dropout_min_counted = 200;
// The dropped fraction may be this many standard deviations of the binomial from p (a false alarm
// about once in 10^9 cases).
inline constexpr double k_dropout_sigmas = 6.0;

// Measures a dropout case against `probs`, the float64 oracle of its forward without dropout
// (with V the identity: the probabilities themselves): `out` compares each kept (non-zero) element
// with its probability scaled by 1/(1-p); DropoutStats counts the dropped probabilities of at
// least k_dropout_min_probability and the elements that differ from the two other runs.
Measured measure_dropout(const DropoutRuns& runs, const double* probs, size_t n, double p,
                         Tolerance tol);

// Judges a dropout case element by element only where that holds for any dropout: every output
// element is 0 (dropped) or its probability scaled by 1/(1-p) within the tolerance (else mismatch;
// NaN or Inf: nonfinite). Then statistically: the dropped fraction of the counted probabilities
// must be within k_dropout_sigmas binomial standard deviations of p (when at least
// k_dropout_min_counted are counted); the run under the same seed must equal the first bit for
// bit, and the run under another seed must differ from it somewhere. The reason names each failed
// property.
Comparison judge_dropout(const TensorErrors& kept, const DropoutStats& stats);
// measure_dropout then judge_dropout.
Comparison judge_dropout(const DropoutRuns& runs, const double* probs, size_t n, double p,
                         Tolerance tol);

// --- judging a worker's events ----------------------------------------------------------------------

// A `result` event whose status is "measured" (the worker ran the case to the end) gets its
// verdict from judge: status, reason, the error metrics (timing kept) and, for a backward case,
// the directions. A result with another status and a measured forward (its backward failed) gets
// the forward's direction and metrics. A `phase` event with a measured forward gets its
// "forward": {"status", "reason"}. Malformed measurements make the result an `error` naming why.
// Anything else (another event, no measurements) is left as it is.
void judge_worker_event(nlohmann::json& event);

// --- limits ---------------------------------------------------------------------------------------

// How long the runner waits for a case's result after its `begin`: a fixed allowance for start-up
// and first-call kernel loading, plus `runs` executions at a pessimistic throughput (CPU: 1 GFLOP/s,
// GPU: 200 GFLOP/s), plus the float64 oracle when the worker has to compute it. Clamped to
// [15 s, 1 h].
std::chrono::milliseconds default_case_deadline(const Case& c, bool gpu, int runs = 4,
                                                bool worker_computes_oracle = false);

// Bytes a case needs where it runs: inputs and output in the case dtype, plus (with
// `math_scores`) the math backend's B*Hq*Lq*Lkv fp32 scores and probabilities.
int64_t case_memory_bytes(const Case& c, bool math_scores = true);
// Bytes the host needs besides: float inputs, float64 oracle and float output copies.
int64_t case_host_bytes(const Case& c);
// Empty when the case fits in `budget_bytes`; otherwise the skip reason, with the numbers.
std::string memory_guard(const Case& c, int64_t budget_bytes, bool math_scores = true);
// The most blocks a GPU launch grid holds on its y and z axes (HIP and CUDA).
inline constexpr int64_t k_max_grid_yz = 65535;
// Empty when `target` runs `c`; otherwise the skip reason: a CPU target does not run a case whose
// batch x heads is past k_max_grid_yz (it tests a GPU launch limit a CPU does not have).
std::string target_guard(const Case& c, std::string_view target);

// --- plan helpers ---------------------------------------------------------------------------------

// "cpu" or "cuda:N" (N >= 0). ROCm builds of PyTorch expose HIP devices as cuda:N.
bool is_valid_target(std::string_view target);
bool is_gpu_target(std::string_view target);

// The variants the libtorch and python probes run on a target: math, flash, mem_efficient,
// cudnn, default everywhere, plus flash[ck], flash[aotriton], flash[aotriton,experimental] and
// mem_efficient[aotriton,experimental] on a GPU target. Variants that cannot exist in a build are
// still planned: the worker answers `unsupported` with the reason.
std::vector<Variant> torch_variants(std::string_view target);
// ref-math, ref-flash.
std::vector<Variant> reference_variants();
std::vector<Variant> plan_variants(Probe probe, std::string_view target);

// The refusal texts, in data/backend_refusals.json order.
const std::vector<std::string_view>& backend_refusals();
// True for the texts with which a library declines a problem cleanly ("No available kernel",
// "not compiled", unsupported dtype/arch, ...): such a case is `unsupported`, not `error`.
bool is_backend_refusal(std::string_view message);

} // namespace sdpa_doctor::cases
