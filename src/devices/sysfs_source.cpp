#include "devices/sources.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <system_error>

namespace sdpa_doctor::devices {

namespace {

namespace fs = std::filesystem;

constexpr std::size_t k_max_nodes = 512; // more entries than any machine has: a broken tree
constexpr int64_t k_amd_vendor = 0x1002;
constexpr const char* k_sysfs_remedy =
    "On a live system this is a kernel or driver problem: attach `sdpa-doctor devices --json -` "
    "to a bug report. In a captured tree, capture the file again.";

class SysfsSource final : public DeviceSource {
public:
  std::string_view name() const override { return "sysfs"; }
  std::string skip_reason(const EnumerateOptions&) const override { return {}; }
  SourceResult read(const EnumerateOptions& options) override;

private:
  void read_driver(SourceResult& out);
  void read_render_nodes();
  void read_kfd_nodes(SourceResult& out);
  std::optional<Device> read_kfd_node(const fs::path& dir, const std::string& node,
                                      SourceResult& out);
  void read_pci(Device& device, SourceResult& out);
  std::optional<std::string> text(const fs::path& path, SourceResult& out, bool quiet_missing);
  void malformed(SourceResult& out, const fs::path& path, const std::string& what);

  fs::path m_root;
  std::map<std::string, std::string> m_render_by_bdf; // bdf -> /dev/dri/renderD128
  std::set<std::string> m_reported;                   // one finding per broken file
};

std::string relative_name(const fs::path& root, const fs::path& path) {
  std::error_code ec;
  const fs::path rel = fs::relative(path, root, ec);
  return ec || rel.empty() ? path.string() : "/" + rel.string();
}

void SysfsSource::malformed(SourceResult& out, const fs::path& path, const std::string& what) {
  const std::string name = relative_name(m_root, path);
  if (!m_reported.insert(name + what).second) return;
  out.findings.push_back({"sysfs-malformed", Severity::warning,
                          fmt::format("{}: {}", name, what), k_sysfs_remedy, {}, {}});
}

// Missing files are ordinary (old kernels, APUs); files that exist and cannot be read are not.
std::optional<std::string> SysfsSource::text(const fs::path& path, SourceResult& out,
                                             bool quiet_missing) {
  std::error_code ec;
  if (quiet_missing && !fs::exists(fs::symlink_status(path, ec))) return std::nullopt;
  auto file = read_capped(path);
  if (!file) {
    const std::string name = relative_name(m_root, path);
    if (m_reported.insert(name).second)
      out.findings.push_back({"sysfs-unreadable", Severity::warning,
                              fmt::format("cannot read {}: {}", name,
                                          file.error().message.substr(path.string().size() + 2)),
                              k_sysfs_remedy, {}, {}});
    return std::nullopt;
  }
  if (file->truncated)
    malformed(out, path, fmt::format("larger than {} KiB, only the start was read",
                                     k_max_file_bytes / 1024));
  return std::move(file->text);
}

void SysfsSource::read_driver(SourceResult& out) {
  std::error_code ec;
  const fs::path module = m_root / "sys/module/amdgpu";
  const bool loaded = fs::is_directory(module, ec);
  out.facts["amdgpu_module"] = loaded ? "loaded" : "missing";
  if (loaded) {
    // Only the out-of-tree (DKMS) driver has a version file; the in-tree one is the kernel's.
    if (auto version = text(module / "version", out, true); version && !first_line(*version).empty())
      out.runtime["amdgpu_version"] = first_line(*version);
    if (auto state = text(module / "initstate", out, true))
      out.facts["amdgpu_initstate"] = first_line(*state);
  }
  if (auto release = text(m_root / "proc/sys/kernel/osrelease", out, true))
    out.runtime["kernel_release"] = first_line(*release);
}

void SysfsSource::read_render_nodes() {
  std::error_code ec;
  const fs::path drm = m_root / "sys/class/drm";
  fs::directory_iterator it(drm, ec), end;
  std::size_t seen = 0;
  for (; !ec && it != end && seen < k_max_nodes; it.increment(ec), ++seen) {
    const std::string entry = it->path().filename().string();
    if (entry.rfind("renderD", 0) != 0) continue;
    std::error_code link_ec;
    // The link's last component is the PCI address; it need not resolve inside the tree.
    const fs::path target = fs::read_symlink(it->path() / "device", link_ec);
    if (link_ec) continue;
    const std::string bdf = normalize_pci_bdf(target.filename().string());
    if (!bdf.empty()) m_render_by_bdf.emplace(bdf, "/dev/dri/" + entry);
  }
}

void SysfsSource::read_pci(Device& device, SourceResult& out) {
  if (device.pci_bdf.empty()) return;
  const fs::path dir = m_root / "sys/bus/pci/devices" / device.pci_bdf;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  auto number = [&](const char* file) -> std::optional<int64_t> {
    auto content = text(dir / file, out, true);
    if (!content) return std::nullopt;
    auto value = parse_sysfs_integer(*content);
    if (!value) malformed(out, dir / file, fmt::format("not a number: '{}'",
                                                       first_line(*content).substr(0, 40)));
    return value;
  };
  const auto vendor = number("vendor");
  const auto pci_device = number("device");
  const auto revision = number("revision");
  if (auto total = number("mem_info_vram_total")) device.vram_total_bytes = *total;
  if (auto used = number("mem_info_vram_used")) device.vram_used_bytes = *used;
  if (vendor && pci_device) {
    device.sources["pci_id"]["sysfs"] = fmt::format("{:04x}:{:04x}", *vendor, *pci_device);
    const std::string product = pci_product_name(
        static_cast<uint32_t>(*vendor), static_cast<uint32_t>(*pci_device),
        revision ? std::optional<uint32_t>(static_cast<uint32_t>(*revision)) : std::nullopt);
    if (!product.empty()) device.name = product;
  }
  const fs::path driver = fs::read_symlink(dir / "driver", ec);
  if (!ec) {
    device.sources["kernel_driver"]["sysfs"] = driver.filename().string();
    if (driver.filename() != "amdgpu")
      out.findings.push_back(
          {"gpu-not-bound-to-amdgpu", Severity::problem,
           fmt::format("GPU {} is bound to the '{}' driver, not amdgpu", device.pci_bdf,
                       driver.filename().string()),
           "ROCm needs amdgpu: unbind it from the other driver (e.g. vfio-pci) or fix the "
           "passthrough configuration",
           {}, {}});
  }
}

std::optional<Device> SysfsSource::read_kfd_node(const fs::path& dir, const std::string& node,
                                                 SourceResult& out) {
  const fs::path file = dir / "properties";
  auto content = text(file, out, false);
  if (!content) return std::nullopt;
  const KfdProperties props = parse_kfd_properties(*content);
  for (const std::string& problem : props.problems) malformed(out, file, problem);

  std::string problem;
  // A key that is absent is an older kernel; one that is present and not a number is garbage.
  const auto number = [&](const char* key) -> std::optional<int64_t> {
    std::string why;
    auto value = props.integer(key, &why);
    if (!value && props.raw.count(key)) malformed(out, file, why);
    return value;
  };
  const auto simd = props.integer("simd_count", &problem);
  if (!simd) malformed(out, file, problem);
  const auto version = props.integer("gfx_target_version", &problem);
  if (!version && props.raw.count("gfx_target_version")) malformed(out, file, problem);
  const auto cpu_cores = number("cpu_cores_count");
  if (!simd && !version) {
    malformed(out, file, "cannot tell whether this node is a CPU or a GPU");
    return std::nullopt;
  }
  // CPU nodes have no SIMDs; a GPU node with cpu cores is an old-style combined APU node.
  if (simd.value_or(0) == 0 && version.value_or(0) == 0) {
    if (cpu_cores.value_or(0) > 0) out.facts["kfd_cpu_nodes"] += node + " ";
    return std::nullopt;
  }

  Device device;
  device.kfd_node = node;
  if (version) {
    if (auto gfx = gfx_target_from_version(*version)) {
      device.gfx_target = *gfx;
    } else {
      malformed(out, file, fmt::format("gfx_target_version {} is not a gfx target", *version));
    }
  } else if (!props.raw.count("gfx_target_version")) {
    malformed(out, file, "'gfx_target_version' missing (kernel older than 5.16?)");
  }
  if (device.gfx_target.empty())
    device.sources["gfx_target"]["sysfs"] = "unreadable";
  if (simd && *simd > 0) device.simd_count = static_cast<int>(std::min<int64_t>(*simd, 1 << 20));
  const auto per_cu = number("simd_per_cu");
  if (device.simd_count && per_cu && *per_cu > 0 && *per_cu <= 16)
    device.compute_units = static_cast<int>(*device.simd_count / *per_cu);
  if (auto wave = number("wave_front_size"); wave && (*wave == 32 || *wave == 64))
    device.wave_size = static_cast<int>(*wave);
  if (auto lds = number("lds_size_in_kb"); lds && *lds > 0 && *lds < (1 << 20))
    device.lds_per_cu_bytes = *lds * 1024;
  if (auto vendor = number("vendor_id"); vendor && *vendor != k_amd_vendor)
    device.sources["vendor_id"]["sysfs"] = fmt::format("0x{:04x}", *vendor);

  const auto location = number("location_id");
  const auto domain = number("domain");
  if (location && *location > 0 && *location <= 0xffff) {
    device.pci_bdf = pci_bdf_from_location(static_cast<uint32_t>(domain.value_or(0)),
                                           static_cast<uint32_t>(*location));
  } else if (location && *location != 0) {
    malformed(out, file, fmt::format("location_id {} is not a PCI address", *location));
  }
  if (auto minor = number("drm_render_minor"); minor && *minor >= 128 && *minor < 1024)
    device.render_node = fmt::format("/dev/dri/renderD{}", *minor);
  else if (auto it = m_render_by_bdf.find(device.pci_bdf); it != m_render_by_bdf.end())
    device.render_node = it->second;
  // Without a usable location_id the render minor still pins the PCI address down exactly.
  if (device.pci_bdf.empty() && !device.render_node.empty()) {
    for (const auto& [bdf, render] : m_render_by_bdf) {
      if (render != device.render_node) continue;
      device.pci_bdf = bdf;
      device.sources["pci_bdf"]["sysfs"] = "from " + render;
    }
  }

  // VRAM from the memory banks when the PCI directory does not say (older kernels).
  std::error_code ec;
  fs::directory_iterator banks(dir / "mem_banks", ec), end;
  int64_t bank_bytes = 0;
  for (std::size_t n = 0; !ec && banks != end && n < 64; banks.increment(ec), ++n) {
    auto bank = text(banks->path() / "properties", out, true);
    if (!bank) continue;
    const KfdProperties bank_props = parse_kfd_properties(*bank);
    // heap_type 1/2: frame buffer (public/private), i.e. VRAM.
    const auto heap = bank_props.integer("heap_type");
    const auto size = bank_props.integer("size_in_bytes");
    if (heap && (*heap == 1 || *heap == 2) && size) bank_bytes += *size;
  }
  if (bank_bytes > 0) device.vram_total_bytes = bank_bytes;
  read_pci(device, out);
  return device;
}

void SysfsSource::read_kfd_nodes(SourceResult& out) {
  const fs::path nodes = m_root / "sys/class/kfd/kfd/topology/nodes";
  std::error_code ec;
  if (!fs::exists(nodes, ec)) {
    out.facts["kfd_topology"] = "missing";
    if (!ec || ec == std::errc::no_such_file_or_directory) return;
    // ELOOP, EACCES...: the directory is there and broken, which is not the same as absent.
    out.facts["kfd_topology"] = "unreadable";
    out.findings.push_back({"sysfs-unreadable", Severity::warning,
                            fmt::format("cannot read {}: {}", relative_name(m_root, nodes),
                                        ec.message()),
                            k_sysfs_remedy, {}, {}});
    return;
  }
  out.facts["kfd_topology"] = "present";
  std::vector<std::pair<long, fs::path>> dirs;
  fs::directory_iterator it(nodes, ec), end;
  if (ec) {
    out.findings.push_back({"sysfs-unreadable", Severity::warning,
                            fmt::format("cannot list {}: {}", relative_name(m_root, nodes),
                                        ec.message()),
                            k_sysfs_remedy, {}, {}});
    out.facts["kfd_topology"] = "unreadable";
    return;
  }
  for (; !ec && it != end && dirs.size() < k_max_nodes; it.increment(ec)) {
    const std::string entry = it->path().filename().string();
    if (entry.empty() || entry.size() > 6 ||
        entry.find_first_not_of("0123456789") != std::string::npos)
      continue;
    dirs.emplace_back(std::stol(entry), it->path());
  }
  std::sort(dirs.begin(), dirs.end());
  for (const auto& [number, dir] : dirs) {
    if (auto device = read_kfd_node(dir, std::to_string(number), out))
      out.devices.push_back(std::move(*device));
  }
}

SourceResult SysfsSource::read(const EnumerateOptions& options) {
  SourceResult out;
  m_root = options.sysfs_root.empty() ? fs::path("/") : fs::path(options.sysfs_root);
  m_render_by_bdf.clear();
  m_reported.clear();
  read_driver(out);
  read_render_nodes();
  read_kfd_nodes(out);

  // GPUs with an amdgpu render node that KFD does not list: the display works, ROCm cannot.
  std::set<std::string> in_kfd;
  for (const Device& device : out.devices) in_kfd.insert(device.pci_bdf);
  int amd_render_nodes = 0;
  for (const auto& [bdf, render] : m_render_by_bdf) {
    auto vendor = text(m_root / "sys/bus/pci/devices" / bdf / "vendor", out, true);
    if (!vendor || parse_sysfs_integer(*vendor) != k_amd_vendor) continue;
    ++amd_render_nodes;
    if (in_kfd.count(bdf)) continue;
    Device device;
    device.pci_bdf = bdf;
    device.render_node = render;
    device.sources["kfd_node"]["sysfs"] = "absent";
    read_pci(device, out);
    out.findings.push_back(
        {"gpu-not-in-kfd", out.facts["kfd_topology"] == "present" ? Severity::warning
                                                                  : Severity::problem,
         fmt::format("AMD GPU {} ({}) has a render node but is not in the KFD topology: ROCm "
                     "cannot compute on it",
                     bdf, render),
         out.facts["kfd_topology"] == "present"
             ? "This GPU generation may not be supported by ROCm; check the kernel log "
               "(`sudo dmesg | grep -i kfd`)"
             : "The kernel has no KFD: use a kernel built with CONFIG_HSA_AMD=y (every "
               "distribution kernel is) or install the amdgpu-dkms driver",
         {}, {}});
    out.devices.push_back(std::move(device));
  }
  out.facts["amd_render_nodes"] = std::to_string(amd_render_nodes);
  if (out.facts["kfd_topology"] != "present" && out.devices.empty())
    out.status = "no KFD topology (" + relative_name(m_root, m_root / "sys/class/kfd") +
                 " missing)";
  return out;
}

} // namespace

std::unique_ptr<DeviceSource> make_sysfs_source() { return std::make_unique<SysfsSource>(); }

} // namespace sdpa_doctor::devices
