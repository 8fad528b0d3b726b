#include "devices/sources.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
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

} // namespace

DeviceInventory merge_sources(const std::vector<NamedResult>& results,
                              const EnumerateOptions& options) {
  DeviceInventory inv;
  for (const NamedResult& r : results) {
    inv.sources_status[r.source] = r.skipped ? "skipped: " + r.result.status : r.result.status;
    for (const auto& [key, value] : r.result.runtime) inv.runtime.emplace(key, value);
    for (const Finding& f : r.result.findings) inv.findings.push_back(f);
  }

  // Join: a device is one slot per PCI address; a device without one keeps a slot of its own.
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
  // HIP order is the order PyTorch numbers devices in; the rest keep their discovery order.
  std::stable_sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) {
    const int ia = a.device.index < 0 ? 1 << 30 : a.device.index;
    const int ib = b.device.index < 0 ? 1 << 30 : b.device.index;
    return ia < ib;
  });

  const NamedResult* hip = find_result(results, "hip");
  const NamedResult* rsmi = find_result(results, "rocm_smi");
  const NamedResult* sysfs = find_result(results, "sysfs");
  const NamedResult* env = find_result(results, "environment");
  const auto env_var = [&](const char* name) -> std::string {
    auto it = options.environment.find(name);
    return it == options.environment.end() ? std::string() : name + ("=" + it->second);
  };
  std::string hiding = env_var("ROCR_VISIBLE_DEVICES");
  if (hiding.empty()) hiding = env_var("HIP_VISIBLE_DEVICES");
  if (hiding.empty()) hiding = env_var("CUDA_VISIBLE_DEVICES");
  const std::string override_value = fact(env, "hsa_override_gfx_version");
  const std::string override_target = fact(env, "hsa_override_target");
  const std::string amdgpu_version = sysfs ? [&] {
    auto it = sysfs->result.runtime.find("amdgpu_version");
    return it == sysfs->result.runtime.end() ? std::string() : it->second;
  }() : std::string();
  const std::string kernel = inv.runtime.count("kernel_release") ? inv.runtime["kernel_release"]
                                                                 : std::string();

  for (std::size_t i = 0; i < slots.size(); ++i) {
    Slot& slot = slots[i];
    Device& d = slot.device;
    const std::string label = device_label(d, i);

    // Physical target: sysfs reads the hardware; HIP reports what the runtime was told.
    auto& gfx = d.sources["gfx_target"];
    const std::string from_sysfs = gfx.count("sysfs") ? gfx["sysfs"] : "";
    const std::string from_hip = gfx.count("hip") ? gfx["hip"] : "";
    d.gfx_target = !from_sysfs.empty() && from_sysfs != "unreadable" ? from_sysfs : from_hip;
    if (!from_sysfs.empty() && !from_hip.empty() && from_sysfs != from_hip &&
        from_sysfs != "unreadable") {
      if (from_hip == override_target) {
        gfx["override"] = fmt::format("HSA_OVERRIDE_GFX_VERSION={}", override_value);
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
    if (!override_target.empty() && !d.gfx_target.empty() && override_target != d.gfx_target) {
      gfx["effective"] = override_target;
      inv.findings.push_back(
          {"hsa-override-device", Severity::warning,
           fmt::format("{} is {} but runs as {} because HSA_OVERRIDE_GFX_VERSION={}: kernels "
                       "built for {} run on {} hardware",
                       label, d.gfx_target, override_target, override_value, override_target,
                       d.gfx_target),
           find_gfx_arch(d.gfx_target) && find_gfx_arch(override_target) &&
                   find_gfx_arch(d.gfx_target)->family != find_gfx_arch(override_target)->family
               ? "the override names a different GPU family: unset HSA_OVERRIDE_GFX_VERSION"
               : "keep it only if this GPU has no native ROCm support",
           {}, label});
    }
    // Keep the per-source view only where it says something.
    if (std::all_of(gfx.begin(), gfx.end(), [&](const auto& kv) { return kv.second == d.gfx_target; }))
      d.sources.erase("gfx_target");

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
      if (!amdgpu_version.empty())
        d.driver_version = "amdgpu " + amdgpu_version;
      else if (fact(sysfs, "amdgpu_module") == "loaded")
        d.driver_version = kernel.empty() ? "amdgpu (in-tree)" : "amdgpu in kernel " + kernel;
    }

    // Which source listed it; a source that answered and missed it is worth a finding.
    for (const NamedResult* r : {hip, rsmi, sysfs}) {
      if (!r || r->skipped) continue;
      const bool seen = slot.seen_by.count(r->source) != 0;
      d.sources["seen_by"][r->source] = seen ? "yes" : (answered(r) ? "no" : r->result.status);
      if (seen || !answered(r)) continue;
      if (r->source == "hip" && !hiding.empty()) {
        d.sources["seen_by"]["hip"] = "hidden by " + hiding;
        continue;
      }
      inv.findings.push_back(
          {fmt::format("not-seen-by-{}", r->source == "rocm_smi" ? "rocm-smi" : r->source),
           r->source == "hip" ? Severity::problem : Severity::warning,
           fmt::format("{} ({}) is not listed by {}", label,
                       d.pci_bdf.empty() ? "no PCI address" : d.pci_bdf, r->source),
           r->source == "hip" ? "PyTorch will not see this GPU either: check `sudo dmesg | grep "
                                "-i amdgpu` and that ROCm supports this GPU"
                              : "",
           {}, label});
    }
  }

  for (Slot& slot : slots) inv.devices.push_back(std::move(slot.device));

  // HIP failed outright while the kernel lists GPUs: the one failure users need explained.
  if (hip && !hip->skipped && !inv.devices.empty() && hip->result.devices.empty() &&
      fact(hip, "hip_error").size()) {
    const std::string kfd = fact(env, "dev_kfd");
    inv.findings.push_back(
        {"hip-sees-no-gpu", Severity::problem,
         fmt::format("the kernel lists {} AMD GPU(s) but the HIP runtime says {}",
                     inv.devices.size(), hip->result.status),
         kfd == "inaccessible" ? "fix the /dev/kfd permission problem above"
         : !hiding.empty()     ? "unset " + hiding.substr(0, hiding.find('='))
                               : "the ROCm user-space may not support this GPU or kernel driver: "
                                 "install a ROCm release that lists it",
         {}, ""});
  }

  if (inv.devices.empty()) {
    std::vector<std::string> why;
    const std::string dev_kfd = fact(env, "dev_kfd");
    if (dev_kfd == "missing")
      why.push_back(fmt::format("no {}/kfd", options.dev_root));
    else if (dev_kfd == "inaccessible")
      why.push_back(fmt::format("{}/kfd cannot be opened by this user", options.dev_root));
    if (sysfs && !sysfs->skipped) {
      if (fact(sysfs, "amdgpu_module") == "missing")
        why.push_back("the amdgpu kernel driver is not loaded (no /sys/module/amdgpu)");
      if (fact(sysfs, "kfd_topology") == "missing")
        why.push_back("no KFD topology (/sys/class/kfd)");
      else if (fact(sysfs, "kfd_topology") == "present")
        why.push_back("the KFD topology lists no GPU node");
    }
    if (hip && !hip->skipped && hip->result.status != "ok")
      why.push_back("HIP says " + hip->result.status);
    if (rsmi && !rsmi->skipped && rsmi->result.status != "ok")
      why.push_back("ROCm SMI: " + rsmi->result.status);
    if (why.empty()) why.push_back("no source listed an AMD GPU");
    inv.no_gpu_reason.clear();
    for (const std::string& w : why) inv.no_gpu_reason += (inv.no_gpu_reason.empty() ? "" : "; ") + w;
  }
  return inv;
}

} // namespace sdpa_doctor::devices
