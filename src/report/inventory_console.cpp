#include "report/inventory.hpp"

#include "core/text.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace sdpa_doctor::report {

namespace {

std::string gib(int64_t bytes) {
  return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

std::string kib(int64_t bytes) { return fmt::format("{} KiB", bytes / 1024); }

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : std::string(sep)) + item;
  return out;
}

std::string tag(Severity severity, bool color) {
  const std::string_view name = to_string(severity);
  if (!color) return fmt::format("[{}]", name);
  const char* code = severity == Severity::problem ? "31" : severity == Severity::warning ? "33" : "32";
  return fmt::format("\x1b[{}m[{}]\x1b[0m", code, name);
}

// Labels and values may come from a vendor library or a report read back: data, escaped.
void line(std::string& out, std::string_view label, const std::string& value) {
  if (!value.empty())
    out += fmt::format("  {:<14} {}\n", escape_to_one_line(label), escape_to_one_line(value));
}

std::string name_of(const Device& d) {
  return d.name.empty() ? "(name unknown)" : escape_to_one_line(d.name);
}

// A GPU only torch saw that is not AMD's: what torch said, none of the ROCm facts.
void render_other_device(std::string& out, const Device& d, std::size_t position) {
  out += fmt::format("GPU {}  {}\n", position, name_of(d));
  line(out, "torch index", fmt::format("cuda:{}", d.index));
  line(out, "memory", d.vram_total_bytes ? gib(*d.vram_total_bytes) : "unknown");
  line(out, "PCI", d.pci_bdf.empty() ? "unknown" : d.pci_bdf);
  line(out, "seen by", "torch only (not an AMD GPU: the ROCm facts do not apply)");
}

void memory_line(std::string& out, const Device& d) {
  if (d.vram_total_bytes)
    line(out, "memory",
         gib(*d.vram_total_bytes) +
             (d.vram_used_bytes ? fmt::format(" ({} used)", gib(*d.vram_used_bytes)) : ""));
  else
    line(out, "memory", "unknown");
}

// PCI address, driver, VBIOS and the readings: the same words for every vendor.
void board_lines(std::string& out, const Device& d) {
  line(out, "PCI", d.pci_bdf.empty() ? "unknown" : d.pci_bdf);
  line(out, "driver", d.driver_version.empty() ? "unknown" : d.driver_version);
  line(out, "VBIOS", d.vbios);
  line(out, "temperature",
       d.temperature_c ? fmt::format("{:.0f} C", *d.temperature_c) : std::string("unknown"));
  if (d.power_w) line(out, "power", fmt::format("{:.1f} W", *d.power_w));
}

// Whether the torch under test has kernels for this GPU: the verdict, why, and what to do.
void render_arch_verdict(std::string& out, const Device& d) {
  if (!d.gfx) return;
  std::string said = d.gfx->verdict + ": " + d.gfx->detail;
  if (!d.gfx->compiled_for.empty() && d.gfx->detail.find("built for") == std::string::npos)
    said += " (built for " + join(d.gfx->compiled_for, ",") + ")";
  line(out, "torch kernels", said);
  if (!d.gfx->remedy.empty()) line(out, "", "fix: " + d.gfx->remedy);
}

// An NVIDIA GPU as the CUDA driver and NVML saw it.
void render_nvidia_device(std::string& out, const Device& d, std::size_t position,
                          const InventoryConsoleOptions& options) {
  out += fmt::format("GPU {}  {}\n", position, name_of(d));
  line(out, "CUDA index", d.index >= 0 ? fmt::format("cuda:{}", d.index)
                                       : std::string("- (not seen by the CUDA driver)"));
  const std::string cc = d.sm_target.size() > 4
                             ? fmt::format("{}.{}", d.sm_target.substr(3, d.sm_target.size() - 4),
                                           d.sm_target.back())
                             : std::string("?");
  line(out, "arch", fmt::format("{} (compute capability {}{})", escape_to_one_line(d.sm_target), cc,
                                d.family.empty() ? "" : ", " + escape_to_one_line(d.family)));
  memory_line(out, d);
  line(out, "SMs", d.compute_units ? std::to_string(*d.compute_units) : "unknown");
  line(out, "warp size", d.wave_size ? std::to_string(*d.wave_size) : "unknown");
  std::vector<std::string> shared;
  if (d.lds_per_block_bytes) shared.push_back(kib(*d.lds_per_block_bytes) + " per block");
  if (d.lds_per_cu_bytes) shared.push_back(kib(*d.lds_per_cu_bytes) + " per SM");
  line(out, "shared memory", join(shared, ", "));
  board_lines(out, d);
  if (options.show_arch_verdict) render_arch_verdict(out, d);
}

void render_device(std::string& out, const Device& d, std::size_t position, bool hip_asked,
                   const InventoryConsoleOptions& options) {
  if (is_nvidia_gpu(d)) return render_nvidia_device(out, d, position, options);
  if (!is_amd_gpu(d)) return render_other_device(out, d, position);
  out += fmt::format("GPU {}  {}\n", position, name_of(d));
  line(out, "HIP index",
       d.index >= 0 ? fmt::format("cuda:{}", d.index)
                    : std::string(hip_asked ? "- (not seen by HIP)" : "- (HIP not asked)"));
  std::string gfx = d.gfx_target.empty() ? "unknown" : d.gfx_target;
  if (!d.gfx_arch_name.empty() && d.gfx_arch_name != d.gfx_target)
    gfx += fmt::format(" ({})", d.gfx_arch_name);
  line(out, "gfx target", gfx);
  std::vector<std::string> family{d.family.empty() ? "unknown" : d.family};
  if (d.wave_size) family.push_back(fmt::format("wave{}", *d.wave_size));
  if (!d.matrix_instructions.empty())
    family.push_back(d.matrix_instructions == "none" ? "no matrix cores"
                                                     : d.matrix_instructions + " matrix cores");
  if (d.integrated) family.push_back("integrated (APU)");
  line(out, "family", join(family, ", "));
  line(out, "products", join(d.marketing_names, "; "));
  memory_line(out, d);
  if (d.compute_units)
    line(out, "compute units",
         fmt::format("{}{}", *d.compute_units,
                     d.simd_count ? fmt::format(" ({} SIMDs)", *d.simd_count) : ""));
  else
    line(out, "compute units", "unknown");
  line(out, "wave size", d.wave_size ? std::to_string(*d.wave_size) : "unknown");
  std::vector<std::string> lds;
  if (d.lds_per_block_bytes) lds.push_back(kib(*d.lds_per_block_bytes) + " per block");
  if (d.lds_per_cu_bytes) lds.push_back(kib(*d.lds_per_cu_bytes) + " per CU");
  line(out, "LDS", join(lds, ", "));
  board_lines(out, d);
  std::vector<std::string> nodes;
  if (!d.kfd_node.empty()) nodes.push_back("KFD node " + d.kfd_node);
  if (!d.render_node.empty()) nodes.push_back(d.render_node);
  line(out, "nodes", join(nodes, ", "));
  if (options.show_arch_verdict) render_arch_verdict(out, d);
  if (!options.show_sources) return;
  // Single-source facts are in the JSON; the console shows where sources differ.
  for (const auto& [field, by_source] : d.sources) {
    if (field != "seen_by" && by_source.size() < 2) continue;
    std::vector<std::string> said;
    for (const auto& [source, value] : by_source) said.push_back(source + "=" + value);
    line(out, field == "seen_by" ? "seen by" : "source: " + field, join(said, ", "));
  }
}

} // namespace

std::string render_inventory_console(const DeviceInventory& inventory,
                                     const InventoryConsoleOptions& options) {
  std::string out;
  const auto amd = std::count_if(inventory.devices.begin(), inventory.devices.end(), is_amd_gpu);
  const auto nvidia =
      std::count_if(inventory.devices.begin(), inventory.devices.end(), is_nvidia_gpu);
  const auto others = std::ptrdiff_t(inventory.devices.size()) - amd - nvidia;
  if (amd == 0 && nvidia == 0) {
    out += fmt::format("No {}GPU found: {}.\n", others > 0 ? "AMD or NVIDIA " : "",
                       inventory.no_gpu_reason.empty()
                           ? "no source listed one"
                           : escape_to_one_line(inventory.no_gpu_reason));
  }
  if (amd > 0) out += fmt::format("{} AMD GPU{} found\n", amd, amd == 1 ? "" : "s");
  if (nvidia > 0) out += fmt::format("{} NVIDIA GPU{} found\n", nvidia, nvidia == 1 ? "" : "s");
  if (others > 0)
    out += fmt::format("{} other GPU{} seen by torch: probed through torch, without the ROCm "
                       "checks\n",
                       others, others == 1 ? "" : "s");
  for (std::size_t i = 0; i < inventory.devices.size(); ++i) {
    out += "\n";
    const auto hip = inventory.sources_status.find("hip");
    const bool hip_asked =
        hip != inventory.sources_status.end() && hip->second.rfind("skipped", 0) != 0;
    render_device(out, inventory.devices[i], i, hip_asked, options);
  }

  if (!inventory.runtime.empty()) {
    out += "\nRuntime\n";
    for (const auto& [key, value] : inventory.runtime) line(out, key, value);
  }
  if (!inventory.sources_status.empty()) {
    out += "\nSources\n";
    for (const auto& [source, status] : inventory.sources_status) line(out, source, status);
  }

  std::vector<const Finding*> shown;
  for (Severity severity : {Severity::problem, Severity::warning, Severity::ok}) {
    if (severity == Severity::ok && !options.show_ok) continue;
    for (const Finding& f : inventory.findings)
      if (f.severity == severity) shown.push_back(&f);
  }
  if (!shown.empty()) {
    out += "\nFindings\n";
    for (const Finding* f : shown) {
      out += fmt::format("  {} {}{}\n", tag(f->severity, options.color),
                         f->device.empty() || f->message.rfind(f->device, 0) == 0
                             ? std::string()
                             : escape_to_one_line(f->device) + ": ",
                         escape_to_one_line(f->message));
      if (!f->remedy.empty())
        out += fmt::format("      {} {}\n", f->severity == Severity::ok ? "note:" : "fix: ",
                           escape_to_one_line(f->remedy));
    }
  }
  return out;
}

} // namespace sdpa_doctor::report
