// The LibTorch plugin: the one translation unit that includes torch, behind the C interface of
// torch_plugin.h. It includes nothing else of the project, so it builds with one compiler call
// against whichever torch is diagnosed (sdpa-doctor builds it on first use for a torch other than
// the one it was built with). Everything version-dependent is either behind a TORCH_VERSION guard
// or detected with a requires-expression, so that one source builds against LibTorch 2.1 and later.
#include "torch_plugin.h"

#include <ATen/ATen.h>
#include <ATen/Config.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <torch/version.h>
#if __has_include(<ATen/SDPBackend.h>)
#include <ATen/SDPBackend.h>
#define SDPA_DOCTOR_HAVE_SDP_BACKEND_H 1
#endif
#if __has_include(<ATen/ROCmFABackend.h>)
#include <ATen/ROCmFABackend.h>
#define SDPA_DOCTOR_HAVE_ROCM_FA_BACKEND 1
#endif


#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <dlfcn.h>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#define SDPA_DOCTOR_TORCH_AT_LEAST(major, minor)                                                  \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace {

// Torch's warnings say why a backend refused; TORCH_WARN_ONCE ones only with warnAlways.
class CapturingHandler : public c10::WarningHandler {
public:
  void process(const c10::Warning& warning) override {
    std::string text = std::string(warning.msg());
    if (std::find(m_messages.begin(), m_messages.end(), text) == m_messages.end())
      m_messages.push_back(std::move(text));
  }
  std::vector<std::string> take() { return std::exchange(m_messages, {}); }
  const std::vector<std::string>& messages() const { return m_messages; }

private:
  std::vector<std::string> m_messages;
};

std::string one_line(std::string text) {
  for (char& ch : text)
    if (ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';
  constexpr size_t k_max = 2000;
  if (text.size() > k_max) text = text.substr(0, k_max) + "...";
  return text;
}

// Members that come and go between releases, detected rather than guessed from versions.
template <typename Ctx> void disable_overrideable(Ctx& ctx) {
  if constexpr (requires { ctx.setSDPUseOverrideable(false); }) ctx.setSDPUseOverrideable(false);
}
template <typename Ctx> void enable_overrideable(Ctx& ctx) {
  if constexpr (requires { ctx.setSDPUseOverrideable(true); }) ctx.setSDPUseOverrideable(true);
}
template <typename Ctx> void set_cudnn(Ctx& ctx, bool on) {
  if constexpr (requires { ctx.setSDPUseCuDNN(on); }) ctx.setSDPUseCuDNN(on);
}
template <typename Ctx> std::optional<bool> has_ck_sdpa(Ctx& ctx) {
  if constexpr (requires { ctx.hasCKSDPA(); }) return ctx.hasCKSDPA();
  return std::nullopt;
}
template <typename Hooks> std::optional<bool> is_gpu_arch(const Hooks& hooks, const std::string& arch,
                                                          int index) {
  if constexpr (requires { hooks.isGPUArch(std::vector<std::string>{arch}, c10::DeviceIndex(index)); })
    return hooks.isGPUArch(std::vector<std::string>{arch}, c10::DeviceIndex(index));
  return std::nullopt;
}
template <typename Impl> bool synchronize_device(const Impl* impl, int index) {
  if constexpr (requires { impl->synchronizeDevice(c10::DeviceIndex(index)); }) {
    impl->synchronizeDevice(c10::DeviceIndex(index));
    return true;
  }
  return false;
}

// Torch's intra-op pool only for the SDPA calls: the conversions around them are small, and on a
// few shared cores waking the pool costs more than the op. The native pool cannot be resized once
// used (torch warns and keeps its size), so there everything keeps the configured count.
#if AT_PARALLEL_OPENMP
constexpr bool k_resizable_pool = true;
#else
constexpr bool k_resizable_pool = false;
#endif

class ThreadCount {
public:
  explicit ThreadCount(int count) : m_previous(at::get_num_threads()) {
    if (k_resizable_pool && count != m_previous) at::set_num_threads(count);
  }
  ~ThreadCount() {
    if (k_resizable_pool && at::get_num_threads() != m_previous) at::set_num_threads(m_previous);
  }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

private:
  int m_previous;
};

bool is_rocm_build() { return at::globalContext().hasROCM(); }

// "gfx942,gfx110x": the AOTriton kernel image folders (aotriton.images/amd-gfx*) beside the
// LibTorch libraries this worker loaded; "none" when there is no such folder.
std::string aotriton_images() {
  Dl_info where{};
  if (::dladdr(reinterpret_cast<const void*>(&at::globalContext), &where) == 0 || !where.dli_fname)
    return {};
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(where.dli_fname).parent_path() / "aotriton.images";
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("amd-gfx", 0) == 0) names.push_back(name.substr(4));
  }
  if (names.empty()) return "none";
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

// What this LibTorch can run, for the gfx verdict. LibTorch has no API for the arch list it was
// compiled for (Python's torch.cuda.get_arch_list() comes from libtorch_python), so arch_list is
// the Python worker's answer alone.
void add_gfx_facts(std::map<std::string, std::string>& facts) {
  if (!is_rocm_build()) {
    facts["ck_sdpa"] = "n/a";
    facts["aotriton_images"] = "n/a";
    return;
  }
  const auto ck = has_ck_sdpa(at::globalContext());
  facts["ck_sdpa"] = !ck ? "unknown" : *ck ? "yes" : "no";
  facts["aotriton_images"] = aotriton_images();
}

std::string hip_version_from_config() {
  if (!at::hasCUDA()) return {};
  std::istringstream config(at::detail::getCUDAHooks().showConfig());
  std::string line;
  while (std::getline(config, line)) {
    const auto pos = line.find("HIP Runtime");
    if (pos != std::string::npos) {
      std::string v = line.substr(pos + std::strlen("HIP Runtime"));
      v.erase(0, v.find_first_not_of(" :"));
      return v;
    }
  }
  return {};
}

// The device name without linking the GPU half of torch: ask the runtime torch already loaded.
std::string runtime_device_name(int index) {
  char name[256] = {};
  using HipName = int (*)(char*, int, int);
  if (void* f = ::dlsym(RTLD_DEFAULT, "hipDeviceGetName")) {
    if (reinterpret_cast<HipName>(f)(name, sizeof name, index) == 0) return name;
  } else if (void* g = ::dlsym(RTLD_DEFAULT, "cuDeviceGetName")) {
    if (reinterpret_cast<HipName>(g)(name, sizeof name, index) == 0) return name;
  }
  return {};
}

std::string backend_name(int64_t choice) {
#if defined(SDPA_DOCTOR_HAVE_SDP_BACKEND_H)
  // By enumerator name: forks number the enum differently (onednn before overrideable).
  switch (static_cast<at::SDPBackend>(choice)) {
  case at::SDPBackend::error: return "error";
  case at::SDPBackend::math: return "math";
  case at::SDPBackend::flash_attention: return "flash";
  case at::SDPBackend::efficient_attention: return "mem_efficient";
  case at::SDPBackend::cudnn_attention: return "cudnn";
  case at::SDPBackend::overrideable: return "overrideable";
  default: break;
  }
#endif
  return "backend#" + std::to_string(choice);
}

at::ScalarType scalar_type(int dtype) {
  switch (dtype) {
  case SDPA_PLUGIN_F16: return at::kHalf;
  case SDPA_PLUGIN_BF16: return at::kBFloat16;
  default: return at::kFloat;
  }
}

char* copy_text(const std::string& text) {
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (out) std::memcpy(out, text.c_str(), text.size() + 1);
  return out;
}

// What a variant asks of this executor.
struct VariantArgs {
  std::string device;
  int gpu_index = -1;
  std::string name;
  std::string backend;
  std::vector<std::string> flags;
  bool has_flag(const std::string& f) const {
    return std::find(flags.begin(), flags.end(), f) != flags.end();
  }
};

struct Hello {
  std::map<std::string, std::string> versions;
  std::map<std::string, std::string> facts;
  std::string unavailable;
};

// What one case gave, before it crosses the C interface.
struct CaseOutcome {
  int outcome = SDPA_PLUGIN_RAN;
  std::string reason;
  std::vector<float> output;
  std::vector<float> dq, dk, dv; // a backward case's gradients, logical order
  std::vector<float> same_seed_output, other_seed_output; // a dropout case's second and third runs
  std::vector<double> times_ms;
  std::string backend_chosen;
  std::vector<std::string> warnings;
};

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

class TorchExecutor {
public:
  explicit TorchExecutor(VariantArgs args)
      : m_args(std::move(args)), m_gpu_index(m_args.gpu_index),
        m_sdpa_threads(at::get_num_threads()),
        m_check_threads(k_resizable_pool ? 1 : m_sdpa_threads) {
    c10::WarningUtils::set_warnAlways(true);
    if (m_gpu_index >= 0) m_device = at::Device(at::kCUDA, c10::DeviceIndex(m_gpu_index));
  }

  Hello hello() {
    CapturingHandler handler;
    c10::WarningUtils::WarningHandlerGuard guard(&handler);
    Hello info;
    info.versions["torch"] = TORCH_VERSION;
    info.versions["torch_compiled"] = std::to_string(TORCH_VERSION_MAJOR) + "." +
                                      std::to_string(TORCH_VERSION_MINOR) + "." +
                                      std::to_string(TORCH_VERSION_PATCH);
    try {
      info.facts["threads"] = std::to_string(m_sdpa_threads);
      // The SDPA calls (checked and timed) use `threads`; the conversions around them this many.
      info.facts["timing_threads"] = std::to_string(m_sdpa_threads);
      info.facts["check_threads"] = std::to_string(m_check_threads);
      const bool gpu_support = at::hasCUDA();
      info.facts["gpu_support"] = gpu_support ? "true" : "false";
      info.facts["rocm_build"] = is_rocm_build() ? "true" : "false";
      if (gpu_support) {
        const int count = at::detail::getCUDAHooks().getNumGPUs();
        info.facts["gpu_count"] = std::to_string(count);
        if (const auto hip = hip_version_from_config(); !hip.empty()) info.versions["hip"] = hip;
        if (m_gpu_index >= 0 && m_gpu_index < count) {
          info.facts["device_name"] = runtime_device_name(m_gpu_index);
          if (is_rocm_build()) info.facts["gfx_target"] = gfx_target(m_gpu_index);
        }
      }
      if (auto ck = has_ck_sdpa(at::globalContext())) info.facts["ck_sdpa_compiled"] = *ck ? "true" : "false";
      add_gfx_facts(info.facts);
      info.unavailable = prepare(info);
    } catch (const c10::Error& e) {
      info.unavailable = one_line(e.what_without_backtrace());
    } catch (const std::exception& e) {
      info.unavailable = one_line(e.what());
    }
    if (!info.unavailable.empty()) {
      for (const auto& w : handler.messages()) info.unavailable += " | " + one_line(w);
    }
    for (size_t i = 0; i < handler.messages().size(); ++i)
      info.facts["startup_warning_" + std::to_string(i)] = one_line(handler.messages()[i]);
    return info;
  }

  CaseOutcome run(const sdpa_plugin_case& c) {
    CapturingHandler handler;
    c10::WarningUtils::WarningHandlerGuard guard(&handler);
    CaseOutcome r;
    try {
      ThreadCount serial(m_check_threads); // run_case takes the pool back for the SDPA calls
      r = run_case(c);
    } catch (const c10::Error& e) {
      r = threw(e.what_without_backtrace());
    } catch (const std::exception& e) {
      r = threw(e.what());
    }
    r.warnings = handler.take();
    for (auto& w : r.warnings) w = one_line(std::move(w));
    return r;
  }

  // A 16x16 matmul of ones: every element is exactly 16. A case that left an asynchronous error
  // behind makes this throw (or compute garbage) instead, which the case itself may not show.
  std::string canary() {
    CapturingHandler handler;
    c10::WarningUtils::WarningHandlerGuard guard(&handler);
    try {
      const at::Tensor a = at::ones({16, 16}, at::TensorOptions().dtype(at::kFloat).device(m_device));
      const at::Tensor p = at::mm(a, a);
      synchronize();
      const double sum = p.sum().item<double>();
      if (sum != 16.0 * 16 * 16)
        return "failed: a 16x16 matmul of ones summed to " + std::to_string(sum) + ", expected 4096";
      return "ok";
    } catch (const c10::Error& e) {
      return "failed: " + one_line(e.what_without_backtrace());
    } catch (const std::exception& e) {
      return "failed: " + one_line(e.what());
    }
  }

private:
  // Variant-wide set-up; a non-empty answer makes every case `unsupported` with it.
  std::string prepare(Hello& info) {
    const VariantArgs& v = m_args;
    if (m_gpu_index >= 0) {
      if (!at::hasCUDA())
        return "no GPU support in this PyTorch (a CPU-only build of LibTorch)";
      const int count = at::detail::getCUDAHooks().getNumGPUs();
      if (m_gpu_index >= count)
        return m_args.device + " is not visible: PyTorch sees " + std::to_string(count) + " GPU(s)";
    }
    if (v.has_flag("ck") || v.has_flag("aotriton")) {
      if (!is_rocm_build())
        return v.name + " selects a ROCm flash-attention library, but this is not a ROCm build "
                            "of PyTorch";
#if defined(SDPA_DOCTOR_HAVE_ROCM_FA_BACKEND)
      auto& ctx = at::globalContext();
      if (v.has_flag("ck")) {
        if (auto ck = has_ck_sdpa(ctx); ck && !*ck)
          return "CK SDPA was not compiled into this PyTorch (USE_ROCM_CK_SDPA off)";
        ctx.setROCmFAPreferredBackend(at::ROCmFABackend::Ck);
        const auto got = ctx.getROCmFAPreferredBackend();
        info.facts["preferred_rocm_fa_backend"] = at::ROCmFABackendToString(got);
        if (got != at::ROCmFABackend::Ck)
          return "PyTorch declined CK as the flash-attention library (preferred backend is " +
                 at::ROCmFABackendToString(got) + "): not supported on this GPU or build";
      } else {
        ctx.setROCmFAPreferredBackend(at::ROCmFABackend::AOTriton);
        info.facts["preferred_rocm_fa_backend"] =
            at::ROCmFABackendToString(ctx.getROCmFAPreferredBackend());
      }
#else
      return "this PyTorch predates the ROCm flash-attention library switch (ROCmFABackend, "
             "2.7): not supported";
#endif
    }
#if defined(SDPA_DOCTOR_HAVE_ROCM_FA_BACKEND)
    else if (is_rocm_build()) {
      info.facts["preferred_rocm_fa_backend"] =
          at::ROCmFABackendToString(at::globalContext().getROCmFAPreferredBackend());
    }
#endif
    if (v.backend != "default" && v.backend != "math" && v.backend != "flash" &&
        v.backend != "mem_efficient" && v.backend != "cudnn")
      return "'" + v.backend + "' is not a torch SDPA backend (math, flash, mem_efficient, cudnn, "
                               "default)";
    return {};
  }

  std::string gfx_target(int index) {
    // gcnArchName lives in the GPU half of torch; isGPUArch asks it by substring.
    static constexpr const char* k_targets[] = {
        "gfx1201", "gfx1200", "gfx1153", "gfx1152", "gfx1151", "gfx1150", "gfx1103", "gfx1102",
        "gfx1101", "gfx1100", "gfx1036", "gfx1035", "gfx1034", "gfx1032", "gfx1031", "gfx1030",
        "gfx1012", "gfx1011", "gfx1010", "gfx1250", "gfx950",  "gfx942",  "gfx941",  "gfx940",
        "gfx90c",  "gfx90a",  "gfx908",  "gfx906",  "gfx900"};
    for (const char* t : k_targets) {
      auto hit = is_gpu_arch(at::detail::getCUDAHooks(), t, index);
      if (!hit) return "unknown (this LibTorch cannot query the architecture)";
      if (*hit) return t;
    }
    return "unknown";
  }

  void select_backend() {
    auto& ctx = at::globalContext();
    const std::string& b = m_args.backend;
    const bool all = b == "default";
    ctx.setSDPUseMath(all || b == "math");
    ctx.setSDPUseFlash(all || b == "flash");
    ctx.setSDPUseMemEfficient(all || b == "mem_efficient");
    set_cudnn(ctx, all || b == "cudnn");
    // Left enabled with one fused backend, overrideable turns a clean refusal into
    // "Invalid backend"; `default` keeps torch's default (enabled).
    if (all) enable_overrideable(ctx);
    else disable_overrideable(ctx);
  }

  // Laid out on the device: .to() of a strided or offset view would make it contiguous.
  at::Tensor to_tensor(const float* values, at::IntArrayRef shape, int dtype, int layout) {
    at::Tensor t = at::from_blob(const_cast<float*>(values), shape, at::kFloat)
                       .to(scalar_type(dtype));
    return laid_out(t.to(m_device), layout, 2 * shape.back());
  }

  // The mask SDPA is given, in its shape, dtype and layout (core/inputs.hpp).
  at::Tensor to_mask(const sdpa_plugin_case& c) {
    at::Tensor m = at::from_blob(const_cast<float*>(c.mask_values), {c.b, 1, c.lq, c.lkv},
                                 at::kFloat);
    m = c.mask == SDPA_PLUGIN_MASK_BOOL ? m.ne(0) : m.to(scalar_type(c.mask_dtype));
    m = m.to(m_device);
    if (c.mask_shape == SDPA_PLUGIN_MASK_BHQK) m = m.expand({c.b, c.hq, c.lq, c.lkv}).contiguous();
    if (c.mask_shape == SDPA_PLUGIN_MASK_11QK) m = m.narrow(0, 0, 1).contiguous();
    if (c.mask_shape == SDPA_PLUGIN_MASK_QK) m = m[0][0].contiguous();
    return laid_out(m, c.mask_layout, (c.lkv + 15) / 16 * 16 + 1);
  }

  // `t` as `layout` holds it; a strided tensor's rows are `row_width` wide. Padding holds NaN
  // (false in a bool mask), so a kernel that reads past a view shows it.
  static at::Tensor laid_out(const at::Tensor& t, int layout, int64_t row_width) {
    const at::Scalar pad = t.scalar_type() == at::kBool ? at::Scalar(false) : at::Scalar(NAN);
    if (layout == SDPA_PLUGIN_TRANSPOSED) return t.transpose(1, 2).contiguous().transpose(1, 2);
    if (layout == SDPA_PLUGIN_STRIDED) {
      std::vector<int64_t> sizes = t.sizes().vec();
      const int64_t n = sizes.back();
      sizes.back() = row_width;
      at::Tensor wide = at::full(sizes, pad, t.options());
      wide.narrow(-1, 0, n).copy_(t);
      return wide.narrow(-1, 0, n);
    }
    if (layout == SDPA_PLUGIN_OFFSET) {
      at::Tensor flat = at::full({t.numel() + 1}, pad, t.options());
      flat.narrow(0, 1, t.numel()).copy_(t.reshape({-1}));
      return flat.narrow(0, 1, t.numel()).view(t.sizes());
    }
    return t;
  }

  void synchronize() {
    if (m_gpu_index < 0) return;
    const auto* impl = c10::impl::getDeviceGuardImpl(at::kCUDA);
    if (!synchronize_device(impl, m_gpu_index)) {
      // Older torch: a scalar read back waits for the stream.
      (void)at::zeros({1}, at::TensorOptions().device(m_device)).sum().item<double>();
    }
  }

  // A float tensor on the host, in logical order: a gradient or an output crossing back.
  static std::vector<float> host_values(const at::Tensor& t) {
    const at::Tensor host = t.to(at::kFloat).to(at::kCPU).contiguous();
    const float* p = host.data_ptr<float>();
    return std::vector<float>(p, p + host.numel());
  }

  CaseOutcome run_case(const sdpa_plugin_case& c) {
    at::Tensor q = to_tensor(c.q, {c.b, c.hq, c.lq, c.d}, c.dtype, c.q_layout);
    at::Tensor k = to_tensor(c.k, {c.b, c.hkv, c.lkv, c.d}, c.dtype, c.k_layout);
    at::Tensor v = to_tensor(c.v, {c.b, c.hkv, c.lkv, c.d}, c.dtype, c.v_layout);
    const bool backward = c.backward != 0;
    at::Tensor grad_out;
    if (backward) { // leaves in the case's layouts: each keeps its strides
      for (at::Tensor* t : {&q, &k, &v}) t->requires_grad_(true);
      grad_out = to_tensor(c.grad_out, {c.b, c.hq, c.lq, c.d}, c.dtype, SDPA_PLUGIN_CONTIGUOUS);
    }
    c10::optional<at::Tensor> mask;
    if (c.mask != SDPA_PLUGIN_MASK_NONE) mask = to_mask(c);
    const bool gqa = c.hq != c.hkv;
    // Bottom-right causal as Python models ask for it: torch.nn.attention.bias.causal_lower_right
    // (a CausalBias, torch >= 2.3) as attn_mask with is_causal false. What CausalBias does with
    // it: at Lq = Lkv it calls is_causal (the doctor plans no such case); on the CPU it hands SDPA
    // the bool mask it stands for, the lower triangle with diagonal Lkv - Lq. On a GPU it calls
    // the ATen ops that take bottom-right where they take the problem (flash's is_causal, which
    // aligns bottom-right, or efficient attention's custom_mask_type), else that mask; this probe
    // hands SDPA the mask on a GPU too, so that the backend this cell forces is the one that runs.
    const bool is_causal = c.causal == SDPA_PLUGIN_CAUSAL_TOP_LEFT;
    if (c.causal == SDPA_PLUGIN_CAUSAL_BOTTOM_RIGHT) {
#if !SDPA_DOCTOR_TORCH_AT_LEAST(2, 3)
      CaseOutcome r;
      r.outcome = SDPA_PLUGIN_UNSUPPORTED;
      r.reason = "bottom-right causal attention (torch.nn.attention.bias.causal_lower_right) is "
                 "not supported before PyTorch 2.3";
      return r;
#endif
      mask = at::ones({c.lq, c.lkv}, at::TensorOptions().dtype(at::kBool).device(m_device))
                 .tril(c.lkv - c.lq);
    }
#if !SDPA_DOCTOR_TORCH_AT_LEAST(2, 5)
    if (gqa) {
      CaseOutcome r;
      r.outcome = SDPA_PLUGIN_UNSUPPORTED;
      r.reason = "grouped-query attention (enable_gqa) needs PyTorch >= 2.5";
      return r;
    }
#endif
    select_backend();
    CaseOutcome r;
    if (m_args.backend == "default") {
#if SDPA_DOCTOR_TORCH_AT_LEAST(2, 5)
      r.backend_chosen = backend_name(at::_fused_sdp_choice(q, k, v, mask, c.dropout_p, is_causal, {}, gqa));
#else
      r.backend_chosen = backend_name(at::_fused_sdp_choice(q, k, v, mask, c.dropout_p, is_causal, {}));
#endif
    }
    auto forward = [&] {
#if SDPA_DOCTOR_TORCH_AT_LEAST(2, 5)
      return at::scaled_dot_product_attention(q, k, v, mask, c.dropout_p, is_causal, {}, gqa);
#else
      return at::scaled_dot_product_attention(q, k, v, mask, c.dropout_p, is_causal, {});
#endif
    };
    auto reset_grads = [&] {
      for (at::Tensor* t : {&q, &k, &v}) t->mutable_grad().reset();
    };
    // A timed or warm-up run: the forward, and the backward of a backward case.
    auto call = [&] {
      at::Tensor o = forward();
      if (backward) {
        reset_grads();
        o.backward(grad_out);
      }
      return o;
    };
    // Every SDPA call back to back in one pool block: a pool woken for the timed calls alone
    // would charge its wake-up (a scheduler tick on busy cores) to the first of them.
    at::Tensor out;
    {
      ThreadCount pool(m_sdpa_threads);
      const auto start = std::chrono::steady_clock::now();
      const auto spent = [&] {
        return c.budget_ms > 0 && ms_since(start) >= static_cast<double>(c.budget_ms);
      };
      const bool dropout = c.dropout_p > 0;
      int calls = 0;
      // Each call's output (and gradients) to the worker, which compares them with the first's;
      // a dropout case's calls draw other masks.
      const auto called = [&](const at::Tensor& o) {
        ++calls;
        if (dropout || !c.each_call) return;
        const std::vector<float> values = host_values(o.detach());
        std::vector<float> grads[3];
        if (backward)
          for (int i = 0; i < 3; ++i) grads[i] = host_values((i == 0 ? q : i == 1 ? k : v).grad());
        c.each_call(c.call_ctx, calls, values.data(), static_cast<int64_t>(values.size()),
                    backward ? grads[0].data() : nullptr, backward ? grads[1].data() : nullptr,
                    backward ? grads[2].data() : nullptr, static_cast<int64_t>(grads[1].size()));
      };
      if (dropout) at::manual_seed(c.dropout_seed);
      out = forward(); // the checked run: its output is the one compared with the oracle
      synchronize();
      if (dropout) { // the same seed again, then another: reproducible, and seeded
        at::manual_seed(c.dropout_seed);
        r.same_seed_output = host_values(forward());
        at::manual_seed(c.dropout_other_seed);
        r.other_seed_output = host_values(forward());
      }
      if (backward) {
        // The forward is measured before the backward starts: a crash from here on is the backward's.
        r.output = host_values(out.detach());
        c.entering_backward(c.hook_ctx, r.output.data(), static_cast<int64_t>(r.output.size()));
        out.backward(grad_out);
        synchronize();
        for (const at::Tensor* t : {&q, &k, &v})
          if (!t->grad().defined() || t->grad().sizes() != t->sizes()) {
            r.outcome = SDPA_PLUGIN_FAILED;
            r.reason = "the backward left a gradient undefined or of another shape";
            r.output.clear();
            return r;
          }
        r.dq = host_values(q.grad());
        r.dk = host_values(k.grad());
        r.dv = host_values(v.grad());
      }
      called(out);
      for (int i = 1; i < c.warmup && !spent(); ++i) called(call());
      synchronize();
      // Two timed calls even past the budget: a case is called three times at least.
      for (int i = 0; i < c.repeat && (i <= 1 || !spent()); ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        const at::Tensor o = call();
        synchronize();
        const auto t1 = std::chrono::steady_clock::now();
        r.times_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        called(o);
      }
    }
    // A trailing op on the device surfaces errors a kernel left behind without raising.
    out = out.detach();
    (void)out.to(at::kFloat).sum().item<double>();
    at::Tensor host = out.to(at::kFloat).to(at::kCPU).contiguous();
    if (host.sizes() != at::IntArrayRef{c.b, c.hq, c.lq, c.d}) {
      r.outcome = SDPA_PLUGIN_FAILED;
      r.times_ms.clear();
      std::ostringstream msg;
      msg << "output has shape " << host.sizes() << ", expected [" << c.b << ", " << c.hq
          << ", " << c.lq << ", " << c.d << "]";
      r.reason = msg.str();
      return r;
    }
    const float* p = host.data_ptr<float>();
    r.output.assign(p, p + host.numel());
    if (m_args.backend != "default") r.backend_chosen = m_args.backend;
    return r;
  }

  // Whether torch refused the case or failed at it is the worker's to tell, from this text and
  // the warnings, against the refusal texts it knows.
  static CaseOutcome threw(const std::string& what) {
    CaseOutcome r;
    r.outcome = SDPA_PLUGIN_THREW;
    r.reason = one_line(what);
    return r;
  }

  VariantArgs m_args;
  int m_gpu_index; // N of cuda:N; -1 on the CPU
  int m_sdpa_threads; // torch's configured intra-op count, for every SDPA call
  int m_check_threads; // for the rest
  at::Device m_device{at::kCPU};
};

// --- the C interface ----------------------------------------------------------------------------

std::vector<std::string> split_flags(const char* flags) {
  std::vector<std::string> out;
  std::string one;
  for (const char* p = flags ? flags : ""; ; ++p) {
    if (*p == ',' || *p == '\0') {
      if (!one.empty()) out.push_back(std::move(one));
      one.clear();
      if (*p == '\0') break;
    } else {
      one += *p;
    }
  }
  return out;
}

// Every function the worker calls catches everything: no exception crosses the C interface (the
// worker may run on another C++ runtime: the prebuilt wheel's is a static libc++).
std::string what_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

void* plugin_open(const char* device, int gpu_index, const char* variant_name, const char* backend,
                  const char* flags) {
  try {
    VariantArgs args;
    args.device = device ? device : "cpu";
    args.gpu_index = gpu_index;
    args.name = variant_name ? variant_name : "";
    args.backend = backend ? backend : "default";
    args.flags = split_flags(flags);
    return new TorchExecutor(std::move(args));
  } catch (...) {
    return nullptr;
  }
}

char* plugin_hello(void* self) {
  try {
    const Hello info = static_cast<TorchExecutor*>(self)->hello();
    std::string text = "worker\tlibtorch\n";
    for (const auto& [k, v] : info.versions) text += "version." + k + "\t" + one_line(v) + "\n";
    for (const auto& [k, v] : info.facts) text += "fact." + k + "\t" + one_line(v) + "\n";
    if (!info.unavailable.empty()) text += "unavailable\t" + one_line(info.unavailable) + "\n";
    return copy_text(text);
  } catch (...) {
    return copy_text("worker\tlibtorch\nunavailable\tthe plugin's hello failed: " +
                     one_line(what_of(std::current_exception())) + "\n");
  }
}

void plugin_run_case(void* self, const sdpa_plugin_case* c, sdpa_plugin_result* result) {
  CaseOutcome r = static_cast<TorchExecutor*>(self)->run(*c);
  result->outcome = r.outcome;
  result->times_len = 0;
  if (r.outcome == SDPA_PLUGIN_RAN) {
    std::copy(r.output.begin(), r.output.end(), result->output);
    const size_t n = r.output.size();
    if (c->dropout_p > 0 && r.same_seed_output.size() == n && r.other_seed_output.size() == n) {
      std::copy(r.same_seed_output.begin(), r.same_seed_output.end(), result->same_seed_output);
      std::copy(r.other_seed_output.begin(), r.other_seed_output.end(), result->other_seed_output);
    }
    if (c->backward) { // run_case checked each gradient's shape against its input's
      std::copy(r.dq.begin(), r.dq.end(), result->dq);
      std::copy(r.dk.begin(), r.dk.end(), result->dk);
      std::copy(r.dv.begin(), r.dv.end(), result->dv);
    }
    const size_t timed = std::min(r.times_ms.size(), static_cast<size_t>(std::max(c->repeat, 0)));
    std::copy_n(r.times_ms.begin(), timed, result->times_ms);
    result->times_len = static_cast<int>(timed);
  }
  result->reason = r.reason.empty() ? nullptr : copy_text(r.reason);
  result->backend_chosen = r.backend_chosen.empty() ? nullptr : copy_text(r.backend_chosen);
  std::string warnings;
  for (const auto& w : r.warnings) warnings += one_line(w) + "\n";
  result->warnings = warnings.empty() ? nullptr : copy_text(warnings);
}

void plugin_run(void* self, const sdpa_plugin_case* c, sdpa_plugin_result* result) {
  try {
    plugin_run_case(self, c, result);
  } catch (...) {
    result->outcome = SDPA_PLUGIN_FAILED;
    result->times_len = 0;
    result->reason = copy_text("the LibTorch plugin failed: " + one_line(what_of(std::current_exception())));
  }
}

char* plugin_canary(void* self) {
  try {
    return copy_text(static_cast<TorchExecutor*>(self)->canary());
  } catch (...) {
    return copy_text("failed: " + one_line(what_of(std::current_exception())));
  }
}

void plugin_free_text(char* text) { std::free(text); }

// A destructor is noexcept: nothing to catch.
void plugin_close(void* self) { delete static_cast<TorchExecutor*>(self); }

const sdpa_torch_plugin k_plugin = {SDPA_TORCH_PLUGIN_VERSION, plugin_open,     plugin_hello,
                                    plugin_run,                plugin_canary,   plugin_free_text,
                                    plugin_close};

} // namespace

extern "C" __attribute__((visibility("default"))) const sdpa_torch_plugin* sdpa_torch_plugin_v4() {
  return &k_plugin;
}
