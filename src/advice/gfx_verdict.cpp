// The gfx verdict (settle_gfx_truth, JSON inventory.devices[].gfx): is the probed torch built for
// this GPU? Physical and effective targets come from the inventory; what torch can run from the
// torch workers' hello facts: arch_list (torch.cuda.get_arch_list(), Python worker only, LibTorch
// has no API for it; n/a on a CPU-only torch), aotriton_images (the torch/lib/aotriton.images/
// amd-gfx* folders, e.g. gfx942,gfx110x; none, or n/a off ROCm) and ck_sdpa (yes|no|unknown|n/a).
// Pure functions over the Report.
#include "advice/advice.hpp"
#include "core/text.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace sdpa_doctor::advice {

namespace {

// "gfx90a:sramecc+:xnack-,gfx942" -> {gfx90a, gfx942}; "n/a", "none" and blanks give nothing.
std::vector<std::string> split_archs(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    std::string item = base_gfx(text.substr(start, comma - start));
    if (!item.empty() && std::find(out.begin(), out.end(), item) == out.end())
      out.push_back(std::move(item));
    start = comma + 1;
  }
  return out;
}

bool in_list(const std::vector<std::string>& list, const std::string& arch) {
  return std::find(list.begin(), list.end(), arch) != list.end();
}

// gfxABCD names of one family share ABC (gfx1030/gfx1031, gfx1100/gfx1103, gfx1200/gfx1201).
bool same_family(const std::string& a, const std::string& b) {
  return a.size() == 7 && b.size() == 7 && a.compare(0, 6, b, 0, 6) == 0;
}

// gfx1030 -> "10.3.0", the HSA_OVERRIDE_GFX_VERSION that names it; empty for other shapes.
std::string override_version(const std::string& arch) {
  if (arch.size() != 7) return {};
  const auto digit = [&](size_t i) {
    const char c = arch[i];
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  const int major = digit(3) * 10 + digit(4), minor = digit(5), step = digit(6);
  if (digit(3) < 0 || digit(4) < 0 || minor < 0 || step < 0) return {};
  return fmt::format("{}.{}.{}", major, minor, step);
}

// The pip index of ROCm torch wheels, generated at configure time from data/rocm_wheels.json.
constexpr const char* k_rocm_wheel_index =
#include "advice/rocm_wheels.inc"
    ;

// "https://download.pytorch.org/whl/rocm6.4" -> "download.pytorch.org".
std::string wheel_host() {
  std::string_view url = k_rocm_wheel_index;
  if (const size_t scheme = url.find("://"); scheme != std::string_view::npos)
    url.remove_prefix(scheme + 3);
  return std::string(url.substr(0, url.find('/')));
}

// Where a torch with kernels for `arch` comes from: the ROCm wheel index, or TheRock's multi-arch
// wheel with its per-device extra (AOTriton's arch list per release: ROCm/aotriton's tags).
std::string wheel_for(const std::string& arch) {
  const std::string index = std::string("pip install torch --index-url ") + k_rocm_wheel_index;
  const std::string extra =
      arch.size() == 7 ? fmt::format("torch[device-{}X]", arch.substr(0, 6)) : "torch[device-" + arch + "]";
  if (arch == "gfx1200" || arch == "gfx1201")
    return fmt::format("RDNA4 needs a ROCm >= 6.4-era torch ({}), or TheRock's multi-arch wheel "
                       "with its device extra {}",
                       index, extra);
  if (arch.rfind("gfx110", 0) == 0)
    return fmt::format("gfx110x is in the ROCm 5.5+ wheels ({}); TheRock's multi-arch wheels need "
                       "the device extra {}",
                       index, extra);
  if (arch == "gfx90a" || arch == "gfx942")
    return fmt::format("every ROCm wheel of {} carries {} ({})", wheel_host(), arch, index);
  if (arch.rfind("gfx103", 0) == 0 && arch != "gfx1030")
    return "no PyTorch wheel is built for this RDNA2 chip: HSA_OVERRIDE_GFX_VERSION=10.3.0 runs "
           "the gfx1030 kernels (same family), at your own risk";
  return fmt::format("install a torch whose torch.cuda.get_arch_list() includes {} (TheRock's "
                     "multi-arch wheel with the device extra {}, or a source build with "
                     "PYTORCH_ROCM_ARCH={})",
                     arch, extra, arch);
}

// The answer when torch gave no arch list.
void judge_unknown(GfxTruth& g, const std::map<std::string, std::string>& facts) {
  g.verdict = "unknown";
  const std::string list = value_at(facts, "arch_list");
  if (list == "n/a") {
    g.detail = "this torch is a CPU-only build: it has no GPU kernels at all";
    g.remedy = "install a ROCm build of torch: " + wheel_for(g.effective);
  } else if (const std::string err = value_at(facts, "arch_list_error"); !err.empty()) {
    g.detail = "torch could not tell which GPU architectures it was built for: " + err;
  } else if (g.source.empty()) {
    g.detail = "no torch worker ran, so nothing says which GPU architectures torch was built for";
  } else {
    g.detail = fmt::format("{} did not say which GPU architectures it was built for (LibTorch "
                           "has no API for it; the python probe answers)",
                           g.source);
  }
}

void judge(GfxTruth& g, const std::map<std::string, std::string>& facts) {
  const std::string built = fmt::format("{}", fmt::join(g.compiled_for, ","));
  if (g.compiled_for.empty()) return judge_unknown(g, facts);
  const bool overridden = g.effective != g.physical;
  if (in_list(g.compiled_for, g.effective) && overridden) {
    g.verdict = "override";
    g.detail = fmt::format(
        "runs only because {} makes the runtime load {} kernels on {} hardware: they work where the "
        "two ISAs match and give wrong results or GPU memory faults where they do not{}",
        g.override_env.empty() ? "HSA_OVERRIDE_GFX_VERSION" : g.override_env, g.effective,
        g.physical, same_family(g.effective, g.physical) ? "" : " (another GPU family: expect that)");
    g.remedy = in_list(g.compiled_for, g.physical)
                   ? fmt::format("unset HSA_OVERRIDE_GFX_VERSION: this torch has native {} kernels",
                                 g.physical)
                   : "keep the override only while no torch carries " + g.physical + ": " +
                         wheel_for(g.physical);
    return;
  }
  if (in_list(g.compiled_for, g.effective)) {
    g.verdict = "native";
    g.detail = fmt::format("this torch carries {} kernels", g.effective);
    return;
  }
  g.verdict = "missing";
  if (overridden && in_list(g.compiled_for, g.physical)) {
    g.detail = fmt::format("HSA_OVERRIDE_GFX_VERSION makes the runtime look for {} kernels, which "
                           "this torch lacks (it has {}): every GPU op fails",
                           g.effective, g.physical);
    g.remedy = "unset HSA_OVERRIDE_GFX_VERSION";
    return;
  }
  g.detail = fmt::format("this torch has no kernels for {} (built for {}): every GPU op fails "
                         "with \"invalid device function\" / \"no kernel image is available\"",
                         g.effective, built);
  g.remedy = wheel_for(g.physical);
  for (const std::string& a : g.compiled_for)
    if (same_family(a, g.physical) && !override_version(a).empty() &&
        g.remedy.find("HSA_OVERRIDE") == std::string::npos) {
      g.remedy += fmt::format("; or, at your own risk, HSA_OVERRIDE_GFX_VERSION={} to run its {} "
                              "kernels (same family)",
                              override_version(a), a);
      break;
    }
}

// The worker whose facts answer for `target`: its own target first, the user's torch (python)
// before LibTorch; nullptr when no torch worker said anything about GPU architectures.
const WorkerInfo* gfx_answer(const Report& report, const std::string& target) {
  const WorkerInfo* best = nullptr;
  int best_rank = 99;
  for (const WorkerInfo& w : report.workers) {
    if (w.probe != Probe::python && w.probe != Probe::torch) continue;
    if (!w.facts.count("arch_list") && !w.facts.count("aotriton_images") &&
        !w.facts.count("arch_list_error"))
      continue;
    int rank = (w.device == target ? 0 : 4) + (w.probe == Probe::python ? 0 : 2) +
               (w.facts.count("arch_list") ? 0 : 1);
    if (rank < best_rank) {
      best = &w;
      best_rank = rank;
    }
  }
  return best;
}

} // namespace

std::string base_gfx(std::string_view arch_name) {
  while (!arch_name.empty() && arch_name.front() == ' ') arch_name.remove_prefix(1);
  std::string out(arch_name.substr(0, arch_name.find_first_of(": ")));
  return out.rfind("gfx", 0) == 0 ? out : std::string{};
}

GfxTruth gfx_truth(const Device& d, const std::map<std::string, std::string>& facts,
                   const std::string& source, const std::string& override_value) {
  GfxTruth g;
  g.physical = base_gfx(d.gfx_target.empty() ? d.gfx_arch_name : d.gfx_target);
  g.effective = g.physical;
  if (auto gfx = d.sources.find("gfx_target"); gfx != d.sources.end())
    if (auto eff = gfx->second.find("effective"); eff != gfx->second.end())
      g.effective = base_gfx(eff->second);
  if (!override_value.empty()) g.override_env = "HSA_OVERRIDE_GFX_VERSION=" + override_value;
  g.compiled_for = split_archs(value_at(facts, "arch_list"));
  g.aotriton_images = split_archs(value_at(facts, "aotriton_images"));
  g.ck_sdpa = value_at(facts, "ck_sdpa");
  if (g.ck_sdpa.empty()) g.ck_sdpa = "unknown";
  g.source = source;
  judge(g, facts);
  return g;
}

namespace {

// "sm_86" -> 86, "compute_90" -> 90 (with `ptx` set), "sm_90a" -> 90; -1 when not an NVIDIA arch.
int sm_number(std::string_view arch, bool* ptx = nullptr) {
  while (!arch.empty() && arch.front() == ' ') arch.remove_prefix(1);
  const bool is_ptx = arch.rfind("compute_", 0) == 0;
  if (!is_ptx && arch.rfind("sm_", 0) != 0) return -1;
  arch.remove_prefix(is_ptx ? 8 : 3);
  int n = 0, digits = 0;
  for (; digits < int(arch.size()) && arch[digits] >= '0' && arch[digits] <= '9'; ++digits)
    n = n * 10 + (arch[digits] - '0');
  if (digits == 0 || digits > 4) return -1;
  if (ptx) *ptx = is_ptx;
  return n;
}

// sm_XY: X is everything but the last digit (sm_100 is 10.0, sm_86 is 8.6).
int sm_major(int sm) { return sm / 10; }

std::string cc_text(int sm) { return fmt::format("{}.{}", sm / 10, sm % 10); }

} // namespace

GfxTruth sm_truth(const Device& d, const std::map<std::string, std::string>& facts,
                  const std::string& source) {
  GfxTruth g;
  g.physical = d.sm_target;
  g.effective = d.sm_target;
  g.ck_sdpa = "n/a";
  g.source = source;
  std::vector<std::string> listed;
  const std::string list = value_at(facts, "arch_list");
  for (size_t start = 0; start <= list.size();) {
    const size_t comma = std::min(list.find(',', start), list.size());
    std::string item = list.substr(start, comma - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    if (!item.empty() && std::find(listed.begin(), listed.end(), item) == listed.end())
      listed.push_back(item);
    start = comma + 1;
  }
  g.compiled_for = listed;
  const int device = sm_number(d.sm_target);
  const std::string want_cuda =
      "a torch whose torch.cuda.get_arch_list() includes " + d.sm_target +
      " (a CUDA wheel of https://download.pytorch.org/whl/ built for it: a newer CUDA release "
      "for a newer GPU, an older one for a GPU it dropped; or a source build with "
      "TORCH_CUDA_ARCH_LIST=" + (device > 0 ? cc_text(device) : "?") + ")";
  if (listed.empty() || list == "n/a") {
    g.compiled_for.clear();
    g.verdict = "unknown";
    if (list == "n/a") {
      g.detail = "this torch is a CPU-only build: it has no GPU kernels at all";
      g.remedy = "install " + want_cuda;
    } else if (const std::string err = value_at(facts, "arch_list_error"); !err.empty()) {
      g.detail = "torch could not tell which GPU architectures it was built for: " + err;
    } else if (source.empty()) {
      g.detail = "no torch worker ran, so nothing says which GPU architectures torch was built for";
    } else {
      g.detail = fmt::format("{} did not say which GPU architectures it was built for (LibTorch "
                             "has no API for it; the python probe answers)",
                             source);
    }
    return g;
  }
  int best_cubin = -1, best_ptx = -1;
  for (const std::string& a : listed) {
    bool ptx = false;
    const int n = sm_number(a, &ptx);
    if (n < 0 || device < 0) continue;
    if (ptx && n <= device) best_ptx = std::max(best_ptx, n);
    if (!ptx && sm_major(n) == sm_major(device) && n <= device) best_cubin = std::max(best_cubin, n);
  }
  const std::string built = fmt::format("{}", fmt::join(listed, ","));
  if (best_cubin == device) {
    g.verdict = "native";
    g.detail = fmt::format("this torch carries {} kernels", d.sm_target);
  } else if (best_cubin >= 0) {
    g.verdict = "native";
    g.detail = fmt::format("this torch's sm_{} kernels run on {} (compute capability {}: the "
                           "same major version, binary compatible)",
                           best_cubin, d.sm_target, cc_text(device));
  } else if (best_ptx >= 0) {
    g.verdict = "native";
    g.detail = fmt::format("no {} kernels, but its compute_{} PTX is compiled for this GPU by the "
                           "driver at first use (a slow first call)",
                           d.sm_target, best_ptx);
  } else {
    g.verdict = "missing";
    g.detail = fmt::format("this torch has no kernels for {} (built for {}): every GPU op fails "
                           "with \"no kernel image is available for execution on the device\"",
                           d.sm_target, built);
    g.remedy = "install " + want_cuda;
  }
  return g;
}

GfxSettlement settle_gfx_truth(const Report& report) {
  GfxSettlement settlement;
  const std::string override_value = value_at(report.environment, "HSA_OVERRIDE_GFX_VERSION");
  for (size_t i = 0; i < report.inventory.devices.size(); ++i) {
    const Device& d = report.inventory.devices[i];
    if (!is_amd_gpu(d) && !is_nvidia_gpu(d)) continue; // no arch to build for
    const std::string target = d.index >= 0 ? fmt::format("cuda:{}", d.index) : std::string();
    const WorkerInfo* w = gfx_answer(report, target);
    static const std::map<std::string, std::string> k_none;
    const std::string source =
        w ? fmt::format("{} torch {}", w->probe == Probe::python ? "python" : "libtorch",
                        value_at(w->versions, "torch"))
          : std::string();
    settlement.verdicts.emplace_back(
        i, is_nvidia_gpu(d) ? sm_truth(d, w ? w->facts : k_none, source)
                            : gfx_truth(d, w ? w->facts : k_none, source, override_value));
  }
  return settlement;
}

void apply_gfx_truth(const GfxSettlement& settlement, Report& report) {
  for (const auto& [index, truth] : settlement.verdicts)
    if (index < report.inventory.devices.size()) report.inventory.devices[index].gfx = truth;
}

void gfx_findings(const Report& report, std::vector<Finding>& out) {
  for (const Device& d : report.inventory.devices) {
    if (!d.gfx || d.gfx->verdict != "missing" || d.index < 0) continue;
    const GfxTruth& g = *d.gfx;
    Finding f;
    f.id = "torch-not-built-for-arch";
    f.severity = Severity::problem;
    f.device = fmt::format("cuda:{}", d.index);
    for (const CaseResult& r : report.results)
      if (r.device == f.device && (r.probe == Probe::python || r.probe == Probe::torch) &&
          is_failure_by_default(r.status) &&
          std::find(f.case_ids.begin(), f.case_ids.end(), r.case_id) == f.case_ids.end())
        f.case_ids.push_back(r.case_id);
    f.message = fmt::format("{} ({}): {}{}{}", f.device, g.physical,
                            g.source.empty() ? "" : g.source + ": ", g.detail,
                            f.case_ids.empty() ? std::string()
                                               : fmt::format("; the failures of {} case{} on this "
                                                             "device share this one cause",
                                                             f.case_ids.size(),
                                                             f.case_ids.size() == 1 ? "" : "s"));
    f.remedy = g.remedy;
    out.push_back(std::move(f));
  }
}

} // namespace sdpa_doctor::advice
