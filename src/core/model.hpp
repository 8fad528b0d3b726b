// core/model: the plain structs every part speaks: devices, findings, case results, advice and the
// one Report model the renderers read. Pure data; depends on the standard library only.
#pragma once

#include "core/case.hpp"
#include "core/status.hpp"
#include "core/variant.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sdpa_doctor {

enum class Severity { ok, warning, problem };
std::string_view to_string(Severity severity); // "ok", "warning", "problem"

// One observation with what to do about it. `id` is stable (e.g. "kfd-not-readable",
// "disable-ck-flash") so that CI and bug trackers can key on it.
struct Finding {
  std::string id;
  Severity severity = Severity::ok;
  std::string message;
  std::string remedy;                // empty when there is nothing to do
  std::vector<std::string> case_ids; // results that prove it (advice findings)
  std::string device;                // probe target it concerns ("cuda:0"), empty for the host
};

// Which GPU architecture the probed torch can run, beside what the GPU is and what the runtime
// will load kernels for (HSA_OVERRIDE_GFX_VERSION). Decided by advice::settle_gfx_truth from the
// workers' hello facts, set by advice::apply_gfx_truth. Arch names are base names ("gfx942",
// feature suffixes dropped).
struct GfxTruth {
  std::string physical;     // the hardware: KFD gfx_target_version / gcnArchName
  std::string effective;    // what the runtime loads kernels for; == physical without an override
  std::string override_env; // "HSA_OVERRIDE_GFX_VERSION=10.3.0" when one is set, else empty
  std::vector<std::string> compiled_for;    // torch.cuda.get_arch_list(); empty = no answer
  std::vector<std::string> aotriton_images; // gfx names of torch/lib/aotriton.images/amd-gfx*
  std::string ck_sdpa;  // "yes", "no", "unknown", or "n/a" (not a ROCm build)
  std::string source;   // which worker answered, e.g. "python torch 2.9.0+rocm6.4"
  std::string verdict;  // "native", "override", "missing", "unknown"
  std::string detail;   // one line: why this verdict, and the risk it carries
  std::string remedy;   // what to install or set; empty when nothing is needed
};

// One GPU as the enumeration sources saw it, joined by PCI address. Empty/nullopt = unknown.
struct Device {
  int index = -1;                 // HIP device index (cuda:N in PyTorch), -1 when HIP did not see it
  std::string name;               // e.g. "AMD Radeon RX 9070 XT"
  std::string gfx_target;         // e.g. "gfx1201"
  std::string gfx_arch_name;      // gcnArchName with feature suffixes, e.g. "gfx1201:sramecc-:xnack-"
  std::string sm_target;          // an NVIDIA GPU's "sm_90" (compute capability 9.0); empty on AMD
  std::string family;             // e.g. "RDNA4", "CDNA3"; "unknown" for an unknown target
  std::vector<std::string> marketing_names;
  std::string matrix_instructions; // "WMMA", "MFMA", "none", or empty when unknown
  std::optional<int> wave_size;
  std::optional<int> compute_units;
  std::optional<int> simd_count;
  std::optional<int64_t> vram_total_bytes;
  std::optional<int64_t> vram_used_bytes;
  std::optional<int64_t> lds_per_block_bytes;
  std::optional<int64_t> lds_per_cu_bytes;
  std::string pci_bdf;            // "0000:03:00.0"
  std::string driver_version;     // amdgpu / ROCm SMI driver version
  std::string vbios;
  std::optional<double> temperature_c;
  std::optional<double> power_w;
  std::string kfd_node;           // sysfs topology node number
  std::string render_node;        // "/dev/dri/renderD128"
  bool integrated = false;        // APU
  // Which source said what: field -> source -> value, only where sources disagree or matter.
  std::map<std::string, std::map<std::string, std::string>> sources;
  std::optional<GfxTruth> gfx; // set after a run that asked torch; nullopt for `devices`
};

// False for an NVIDIA GPU (sm_target set) and for a GPU only the probed torch saw that has no gfx
// target: another vendor's, where the ROCm facts (gfx target, family, HIP index) do not apply.
bool is_amd_gpu(const Device& d);
// True for a GPU the CUDA driver or NVML listed (sm_target set).
bool is_nvidia_gpu(const Device& d);

// What the enumeration found: devices, the host runtime facts and the findings.
struct DeviceInventory {
  std::vector<Device> devices;
  // Host versions and the GPU libraries opened at run time: "hip_runtime_version",
  // "hip_runtime_library" (the file), "hip_runtime_loaded_because" (why that one), "amd_smi_*" or
  // "rocm_smi_*", "torch_hip_runtime_library" (what the probed torch maps), ...
  std::map<std::string, std::string> runtime;
  std::map<std::string, std::string> sources_status; // source -> "ok" / why it failed
  std::vector<Finding> findings;
  std::string no_gpu_reason; // set when no GPU was found: why, in plain words
};

// How a worker process ended, decoded once from its wait status.
struct ProcessEnd {
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string signal_name; // "SIGABRT"
  bool core_dumped = false;
  bool killed_by_doctor = false; // deadline or interrupt
};

struct Metrics {
  std::optional<double> max_abs_err;
  std::optional<double> rel_l2_err;
  std::optional<double> frac_outside_tol; // of output elements
  int64_t nan_count = 0;
  int64_t inf_count = 0;
  std::optional<double> time_ms;        // median of the timed runs
  std::optional<double> time_min_ms;
  int timed_runs = 0;
  std::optional<double> tflops;         // from Case::flops() and time_ms
};

// Why a cell was not run, or failed without running, where the runner or the scheduler decided
// it rather than a worker's own verdict. Written as data so reports group by it, not by words.
enum class SkipCause {
  none,                 // not recorded: a worker's own verdict, or a report older than the field
  interrupted,          // the user stopped the run (runner, scheduler)
  restart_budget_spent, // the worker was restarted too often (runner)
  device_unhealthy,     // the health check failed after a crash or timeout (runner, scheduler)
  device_wedged,        // a worker survived SIGKILL (runner, scheduler)
  run_dir_unwritable,   // a cases file could not be written (runner)
  worker_spawn_failed,  // the worker process could not be created (runner)
  worker_failed_at_start, // the worker ended before its first case (runner)
  worker_left_case,     // the worker said bye without running the case (runner)
  worker_unstartable,   // the worker exited 127 before its hello: loader or exec (scheduler)
  worker_missing,       // no worker for this probe beside the doctor (scheduler)
  python_unusable,      // no interpreter whose torch imports (scheduler)
  plugin_unusable,      // the LibTorch plugin could not be had or used (scheduler)
  target_guard,         // a GPU-only case on a CPU target (scheduler)
  memory_guard,         // more memory than the target has (scheduler)
  host_memory_guard,    // an oracle bigger than the host's memory (scheduler)
  not_measured,         // the journal stops before the cell ran (report JOURNAL); keep it last
};
std::string_view to_string(SkipCause cause); // "restart_budget_spent", ...
std::optional<SkipCause> skip_cause_from_string(std::string_view text);

// The cell whose failure caused another's skip. `variant` is empty where unknown.
struct Culprit {
  std::string variant;
  std::string case_id;
};

struct CaseResult {
  std::string case_id;
  Case kase;
  std::string device;  // probe target: "cpu", "cuda:0"
  Probe probe = Probe::torch;
  std::string variant; // Variant::name()
  Mode mode = Mode::eager; // a compiled cell is never compared with or merged into an eager one
  Status status = Status::skipped;
  std::string reason;  // one line: why not pass (refusal text, signal, skip reason)
  Metrics metrics;
  Tolerance tolerance;
  std::string backend_chosen;        // what the dispatcher picked, where knowable
  std::vector<std::string> warnings; // captured library warnings
  std::optional<ProcessEnd> process_end; // for crash / timeout / error by exit
  std::vector<std::string> signatures;  // ids of known stderr signatures that matched
  std::string stderr_tail;              // last lines of the worker's stderr
  int attempt = 0;                      // which worker process (0 = first) ran it
  double wall_ms = 0; // the case's wall time in its worker, `begin` to outcome; 0 = never begun
  // The worker's check of the device right after this case: "ok", "failed: <why>" (the case
  // poisoned the device), or empty where no canary ran (reference worker, case not run).
  std::string canary;
  // A backward case's verdict per direction, where known: forward judges its output, backward
  // its dq, dk and dv (a crash after the worker said it entered the backward is the backward's).
  std::optional<Status> forward_status;
  std::optional<Status> backward_status;
  // A masked_rows case: what its oracle gave fully masked rows (the semantics of the torch run).
  std::optional<MaskedRowSemantics> masked_rows;
  // The calls the worker compared with the first (the checked one included; 0: not compared,
  // as a dropout case) and the first later call that differed from it (0: none).
  int calls = 0;
  int differing_call = 0;
  // Why the runner or scheduler skipped or failed it, and the cell that caused it, where known.
  SkipCause cause = SkipCause::none;
  std::optional<Culprit> culprit;
};

// What one worker told about itself in `hello`, per (device, probe, variant).
struct WorkerInfo {
  std::string device;
  Probe probe = Probe::torch;
  std::string variant;
  std::map<std::string, std::string> versions; // torch, hip, python, aotriton, ...
  std::map<std::string, std::string> facts;    // preferred_rocm_fa_library, gcnArchName, ...
  int restarts = 0;
  std::string available; // empty when the worker ran; else why this probe could not run
  Mode mode = Mode::eager; // a compiled cell's worker (the python probe's --mode compiled)
};

// A recommendation re-run in a fresh python worker: the environment set before the interpreter
// starts, the printed Python snippet executed byte for byte, then every case of the device through
// the default dispatch, as a user's model calls SDPA.
struct Verification {
  bool ran = false; // false: it could not be re-run; `note` says why
  int passed = 0;
  int total = 0;
  double seconds = 0;
  std::string how;  // "a fresh python worker"
  std::string note; // the first failure ("<case>: crash: ..."), or why it did not run
  bool verified() const { return ran && total > 0 && passed == total; }
};

// A configuration the advice ranked higher, dropped because its re-run failed.
struct RejectedRecommendation {
  std::string id;
  std::string reason; // "2 of 36 cases failed under these flags; first <case>: <status>: <why>"
};

// The workload of a recommendation proven on compiled cells: what makes attention inside
// torch.compile pass, verified by a compiled re-run.
inline constexpr std::string_view k_compiled_workload = "compiled";

struct Recommendation {
  std::string id;     // stable: "use-math-only", "enable-aotriton-experimental", ...
  std::string device; // probe target
  std::string summary;
  std::string python;       // code to paste
  std::string cpp;
  std::string environment;  // "VAR=value" lines
  std::string transformers; // attn_implementation=...
  std::string vllm;         // --attention-backend ...
  std::string cost;         // what it costs, e.g. memory of math scores for --target
  std::vector<std::string> case_ids; // measured proof
  // "inference" (proven on the forward cases) or "training" (on forward and backward cases) where
  // the two need different flags; empty: one recommendation serves both. "compiled": proven on
  // the compiled cells (k_compiled_workload), beside the eager one.
  std::string workload;
  // The re-run under exactly these flags (`check --verify`); nullopt: not re-run (--no-verify).
  std::optional<Verification> verification;
  // Better-ranked configurations whose re-run failed, in the order they were tried.
  std::vector<RejectedRecommendation> rejected;
};

struct KnownIssueMatch {
  std::string issue_id;
  std::string title;
  std::string link;
  std::string advice;
  std::string fixed_in;
  std::vector<std::string> case_ids;
  std::string device;
  std::string variant; // Variant::name() of the matched results, so a case id run by several
                       // variants names the right one
  Mode mode = Mode::eager; // of the matched results
};

struct Timings {
  double total_ms = 0;
  double enumerate_ms = 0;
  double oracle_ms = 0;
  double probes_ms = 0;
  double report_ms = 0;
  double verify_ms = 0; // the advice's re-runs (check --verify)
};

// What a failure needs, from `check`'s shrinking: `axis op value`, e.g. d > 128, causal = 1,
// dtype = bf16 (then `text` holds the dtype and value is 0).
struct ShrinkCondition {
  // b, hkv (heads, the GQA ratio kept), lq, lkv, d, causal, bottom_right (the causal alignment),
  // mask, mask_dtype, mask_shape, mask_layout, layout (q, k and v alike), q_layout, k_layout,
  // v_layout, large, gqa, dtype
  std::string axis;
  std::string op;   // ">", "<=" or "="
  int64_t value = 0;
  std::string text; // for a person: "head_dim > 128", "causal"
  bool settled = true; // false: the budget ran out before the boundary was pinned down
};

// One failing (device, probe, variant) after shrinking: the rule, and the smallest failing case.
struct Shrink {
  std::string device;
  Probe probe = Probe::torch;
  std::string variant;
  Mode mode = Mode::eager;
  Status status = Status::error; // of the case that was shrunk
  std::string original_case;     // its id
  std::string verdict;           // "boundary", "everywhere", "flaky"
  std::string rule;              // one line for a person
  std::vector<ShrinkCondition> conditions; // all must hold for the failure; empty unless boundary
  std::optional<Case> minimal;   // the smallest failing case seen; empty when flaky
  std::vector<std::pair<std::string, Status>> tried; // every probe case id and its status, in order
  double seconds = 0;
  bool budget_exhausted = false;
};

struct Report {
  std::string tool_version;
  std::string git_revision;
  std::string started_at; // ISO 8601 UTC
  std::map<std::string, std::string> host;        // hostname, os, kernel, user (unless redacted)
  std::map<std::string, std::string> environment; // allow-listed variables only
  std::map<std::string, std::string> versions;    // torch, hip, rocm_smi, aotriton, python, ...
  DeviceInventory inventory;
  std::vector<std::string> targets;  // probe targets that were planned ("cpu", "cuda:0")
  std::string suite;
  std::string model; // `check --model`: "name (32 heads, 8 kv heads, d=128)"; empty otherwise
  // SDPA_DOCTOR_TEST_FAULT as the workers saw it; empty when none. When set, the results are a
  // test of the doctor, not a measurement of the backends.
  std::string planted_faults;
  std::vector<WorkerInfo> workers;
  std::vector<CaseResult> results;
  std::vector<Finding> findings;
  std::vector<Recommendation> recommendations;
  std::vector<KnownIssueMatch> known_issues;
  std::vector<Shrink> shrinks; // empty when nothing failed or with --no-shrink
  Timings timings;
  bool interrupted = false;
  int exit_code = 0;
};

} // namespace sdpa_doctor
