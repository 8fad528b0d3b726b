#include "devices/sources.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>

namespace sdpa_doctor::devices {

namespace {

const NamedResult* find_result(const std::vector<NamedResult>& results, std::string_view name) {
  for (const NamedResult& r : results)
    if (r.source == name) return &r;
  return nullptr;
}

std::string fact(const NamedResult* r, const std::string& key) {
  if (!r) return {};
  auto it = r->result.facts.find(key);
  return it == r->result.facts.end() ? std::string() : it->second;
}

// A source "answered" when it ran and could enumerate (even zero devices for the HIP case is an
// answer about visibility only when it did not fail outright).
bool answered(const NamedResult* r) { return r && !r->skipped && r->result.status == "ok"; }

struct Slot {
  Device device;
  std::map<std::string, bool> seen_by;      // source -> listed it
  std::map<std::string, std::string> origin; // field -> source its value came from
};

template <typename T> std::string as_text(const T& v) { return fmt::format("{}", v); }

// Takes `value` into `field` when the field is still unknown; when both are known and differ,
// records which source said what.
template <typename T>
void take(Slot& slot, T& field, const T& value, const std::string& key, const std::string& source) {
  auto known = [](const auto& x) {
    if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::string>) return !x.empty();
    else return x.has_value();
  };
  if (!known(value)) return;
  if (!known(field)) {
    field = value;
    slot.origin[key] = source;
    return;
  }
  if (field == value) return;
  Device& d = slot.device;
  if constexpr (std::is_same_v<T, std::string>) {
    d.sources[key][slot.origin[key]] = field;
    d.sources[key][source] = value;
  } else if constexpr (std::is_same_v<T, std::optional<int64_t>>) {
    // Sources count reserved memory differently; only a real gap is worth showing.
    const double gap =
        std::fabs(static_cast<double>(*field - *value)) / std::max(1.0, static_cast<double>(*field));
    if (gap < 0.02) return;
    d.sources[key][slot.origin[key]] = as_text(*field);
    d.sources[key][source] = as_text(*value);
  } else if constexpr (std::is_same_v<T, std::optional<int>>) {
    d.sources[key][slot.origin[key]] = as_text(*field);
    d.sources[key][source] = as_text(*value);
  }
  // Temperatures and power differ between samples by nature: the first one stands.
}

void absorb(Slot& slot, const Device& d, const std::string& source) {
  Device& m = slot.device;
  slot.seen_by[source] = true;
  if (m.index < 0) m.index = d.index;
  take(slot, m.name, d.name, "name", source);
  take(slot, m.gfx_arch_name, d.gfx_arch_name, "gfx_arch_name", source);
  take(slot, m.sm_target, d.sm_target, "sm_target", source);
  take(slot, m.vram_total_bytes, d.vram_total_bytes, "vram_total_bytes", source);
  take(slot, m.vram_used_bytes, d.vram_used_bytes, "vram_used_bytes", source);
  take(slot, m.compute_units, d.compute_units, "compute_units", source);
  take(slot, m.simd_count, d.simd_count, "simd_count", source);
  take(slot, m.wave_size, d.wave_size, "wave_size", source);
  take(slot, m.lds_per_block_bytes, d.lds_per_block_bytes, "lds_per_block_bytes", source);
  take(slot, m.lds_per_cu_bytes, d.lds_per_cu_bytes, "lds_per_cu_bytes", source);
  take(slot, m.temperature_c, d.temperature_c, "temperature_c", source);
  take(slot, m.power_w, d.power_w, "power_w", source);
  take(slot, m.pci_bdf, d.pci_bdf, "pci_bdf", source);
  take(slot, m.driver_version, d.driver_version, "driver_version", source);
  take(slot, m.vbios, d.vbios, "vbios", source);
  take(slot, m.kfd_node, d.kfd_node, "kfd_node", source);
  take(slot, m.render_node, d.render_node, "render_node", source);
  m.integrated = m.integrated || d.integrated;
  // gfx targets are compared by the merge itself: a difference there is a finding, not a note.
  if (!d.gfx_target.empty()) m.sources["gfx_target"][source] = d.gfx_target;
  for (const auto& [field, by_source] : d.sources)
    for (const auto& [who, value] : by_source) m.sources[field][who] = value;
}

std::string device_label(const Device& d, std::size_t position) {
  if (d.index >= 0) return fmt::format("cuda:{}", d.index);
  return fmt::format("GPU #{}", position);
}

// Join: a device is one slot per PCI address; a device without one keeps a slot of its own. HIP
// order is the order PyTorch numbers devices in; the rest keep their discovery order.
std::vector<Slot> join_by_pci(const std::vector<NamedResult>& results) {
  std::vector<Slot> slots;
  for (const NamedResult& r : results) {
    if (r.skipped) continue;
    for (const Device& d : r.result.devices) {
      auto it = d.pci_bdf.empty() ? slots.end()
                                  : std::find_if(slots.begin(), slots.end(), [&](const Slot& s) {
                                      return s.device.pci_bdf == d.pci_bdf;
                                    });
      if (it == slots.end()) {
        slots.push_back(Slot{});
        it = std::prev(slots.end());
      }
      absorb(*it, d, r.source);
    }
  }
  std::stable_sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) {
    const int ia = a.device.index < 0 ? 1 << 30 : a.device.index;
    const int ib = b.device.index < 0 ? 1 << 30 : b.device.index;
    return ia < ib;
  });
  return slots;
}

// What every device's settling reads: the sources and the facts of the machine around them.
struct MergeContext {
  const NamedResult* hip = nullptr;
  const NamedResult* smi = nullptr;
  const NamedResult* sysfs = nullptr;
  const NamedResult* env = nullptr;
  const NamedResult* cuda = nullptr;
  const NamedResult* nvml = nullptr;
  std::optional<TorchBuild> torch; // what the diagnosed torch was built for, when known
  std::string hiding;          // "ROCR_VISIBLE_DEVICES=..." when a variable hides GPUs from HIP
  std::string override_value;  // HSA_OVERRIDE_GFX_VERSION's value
  std::string override_target; // the gfx target it names
  std::string amdgpu_version;
  std::string kernel;
};

MergeContext merge_context(const std::vector<NamedResult>& results, const EnumerateOptions& options,
                           const DeviceInventory& inv) {
  MergeContext c;
  c.hip = find_result(results, "hip");
  c.smi = find_result(results, "smi");
  c.sysfs = find_result(results, "sysfs");
  c.env = find_result(results, "environment");
  c.cuda = find_result(results, "cuda");
  c.nvml = find_result(results, "nvml");
  c.torch = options.torch_build;
  const auto env_var = [&](const char* name) -> std::string {
    auto it = options.environment.find(name);
    return it == options.environment.end() ? std::string() : name + ("=" + it->second);
  };
  for (const char* name : {"ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"})
    if (c.hiding.empty()) c.hiding = env_var(name);
  c.override_value = fact(c.env, "hsa_override_gfx_version");
  c.override_target = fact(c.env, "hsa_override_target");
  if (c.sysfs) {
    auto it = c.sysfs->result.runtime.find("amdgpu_version");
    if (it != c.sysfs->result.runtime.end()) c.amdgpu_version = it->second;
  }
  if (auto it = inv.runtime.find("kernel_release"); it != inv.runtime.end()) c.kernel = it->second;
  return c;
}

// Physical target: sysfs reads the hardware; HIP reports what the runtime was told.
void settle_gfx_target(Device& d, const std::string& label, const MergeContext& c,
                       DeviceInventory& inv) {
  auto& gfx = d.sources["gfx_target"];
  const std::string from_sysfs = gfx.count("sysfs") ? gfx["sysfs"] : "";
  const std::string from_hip = gfx.count("hip") ? gfx["hip"] : "";
  d.gfx_target = !from_sysfs.empty() && from_sysfs != "unreadable" ? from_sysfs : from_hip;
  if (!from_sysfs.empty() && !from_hip.empty() && from_sysfs != from_hip &&
      from_sysfs != "unreadable") {
    if (from_hip == c.override_target) {
      gfx["override"] = fmt::format("HSA_OVERRIDE_GFX_VERSION={}", c.override_value);
    } else {
      inv.findings.push_back(
          {"gfx-target-mismatch", Severity::problem,
           fmt::format("{}: the KFD topology says {} but the HIP runtime says {}", label,
                       from_sysfs, from_hip),
           "the ROCm user-space and the kernel driver disagree: reinstall a ROCm release that "
           "matches the driver",
           {}, label});
    }
  }
  if (!c.override_target.empty() && !d.gfx_target.empty() && c.override_target != d.gfx_target) {
    gfx["effective"] = c.override_target;
    const auto physical = find_gfx_arch(d.gfx_target);
    const auto effective = find_gfx_arch(c.override_target);
    inv.findings.push_back(
        {"hsa-override-device", Severity::warning,
         fmt::format("{} is {} but runs as {} because HSA_OVERRIDE_GFX_VERSION={}: kernels "
                     "built for {} run on {} hardware",
                     label, d.gfx_target, c.override_target, c.override_value, c.override_target,
                     d.gfx_target),
         physical && effective && physical->family != effective->family
             ? "the override names a different GPU family: unset HSA_OVERRIDE_GFX_VERSION"
             : "keep it only if this GPU has no native ROCm support",
         {}, label});
  }
  // Keep the per-source view only where it says something.
  if (std::all_of(gfx.begin(), gfx.end(), [&](const auto& kv) { return kv.second == d.gfx_target; }))
    d.sources.erase("gfx_target");
}

// Family, names, wave size from the arch table; the driver from the kernel when no source said.
void apply_arch_facts(Device& d, const std::string& label, const MergeContext& c,
                      DeviceInventory& inv) {
  if (auto arch = find_gfx_arch(d.gfx_target)) {
    d.family = std::string(arch->family);
    d.marketing_names = marketing_names(*arch);
    d.matrix_instructions = std::string(arch->matrix);
    if (!d.wave_size) d.wave_size = arch->wave_size;
    d.integrated = d.integrated || arch->integrated;
  } else {
    d.family = "unknown";
    inv.findings.push_back(
        {"unknown-gfx-target", Severity::warning,
         d.gfx_target.empty()
             ? fmt::format("{}: no source could tell its gfx target", label)
             : fmt::format("{}: {} is not in this sdpa-doctor's arch table (family, wave size "
                           "and names unknown)",
                           label, d.gfx_target),
         d.gfx_target.empty() ? "" : "a newer sdpa-doctor may know it", {}, label});
  }
  if (d.name.empty() && !d.marketing_names.empty())
    d.name = "AMD " + d.marketing_names.front() + " (by gfx target)";
  if (d.driver_version.empty()) {
    if (!c.amdgpu_version.empty())
      d.driver_version = "amdgpu " + c.amdgpu_version;
    else if (fact(c.sysfs, "amdgpu_module") == "loaded")
      d.driver_version = c.kernel.empty() ? "amdgpu (in-tree)" : "amdgpu in kernel " + c.kernel;
  }
}

// Which source listed it; a source that answered and missed it is worth a finding.
void note_sources(Slot& slot, const std::string& label, const MergeContext& c,
                  DeviceInventory& inv) {
  Device& d = slot.device;
  const bool nvidia = is_nvidia_gpu(d);
  for (const NamedResult* r : {c.hip, c.smi, c.sysfs, c.cuda, c.nvml}) {
    if (!r || r->skipped) continue;
    // Each vendor's sources speak for its own GPUs only.
    if (nvidia != (r == c.cuda || r == c.nvml)) continue;
    const bool seen = slot.seen_by.count(r->source) != 0;
    d.sources["seen_by"][r->source] = seen ? "yes" : (answered(r) ? "no" : r->result.status);
    if (seen || !answered(r)) continue;
    if (r->source == "hip" && !c.hiding.empty()) {
      d.sources["seen_by"]["hip"] = "hidden by " + c.hiding;
      continue;
    }
    inv.findings.push_back(
        {fmt::format("not-seen-by-{}", r->source),
         r->source == "hip" || r->source == "cuda" ? Severity::problem : Severity::warning,
         fmt::format("{} ({}) is not listed by {}", label,
                     d.pci_bdf.empty() ? "no PCI address" : d.pci_bdf, r->source),
         r->source == "hip"    ? "PyTorch will not see this GPU either: check `sudo dmesg | grep "
                                 "-i amdgpu` and that ROCm supports this GPU"
         : r->source == "cuda" ? "PyTorch will not see this GPU either: check CUDA_VISIBLE_DEVICES, "
                                 "`nvidia-smi` and `sudo dmesg | grep -i nvrm`"
                               : "",
         {},
         label});
  }
}

// HIP failed outright while the kernel lists GPUs: the one failure users need explained.
void explain_hip_failure(const MergeContext& c, DeviceInventory& inv) {
  const auto amd = std::count_if(inv.devices.begin(), inv.devices.end(), is_amd_gpu);
  if (!c.hip || c.hip->skipped || amd == 0 || !c.hip->result.devices.empty() ||
      fact(c.hip, "hip_error").empty())
    return;
  const std::string kfd = fact(c.env, "dev_kfd");
  inv.findings.push_back(
      {"hip-sees-no-gpu", Severity::problem,
       fmt::format("the kernel lists {} AMD GPU(s) but the HIP runtime says {}", amd,
                   c.hip->result.status),
       kfd == "inaccessible" ? "fix the /dev/kfd permission problem above"
       : !c.hiding.empty()   ? "unset " + c.hiding.substr(0, c.hiding.find('='))
                             : "the ROCm user-space may not support this GPU or kernel driver: "
                               "install a ROCm release that lists it",
       {}, ""});
}

// Every reason the AMD sources give for finding no AMD GPU, joined with "; ".
std::string no_amd_gpu_reason(const MergeContext& c, const EnumerateOptions& options) {
  std::vector<std::string> why;
  const std::string dev_kfd = fact(c.env, "dev_kfd");
  if (dev_kfd == "missing")
    why.push_back(fmt::format("no {}/kfd", options.dev_root));
  else if (dev_kfd == "inaccessible")
    why.push_back(fmt::format("{}/kfd cannot be opened by this user", options.dev_root));
  if (c.sysfs && !c.sysfs->skipped) {
    if (fact(c.sysfs, "amdgpu_module") == "missing")
      why.push_back("the amdgpu kernel driver is not loaded (no /sys/module/amdgpu)");
    if (fact(c.sysfs, "kfd_topology") == "missing")
      why.push_back("no KFD topology (/sys/class/kfd)");
    else if (fact(c.sysfs, "kfd_topology") == "present")
      why.push_back("the KFD topology lists no GPU node");
  }
  if (c.hip && !c.hip->skipped && c.hip->result.status != "ok")
    why.push_back("HIP says " + c.hip->result.status);
  if (c.smi && !c.smi->skipped && c.smi->result.status != "ok")
    why.push_back("SMI: " + c.smi->result.status);
  if (why.empty()) why.push_back("no source listed an AMD GPU");
  return fmt::format("{}", fmt::join(why, "; "));
}

// Why the NVIDIA sources found no NVIDIA GPU: the CUDA driver's answer, else NVML's.
std::string no_nvidia_gpu_reason(const MergeContext& c) {
  for (const NamedResult* r : {c.cuda, c.nvml}) // a skipped one says why it was not asked
    if (r && r->result.status != "ok") return r->result.status;
  return "no source listed an NVIDIA GPU";
}

// No GPU at all, said in one line for the torch at hand: what it was built for, and what is
// missing for it. A CUDA torch hears of the NVIDIA driver, a ROCm torch of the AMD stack, a CPU
// torch (or none) of both.
std::string no_gpu_reason(const MergeContext& c, const EnumerateOptions& options) {
  const std::string amd = no_amd_gpu_reason(c, options);
  const std::string nvidia = no_nvidia_gpu_reason(c);
  if (!c.torch)
    return fmt::format("no torch to ask what it was built for; AMD: {}; NVIDIA: {}", amd, nvidia);
  const std::string torch =
      fmt::format("torch {} is a {} build", c.torch->version, torch_build_text(*c.torch));
  if (!c.torch->cuda.empty()) return fmt::format("{} and no NVIDIA GPU is visible: {}", torch, nvidia);
  if (!c.torch->hip.empty()) return fmt::format("{} and no AMD GPU is visible: {}", torch, amd);
  return fmt::format("{} (no GPU kernels); AMD: {}; NVIDIA: {}", torch, amd, nvidia);
}

// The NVIDIA architecture names by compute capability (CUDA's own naming).
std::string nvidia_family(const std::string& sm) {
  const int cc = std::atoi(sm.c_str() + 3); // "sm_90" -> 90
  if (cc >= 100) return "Blackwell";
  if (cc == 90) return "Hopper";
  if (cc == 89) return "Ada Lovelace";
  if (cc >= 80) return "Ampere";
  if (cc == 75) return "Turing";
  if (cc >= 70) return "Volta";
  if (cc >= 60) return "Pascal";
  return cc > 0 ? "Maxwell or older" : "unknown";
}

// The findings that tell a user to fix the AMD stack (device nodes, groups, ROCm libraries).
bool amd_stack_advice(const Finding& f) {
  static const std::set<std::string> ids = {
      "kfd-missing",         "kfd-not-accessible",          "hip-runtime-missing", "smi-missing",
      "not-in-render-group", "render-node-not-accessible", "render-nodes-missing"};
  return ids.count(f.id) != 0;
}

// Advice that fits the torch at hand: a CUDA torch is never told to fix /dev/kfd or to install
// ROCm; neither is a CPU torch (or none) on a machine with no trace of an AMD GPU stack (no AMD GPU
// listed, no HIP runtime or SMI library, no /dev/kfd, no amdgpu module).
void speak_to_torch(const MergeContext& c, DeviceInventory& inv) {
  const bool cuda_torch = c.torch && !c.torch->cuda.empty();
  const bool rocm_torch = c.torch && !c.torch->hip.empty();
  const bool amd_stack = std::any_of(inv.devices.begin(), inv.devices.end(), is_amd_gpu) ||
                         inv.runtime.count("hip_runtime_library") != 0 ||
                         inv.runtime.count("amd_smi_library") != 0 ||
                         inv.runtime.count("rocm_smi_library") != 0 ||
                         fact(c.env, "dev_kfd") == "ok" ||
                         fact(c.env, "dev_kfd") == "inaccessible" ||
                         fact(c.sysfs, "amdgpu_module") == "loaded";
  if (rocm_torch || (!cuda_torch && amd_stack)) return;
  std::erase_if(inv.findings, amd_stack_advice);
  // In a container the GPU is passed in the way its vendor's runtime wants it.
  for (Finding& f : inv.findings)
    if (f.id == "in-container")
      f.remedy = cuda_torch ? "the GPU must be passed in: docker run --gpus all ... (the NVIDIA "
                              "Container Toolkit)"
                            : "";
}

} // namespace

DeviceInventory merge_sources(const std::vector<NamedResult>& results,
                              const EnumerateOptions& options) {
  DeviceInventory inv;
  for (const NamedResult& r : results) {
    inv.sources_status[r.source] = r.skipped ? "skipped: " + r.result.status : r.result.status;
    for (const auto& [key, value] : r.result.runtime) inv.runtime.emplace(key, value);
    for (const Finding& f : r.result.findings) inv.findings.push_back(f);
  }
  std::vector<Slot> slots = join_by_pci(results);
  const MergeContext context = merge_context(results, options, inv);
  if (context.torch) {
    inv.runtime["torch_version"] = context.torch->version;
    inv.runtime["torch_build"] = torch_build_text(*context.torch);
  }
  for (std::size_t i = 0; i < slots.size(); ++i) {
    Device& d = slots[i].device;
    const std::string label = device_label(d, i);
    if (is_nvidia_gpu(d)) {
      d.family = nvidia_family(d.sm_target);
      d.sources.erase("gfx_target");
    } else {
      settle_gfx_target(d, label, context, inv);
      apply_arch_facts(d, label, context, inv);
    }
    note_sources(slots[i], label, context, inv);
  }
  for (Slot& slot : slots) inv.devices.push_back(std::move(slot.device));
  explain_hip_failure(context, inv);
  if (inv.devices.empty()) inv.no_gpu_reason = no_gpu_reason(context, options);
  speak_to_torch(context, inv);
  return inv;
}

void add_torch_gpus(DeviceInventory& inventory, const std::vector<Device>& seen,
                    const std::string& python) {
  for (const Device& g : seen) {
    const std::string label = fmt::format("cuda:{}", g.index);
    auto known = std::find_if(inventory.devices.begin(), inventory.devices.end(),
                              [&](const Device& d) { return d.index == g.index; });
    if (known != inventory.devices.end()) {
      if (known->name.empty()) known->name = g.name;
      continue;
    }
    Device d = g;
    d.gfx_target = base_gfx_target(g.gfx_arch_name);
    d.sources["seen_by"]["torch"] = python;
    const bool amd = is_amd_gpu(d);
    if (auto arch = find_gfx_arch(d.gfx_target)) {
      d.family = std::string(arch->family);
      d.marketing_names = marketing_names(*arch);
      d.matrix_instructions = std::string(arch->matrix);
      d.wave_size = arch->wave_size;
    } else {
      d.family = amd ? "unknown" : "";
    }
    // An AMD GPU the doctor's own runtime missed (a wheel that brings its own ROCm libraries)
    // says something about this install; another vendor's GPU is simply outside those sources.
    inventory.findings.push_back(
        {"gpu-seen-by-torch-only",
         amd ? Severity::warning : Severity::ok,
         amd ? fmt::format("{} ({}, {}) is visible to the probed torch but not to the doctor's "
                           "HIP runtime, AMD/ROCm SMI or KFD sources",
                           label, d.name, d.gfx_target)
             : fmt::format("{} ({}) is visible to the probed torch; it is not an AMD GPU, so the "
                           "doctor's ROCm checks do not apply, but its probes run on it",
                           label, d.name),
         amd ? "the probes still run on it through torch; for the doctor's own device facts "
               "install the ROCm runtime (libamdhip64, libamd_smi) or check /dev/kfd access"
             : "",
         {},
         label});
    inventory.devices.push_back(std::move(d));
    if (amd) inventory.no_gpu_reason.clear();
  }
}

void compare_torch_hip_runtime(DeviceInventory& inventory, const std::vector<std::string>& mapped,
                               const std::string& python) {
  const std::string process = fmt::format("the torch of {}", python);
  if (mapped.size() > 1) {
    inventory.findings.push_back(two_hip_runtimes(process, mapped));
    return;
  }
  if (mapped.empty()) return; // a CPU or CUDA torch: no HIP runtime to compare
  std::error_code ec;
  const std::filesystem::path canonical = std::filesystem::canonical(mapped.front(), ec);
  const std::string torchs = ec ? mapped.front() : canonical.string();
  inventory.runtime["torch_hip_runtime_library"] = torchs;
  const auto doctors = inventory.runtime.find("hip_runtime_library");
  if (doctors == inventory.runtime.end() || doctors->second == torchs) return;
  const auto why = inventory.runtime.find("hip_runtime_loaded_because");
  inventory.findings.push_back(
      {"hip-runtime-differs-from-torch",
       Severity::warning,
       fmt::format("{} loads the HIP runtime {}, but the doctor's enumeration opened {}{}: the "
                   "devices listed here may not be the ones torch sees",
                   process, torchs, doctors->second,
                   why == inventory.runtime.end() ? "" : " (" + why->second + ")"),
       "make both find the same ROCm: check LD_LIBRARY_PATH and ROCM_PATH, or install a torch "
       "built for the ROCm under /opt/rocm",
       {},
       ""});
}

} // namespace sdpa_doctor::devices
