// kernels: our own attention kernels, ref-math and ref-flash, forward and backward, on the CPU
// always and on any GPU the machine has, and the float64 oracle. Knows no framework: plain
// pointers, sizes and strides (attn_params.hpp). The CPU flash picks AMX tiles, AVX512_BF16,
// AVX-512 fp32, AVX2 or portable loops at run time, on one detection (cpu_isa.hpp). The GPU kernels
// are one source for both vendors (attention_gpu.cu over gpu_dialect.hpp and gpu_launch.hpp),
// embedded at build time, compiled at run time for the device at hand and cached on disk (rtc.hpp:
// hipRTC, NVRTC; $SDPA_DOCTOR_KERNEL_CACHE, else ~/.cache/sdpa-doctor/kernels), and run through the
// HIP runtime or the CUDA driver (gpu_runtime.hpp; gpu_run.cpp opens the HIP runtime where it sees
// a device, else the CUDA driver, only when a case runs on a GPU). A GPU without a runtime or
// compiler is `unsupported`; a source that does not compile for it is `error`, with the compiler's
// log: our failure, never torch's. The oracle (oracle.cpp) is blocked: K and V packed as doubles,
// one register-blocked micro-kernel per ISA level, work items of 96 query rows over every core, the
// interrupt flag read inside its loop; the plain row-at-a-time oracle_reference.cpp stays as the
// tests' truth and takes decode shapes. Depends on core and, for the GPU, the loader (vendor
// libraries opened with dlopen); never on a vendor header, torch, protocol or the workers.
#pragma once

#include "core/case.hpp"
#include "core/expected.hpp"
#include "core/inputs.hpp"
#include "kernels/attn_params.hpp"

#include <atomic>
#include <map>
#include <optional>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace sdpa_doctor::kernels {

// The oracle: float64 math attention over the (already dtype-rounded) inputs, with PyTorch's
// semantics (scale 1/sqrt(D), causal aligned as the case says (Case::causal_offset), bool/additive
// mask broadcast over heads, GQA by head groups, fully masked rows -> 0). Output is logical (B,Hq,Lq,D), row-major.
// Blocked and vectorised (oracle.cpp), except where each kv head serves at most 4 query rows
// (decoding), which takes the plain loop of oracle_attention_reference. Memory beside the
// output: at most 64 MiB of K/V packed as doubles (or one kv head's, if bigger) and
// 96 x (2 D + 128) doubles per thread. `cancel` (may be null) is read every 128 keys of a block
// of 96 query rows and every 1024 keys packed (the plain loop: every query row): when it turns
// true the loop stops early and the result is incomplete (the caller discards it).
std::vector<double> oracle_attention(const Case& c, const HostInputs& inputs,
                                     const std::atomic<bool>* cancel = nullptr);
// The oracle of a torch whose fully masked rows are not 0: under MaskedRowSemantics::nan
// (torch < 2.5) every row of `rows` (logical (B,Hq,Lq,D): an output from oracle_attention, or dq
// from oracle_attention_backward) whose query has no key to attend to (causal rule and mask)
// becomes NaN; under zero nothing changes. The gradients are kept simple: only dq's rows turn
// NaN, dk and dv stay as the zero semantics has them.
void apply_masked_row_semantics(const Case& c, const HostInputs& inputs,
                                MaskedRowSemantics semantics, std::vector<double>& rows);
// The instruction-set levels the oracle's inner loops are compiled for that this CPU runs, best
// first ("x86-64-v4", "x86-64-v3", "generic"); oracle_attention uses the first.
std::vector<std::string> oracle_isa_levels();
// The blocked oracle with the loops of `level` (an unknown one: "generic") on `threads` threads
// (0 = all cores, or one for a small case), whatever the shape: for the tests, which check every
// level, and the bench.
std::vector<double> oracle_attention_at(std::string_view level, const Case& c,
                                        const HostInputs& inputs,
                                        const std::atomic<bool>* cancel = nullptr,
                                        int threads = 0);
// The oracle as first written, one query row at a time with a sequential dot product per score:
// slow (latency-bound), kept as the truth the tests hold oracle_attention to (they agree to
// float64 rounding) and as the bench's "before". `cancel` is read once per query row.
std::vector<double> oracle_attention_reference(const Case& c, const HostInputs& inputs,
                                               const std::atomic<bool>* cancel = nullptr);

// The oracle's gradients for the upstream gradient `dout` (logical (B,Hq,Lq,D)): dq (B,Hq,Lq,D),
// and dk, dv (B,Hkv,Lkv,D), each kv head's summed over the query heads it serves (GQA), with
// oracle_attention's semantics; a fully masked row passes no gradient. Blocked like the forward
// (oracle_backward_blocked.cpp: the forward oracle with each row's log-sum-exp, then dK/dV items
// per block of keys and dQ items per block of rows, none sharing an output, so the result does
// not depend on the thread count), except for decoding shapes, which take the row-wise loop of
// oracle_attention_backward_reference. Memory beside the gradients: the forward's output, at
// most 64 MiB of packed operands (or one kv head's with its query heads, if bigger) and
// 4 x 64 x 64 + 2 x 64 x D doubles per thread. `cancel` (may be null) is read every 64 x 64 tile
// (the result is then incomplete; the caller discards it).
struct OracleGradients {
  std::vector<double> dq, dk, dv;
};
OracleGradients oracle_attention_backward(const Case& c, const HostInputs& inputs,
                                          const std::vector<double>& dout,
                                          const std::atomic<bool>* cancel = nullptr);
// The blocked backward with the loops of `level` (oracle_isa_levels; unknown: "generic") on
// `threads` threads (0 = all cores, or one for a small case), whatever the shape: for the tests
// and the bench.
OracleGradients oracle_attention_backward_at(std::string_view level, const Case& c,
                                             const HostInputs& inputs,
                                             const std::vector<double>& dout,
                                             const std::atomic<bool>* cancel = nullptr,
                                             int threads = 0);
// The backward as first written, one query row at a time per (batch, kv head) on every core:
// plain enough to read against the chain rule, the truth the tests hold the blocked one to.
// `cancel` is read once per query row.
OracleGradients oracle_attention_backward_reference(const Case& c, const HostInputs& inputs,
                                                    const std::vector<double>& dout,
                                                    const std::atomic<bool>* cancel = nullptr);

// ref-math (plain QK^T -> softmax -> PV per row) or ref-flash (tiled, online softmax).
enum class RefKernel { math, flash };
std::string_view to_string(RefKernel kernel);                      // "ref-math", "ref-flash"
std::optional<RefKernel> ref_kernel_from_string(std::string_view name); // the same names

// The largest case ref-math takes on the CPU, in Case::flops(). Its scalar textbook loops run at
// about 10 GFLOP/s on two cores, so a case past this costs a checked and a timed run of many
// seconds each, the witness ref-flash (the same sizes in under a tenth of the time) gives anyway.
inline constexpr double k_cpu_math_max_flops = 16e9;
// Empty when `kernel` on the CPU takes `c`; otherwise why not (an `unsupported` reason).
std::string cpu_scope(RefKernel kernel, const Case& c);

// Low-level CPU entry points over f32 storage. Empty string when the kernel ran; otherwise why
// there is no instance for these parameters (nothing was written). threads: 0 = all cores.
std::string cpu_math_attention(const AttnParams& p, int threads = 0);

// The implementations of ref-flash on the CPU. `automatic` takes the fastest this CPU has for
// the parameters (cpu_isa(), so $SDPA_DOCTOR_CPU_ISA caps it): when the values are bf16-exact
// (AttnParams::values_rounded_to), AMX tiles, else AVX512_BF16 dot products (both with P rounded
// to bf16, as PyTorch's flash kernels do, and fp32 accumulation); else AVX-512 in fp32, else
// portable loops with an AVX2 micro-kernel, else portable loops for any CPU. The others force
// one, for tests and benchmarks.
enum class CpuFlashPath { automatic, amx_bf16, avx512_bf16, avx512_f32, avx2, portable };
std::string_view to_string(CpuFlashPath path); // "automatic", "amx-bf16", "avx512-bf16", ...
// The path `automatic` takes for `p` on this CPU (never `automatic`).
CpuFlashPath cpu_flash_path_for(const AttnParams& p);
// A forced path this CPU lacks, or avx512_bf16 over values that are not bf16-exact, is refused
// with the reason, like any other missing instance.
std::string cpu_flash_attention(const AttnParams& p, int threads = 0,
                                CpuFlashPath path = CpuFlashPath::automatic);

// The gradient buffers of a CPU backward, f32, each laid out with the strides of its forward
// counterpart in AttnParams: dout as o, dq as q, dk as k, dv as v. dk and dv are per kv head,
// summed over the query heads of its group (GQA); a fully masked row passes no gradient.
struct AttnGrads {
  const float* dout = nullptr;
  float* dq = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
};
// ref-math's backward: the chain rule through its forward, one query row at a time in fp32
// (scores, softmax, dP = dO.V^T, dS = P (dP - sum_j P dP)); reads p.q, p.k, p.v and p.mask, not
// p.o or p.lse. Deterministic: per-query-head sums of dk and dv are added in head order.
// Empty string when it ran; otherwise why there is no instance (nothing was written).
std::string cpu_math_attention_backward(const AttnParams& p, const AttnGrads& g,
                                        int threads = 0);
// ref-flash's backward, FlashAttention-2's algorithm in fp32 with portable loops: P recomputed
// per 64 x 64 tile from the forward's log-sum-exp, D_i = dO_i . O_i, dS = P (dP - D); dK and dV
// per block of keys, dQ per block of rows (no atomics, so the result does not depend on the
// thread count). Reads the forward's output p.o and log-sum-exp p.lse (both required: run
// cpu_flash_attention with p.lse first), as a flash kernel reads what its forward saved.
std::string cpu_flash_attention_backward(const AttnParams& p, const AttnGrads& g,
                                         int threads = 0);

// One kernel run over a case: the output rounded to the case dtype, logical (B,Hq,Lq,D), and the
// wall time of each timed run in milliseconds (warm-up runs not included).
struct KernelRun {
  std::vector<float> out;
  std::vector<double> times_ms;
};

// Where a (B,H,L,D) tensor in a Layout lies in its buffer, in elements: the view starts at
// `offset`, the buffer holds `size`; the head-dim stride is 1.
struct TensorPlacement {
  int64_t stride_b = 0, stride_h = 0, stride_l = 0, offset = 0, size = 0;
};
TensorPlacement placement(Layout layout, int64_t batch, int64_t heads, int64_t length, int64_t d);

// AttnParams for a case over host buffers laid out as the case's layouts of q, k and v say (the
// output as q's; placement). Pointers left null: each points `offset` into its buffer.
AttnParams params_for(const Case& c);
// Copies logical (B,H,L,D) values into a buffer in `layout` (identity for contiguous); what lies
// outside the view is NaN.
std::vector<float> to_layout(const Case& c, Layout layout, const std::vector<float>& logical,
                             int64_t heads, int64_t length);
// An output in q's layout back to logical (B,Hq,Lq,D), rounded to the case dtype.
std::vector<float> output_from_layout(const Case& c, const std::vector<float>& laid_out);

// Runs `kernel` on the CPU over inputs in the case layout: `warmup` untimed runs, then `repeat`
// timed ones (at least one run happens). threads: 0 = all cores. budget_ms > 0: once the runs have
// taken that long, the warm-ups left are skipped and no timed run starts after the first.
// Called after every call of a case with its output (logical (B,Hq,Lq,D)), or its gradients dq,
// dk and dv: the worker compares each later call with the first.
using EachCall = std::function<void(const std::vector<float>& out)>;
using EachBackwardCall = std::function<void(const std::vector<float>& dq,
                                            const std::vector<float>& dk,
                                            const std::vector<float>& dv)>;

// Past `budget_ms` the warm-ups left are skipped and no timed call starts after the second.
Expected<KernelRun> run_cpu(RefKernel kernel, const Case& c, const HostInputs& inputs, int warmup,
                            int repeat, int threads = 0, int budget_ms = 0,
                            const EachCall& each_call = {});

// One backward run over a case: dq (B,Hq,Lq,D), dk and dv (B,Hkv,Lkv,D), logical order,
// rounded to the case dtype; the wall time of each timed backward in milliseconds.
struct KernelGradients {
  std::vector<float> dq, dk, dv;
  std::vector<double> times_ms;
};
// Runs `kernel`'s backward on the CPU for the upstream gradient `dout` (logical (B,Hq,Lq,D),
// rounded here to the case dtype as a backend receives it: give the oracle the same rounded
// values) over inputs laid out as the case says. ref-flash first runs its forward once, untimed,
// for the output (rounded to the case dtype, as a backend saves it) and the log-sum-exp; then
// `warmup` untimed and `repeat` timed backward runs (at least one). threads: 0 = all cores.
Expected<KernelGradients> run_cpu_backward(RefKernel kernel, const Case& c,
                                           const HostInputs& inputs,
                                           const std::vector<float>& dout, int warmup = 0,
                                           int repeat = 1, int threads = 0,
                                           const EachBackwardCall& each_call = {});

// --- GPU: the same kernels from one source (attention_gpu.cu), compiled at run time -----------
// `device` is torch's N of cuda:N: the HIP runtime's device N where that runtime sees a GPU, else
// the CUDA driver's. Nothing of a GPU is opened before one of these is called, so a worker that
// runs on the CPU never loads a GPU library. Where the libraries are looked for: the torch under
// test first ($SDPA_DOCTOR_TORCH_LIB_DIRS, its torch/lib folders separated by ':'), $ROCM_PATH,
// /opt/rocm*, $CUDA_PATH, then the system (loader/loader.hpp).

// Empty when GPU device `device` is there; else one line starting "no GPU device".
std::string gpu_unavailable_reason(int device);
inline bool gpu_available(int device = 0) { return gpu_unavailable_reason(device).empty(); }
// Allocate, fill, copy back, synchronise on `device`.
struct GpuHealth {
  bool known = true;   // false: no GPU runtime opens here at all, so nothing can be said
  std::string problem; // empty when healthy, else what failed
};
GpuHealth gpu_health_check(int device);

// `kernel`'s GPU code for `device`: compiled by hipRTC (the device's gcnArchName) or NVRTC (its
// sm_XX) once per process, or found in the kernel cache (rtc::default_cache_dir), and loaded.
struct GpuKernels {
  std::string failure; // empty when ready; else one line
  // The failure is a missing piece (no device, runtime, compiler or target): the kernels cannot
  // run here, a refusal. Otherwise ours: "our reference kernel did not compile for gfx1201 ...".
  bool refusal = false;
  std::string compiler_log; // the compiler's log when it ran and refused our source
  // What was used: gpu_runtime, gpu_device, gpu_arch, rtc_compiler, rtc_target, kernel_cache,
  // compile_ms (each present once known).
  std::map<std::string, std::string> facts;
};
const GpuKernels& gpu_kernels(RefKernel kernel, int device);

// As run_cpu, on GPU device `device`, with inputs stored in the case dtype on the device; times
// are of the kernels alone (device events), copies excluded. An error when the kernel could not
// run; one starting "no " when there is no instance for the case (e.g. ref-flash beyond head dim
// 256) or no device.
Expected<KernelRun> run_gpu(RefKernel kernel, int device, const Case& c, const HostInputs& inputs,
                            int warmup, int repeat);

} // namespace sdpa_doctor::kernels
