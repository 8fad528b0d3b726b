// The libtorch probe's executor: the LibTorch plugin (torch_plugin/, built against the torch under
// test) opened with dlopen and driven through its C interface. This process links no torch, so
// one worker serves whichever torch the plugin was built for, and a plugin that does not load is
// a reason every case is `unsupported`, said in the hello.
#include "workers/torch_worker.hpp"
#include "workers/torch_plugin/torch_plugin.h"

#include "cases/cases.hpp"
#include "core/paths.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <dlfcn.h>
#include <exception>
#include <sstream>

namespace sdpa_doctor::workers {

namespace {

// A text the plugin allocated, released by it.
class PluginText {
public:
  PluginText(const sdpa_torch_plugin* plugin, char* text) : m_plugin(plugin), m_text(text) {}
  ~PluginText() {
    if (m_text) m_plugin->free_text(m_text);
  }
  PluginText(const PluginText&) = delete;
  PluginText& operator=(const PluginText&) = delete;
  std::string str() const { return m_text ? std::string(m_text) : std::string(); }

private:
  const sdpa_torch_plugin* m_plugin;
  char* m_text;
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

// Every case `unsupported` with one reason: the plugin is missing or did not load.
class UnavailableExecutor final : public CaseExecutor {
public:
  explicit UnavailableExecutor(std::string why) : m_why(std::move(why)) {}
  HelloInfo hello() override {
    HelloInfo info;
    info.worker = "libtorch";
    info.unavailable = m_why;
    return info;
  }
  CaseRun run(const protocol::CaseLine&, const HostInputs&, const EnteringBackward&) override {
    CaseRun r;
    r.status = Status::unsupported;
    r.reason = m_why;
    return r;
  }

private:
  std::string m_why;
};

int plugin_dtype(DType dtype) {
  return dtype == DType::f16    ? SDPA_PLUGIN_F16
         : dtype == DType::bf16 ? SDPA_PLUGIN_BF16
                                : SDPA_PLUGIN_F32;
}

static_assert(int(Layout::offset) == SDPA_PLUGIN_OFFSET &&
              int(Layout::strided) == SDPA_PLUGIN_STRIDED &&
              int(Layout::transposed) == SDPA_PLUGIN_TRANSPOSED);
static_assert(int(MaskShape::plain) == SDPA_PLUGIN_MASK_QK &&
              int(MaskShape::shared) == SDPA_PLUGIN_MASK_11QK &&
              int(MaskShape::batch_heads) == SDPA_PLUGIN_MASK_BHQK);

class PluginExecutor final : public CaseExecutor {
public:
  PluginExecutor(const sdpa_torch_plugin* plugin, void* self) : m_plugin(plugin), m_self(self) {}
  ~PluginExecutor() override { m_plugin->close(m_self); }
  PluginExecutor(const PluginExecutor&) = delete;
  PluginExecutor& operator=(const PluginExecutor&) = delete;

  HelloInfo hello() override {
    HelloInfo info;
    const PluginText text(m_plugin, m_plugin->hello(m_self));
    for (const std::string& line : lines_of(text.str())) {
      const auto tab = line.find('\t');
      if (tab == std::string::npos) continue;
      const std::string key = line.substr(0, tab);
      std::string value = line.substr(tab + 1);
      if (key == "worker") info.worker = std::move(value);
      else if (key == "unavailable") info.unavailable = std::move(value);
      else if (key.rfind("version.", 0) == 0) info.versions[key.substr(8)] = std::move(value);
      else if (key.rfind("fact.", 0) == 0) info.facts[key.substr(5)] = std::move(value);
    }
    return info;
  }

  CaseRun run(const protocol::CaseLine& line, const HostInputs& in,
              const EnteringBackward& entering_backward) override {
    const Case& c = line.kase;
    sdpa_plugin_case pc{};
    pc.b = c.b;
    pc.hq = c.hq;
    pc.hkv = c.hkv;
    pc.lq = c.lq;
    pc.lkv = c.lkv;
    pc.d = c.d;
    pc.dtype = plugin_dtype(c.dtype);
    pc.mask = c.mask == Mask::boolean    ? SDPA_PLUGIN_MASK_BOOL
              : c.mask == Mask::additive ? SDPA_PLUGIN_MASK_ADDITIVE
                                         : SDPA_PLUGIN_MASK_NONE;
    pc.causal = !c.causal                ? SDPA_PLUGIN_CAUSAL_NONE
                : c.causal_bottom_right ? SDPA_PLUGIN_CAUSAL_BOTTOM_RIGHT
                                        : SDPA_PLUGIN_CAUSAL_TOP_LEFT;
    // The plugin's enums number as Case's do (torch_plugin.h).
    const auto [q, k, v] = c.qkv_layouts();
    pc.q_layout = static_cast<int>(q);
    pc.k_layout = static_cast<int>(k);
    pc.v_layout = static_cast<int>(v);
    pc.mask_dtype = plugin_dtype(c.mask_value_dtype());
    pc.mask_shape = static_cast<int>(c.mask_shape);
    pc.mask_layout = static_cast<int>(c.mask_layout);
    pc.q = in.q.data();
    pc.k = in.k.data();
    pc.v = in.v.data();
    pc.mask_values = c.mask == Mask::none ? nullptr : in.mask.data();
    pc.warmup = line.warmup;
    pc.repeat = line.repeat;
    pc.budget_ms = line.budget_ms;
    pc.backward = c.backward ? 1 : 0;
    pc.grad_out = c.backward ? in.grad_out.data() : nullptr;
    // The plugin calls back through C. No exception may cross it (the plugin may run on
    // another C++ runtime than ours: the prebuilt wheel's is static libc++, torch's libstdc++),
    // so each callback keeps what it threw, and it is thrown again once the plugin returns.
    // Every call goes to the comparer, the first (the checked call) included.
    cases::RepeatComparer repeats(line.gradient_tolerance);
    Callbacks callbacks{&entering_backward, &repeats, nullptr};
    pc.hook_ctx = &callbacks;
    pc.entering_backward = [](void* ctx, const float* output, int64_t count) {
      auto& cb = *static_cast<Callbacks*>(ctx);
      try {
        (*cb.entering_backward)(std::vector<float>(output, output + count));
      } catch (...) {
        if (!cb.error) cb.error = std::current_exception();
      }
    };
    pc.call_ctx = &callbacks;
    pc.each_call = [](void* ctx, int call, const float* output, int64_t count, const float* dq,
                      const float* dk, const float* dv, int64_t kv_count) {
      auto& cb = *static_cast<Callbacks*>(ctx);
      const auto values = [](const float* p, int64_t n) {
        return p ? std::vector<float>(p, p + n) : std::vector<float>{};
      };
      try {
        if (call == 1)
          cb.repeats->first(values(output, count), values(dq, count), values(dk, kv_count),
                            values(dv, kv_count));
        else
          cb.repeats->later(values(output, count), values(dq, count), values(dk, kv_count),
                            values(dv, kv_count));
      } catch (...) {
        if (!cb.error) cb.error = std::current_exception();
      }
    };

    pc.dropout_p = c.dropout_p();
    pc.dropout_seed = cases::dropout_seed(c, 0);
    pc.dropout_other_seed = cases::dropout_seed(c, 1);

    CaseRun r;
    r.output.resize(static_cast<size_t>(c.q_elements()));
    if (c.dropout_percent > 0) {
      r.same_seed_output.resize(r.output.size());
      r.other_seed_output.resize(r.output.size());
    }
    if (c.backward) {
      r.dq.resize(size_t(c.q_elements()));
      r.dk.resize(size_t(c.kv_elements()));
      r.dv.resize(size_t(c.kv_elements()));
    }
    std::vector<double> times(static_cast<size_t>(std::max(line.repeat, 0)));
    sdpa_plugin_result result{};
    result.output = r.output.data();
    result.dq = r.dq.data();
    result.dk = r.dk.data();
    result.dv = r.dv.data();
    result.same_seed_output = r.same_seed_output.data();
    result.other_seed_output = r.other_seed_output.data();
    result.times_ms = times.data();
    m_plugin->run(m_self, &pc, &result);
    const PluginText reason(m_plugin, result.reason);
    const PluginText backend(m_plugin, result.backend_chosen);
    const PluginText warnings(m_plugin, result.warnings);
    if (callbacks.error) std::rethrow_exception(callbacks.error);
    r.warnings = lines_of(warnings.str());
    r.backend_chosen = backend.str();
    switch (result.outcome) {
    case SDPA_PLUGIN_RAN:
      times.resize(static_cast<size_t>(std::clamp(result.times_len, 0, line.repeat)));
      r.times_ms = std::move(times);
      if (c.dropout_percent == 0) r.repeats = repeats.stats();
      return r;
    case SDPA_PLUGIN_THREW: return refused_or_failed(reason.str(), std::move(r.warnings));
    case SDPA_PLUGIN_UNSUPPORTED: r.status = Status::unsupported; break;
    default: r.status = Status::error; break;
    }
    r.reason = reason.str();
    r.output.clear();
    r.dq.clear();
    r.dk.clear();
    r.dv.clear();
    r.same_seed_output.clear();
    r.other_seed_output.clear();
    return r;
  }

  std::string canary() override { return PluginText(m_plugin, m_plugin->canary(m_self)).str(); }

private:
  // What the plugin's callbacks reach, and the first exception one of them caught.
  struct Callbacks {
    const EnteringBackward* entering_backward;
    cases::RepeatComparer* repeats;
    std::exception_ptr error;
  };

  // A refusal (its text is one of the backends' known refusals) is `unsupported`; anything else
  // torch raised is `error`. Torch's warnings often say why a backend refused: they join the reason.
  static CaseRun refused_or_failed(const std::string& what, std::vector<std::string> warnings) {
    CaseRun r;
    std::string reason = what;
    bool refusal = cases::is_backend_refusal(what);
    for (const auto& w : warnings) {
      reason += " | " + w;
      refusal = refusal || cases::is_backend_refusal(w);
    }
    r.status = refusal ? Status::unsupported : Status::error;
    r.reason = std::move(reason);
    r.warnings = std::move(warnings);
    return r;
  }

  const sdpa_torch_plugin* m_plugin;
  void* m_self;
};

} // namespace

std::string torch_plugin_path() {
  if (const char* named = std::getenv(k_torch_plugin_env); named && *named) return named;
  const auto built_in = built_in_torch_plugin();
  return built_in ? built_in->string() : std::string();
}

std::string preload_torch_plugin() {
  const std::string path = torch_plugin_path();
  if (path.empty()) return "no LibTorch plugin";
  // What every worker does first (below); a child forked from here finds it loaded.
  if (!::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
    const char* why = ::dlerror();
    return fmt::format("{} did not load: {}", path, why ? why : "unknown error");
  }
  return {};
}

std::unique_ptr<CaseExecutor> make_torch_executor(const WorkerArgs& args) {
  const std::string path = torch_plugin_path();
  if (path.empty())
    return std::make_unique<UnavailableExecutor>(
        "no LibTorch plugin: this doctor was built without LibTorch and none was built for the "
        "torch under test (the doctor builds one on first use)");
  // RTLD_GLOBAL: the GPU runtime that torch loads stays visible to the plugin's dlsym lookups.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    const char* why = ::dlerror();
    return std::make_unique<UnavailableExecutor>(
        fmt::format("{}{} did not load: {}", k_plugin_unusable, path, why ? why : "unknown error"));
  }
  const auto entry =
      reinterpret_cast<sdpa_torch_plugin_entry>(::dlsym(handle, SDPA_TORCH_PLUGIN_ENTRY));
  const sdpa_torch_plugin* plugin = entry ? entry() : nullptr;
  if (!plugin || plugin->version != SDPA_TORCH_PLUGIN_VERSION)
    return std::make_unique<UnavailableExecutor>(fmt::format(
        "{}{} is not a LibTorch plugin of this doctor (interface {}, expected {}): a stale build",
        k_plugin_unusable, path, plugin ? plugin->version : 0, SDPA_TORCH_PLUGIN_VERSION));
  std::string flags;
  for (const auto& f : args.variant.flags) flags += (flags.empty() ? "" : ",") + f;
  const int gpu_index = cases::is_gpu_target(args.device) ? std::stoi(args.device.substr(5)) : -1;
  void* self = plugin->open(args.device.c_str(), gpu_index, args.variant.name().c_str(),
                            args.variant.backend.c_str(), flags.c_str());
  if (!self)
    return std::make_unique<UnavailableExecutor>(
        fmt::format("{}{} could not start torch", k_plugin_unusable, path));
  // The library stays loaded for the process: torch's static state lives in it.
  return std::make_unique<PluginExecutor>(plugin, self);
}

} // namespace sdpa_doctor::workers
