#include "devices/sources.hpp"

#include "core/paths.hpp"
#include "isolate/isolate.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace sdpa_doctor::devices {

namespace {

using nlohmann::json;

constexpr const char* k_worker_name = "sdpa-doctor-enum-worker";

// HIP packs versions as major * 10^7 + minor * 10^5 + patch.
std::string hip_version_text(int64_t version) {
  if (version <= 0) return std::to_string(version);
  return fmt::format("{}.{}.{}", version / 10'000'000, (version / 100'000) % 100,
                     version % 100'000);
}

std::string get_string(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

template <typename T> std::optional<T> get_number(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return std::nullopt;
  return it->get<T>();
}

// The worker's one JSON object: the last stdout line that parses (libraries may print too).
std::optional<json> parse_worker_output(const std::string& out) {
  std::size_t end = out.size();
  while (end > 0) {
    const std::size_t start = out.rfind('\n', end - 1);
    const std::size_t from = start == std::string::npos ? 0 : start + 1;
    const std::string line = out.substr(from, end - from);
    if (!line.empty() && line.front() == '{') {
      json parsed = json::parse(line, nullptr, false);
      if (!parsed.is_discarded() && parsed.is_object()) return parsed;
    }
    if (start == std::string::npos) break;
    end = start;
  }
  return std::nullopt;
}

std::string last_line(const std::string& text) {
  std::string trimmed = text;
  while (!trimmed.empty() && (trimmed.back() == '\n' || trimmed.back() == '\r')) trimmed.pop_back();
  const auto cut = trimmed.rfind('\n');
  std::string line = cut == std::string::npos ? trimmed : trimmed.substr(cut + 1);
  return line.size() > 200 ? line.substr(0, 200) : line;
}

// Runs the enum worker for one part ("--hip" or "--rocm-smi") and returns that part's object,
// or fills `out` with why there is none.
std::optional<json> run_worker_part(const EnumerateOptions& options, const char* flag,
                                    const char* key, const std::string& label,
                                    SourceResult& out) {
  std::string path = options.worker_path;
  if (path.empty()) {
    if (auto found = find_worker(k_worker_name)) path = found->string();
  }
  if (path.empty()) {
    out.status = fmt::format("{} not found beside sdpa-doctor", k_worker_name);
    out.findings.push_back(
        {"enum-worker-missing", Severity::problem,
         fmt::format("{} is not installed beside sdpa-doctor: {} was not asked", k_worker_name,
                     label),
         "reinstall sdpa-doctor so that its helper executables sit next to it", {}, {}});
    return std::nullopt;
  }
  isolate::Command command;
  command.argv = {path, flag};
  command.inherit_env = false; // the child sees exactly the environment being diagnosed
  for (const auto& [name, value] : options.environment) command.env.emplace_back(name, value);
  auto run = isolate::run_simple(command, options.deadline);
  if (!run) {
    out.status = "could not start the enum worker: " + run.error().message;
    out.findings.push_back({"enum-worker-failed", Severity::problem, out.status,
                            "reinstall sdpa-doctor", {}, {}});
    return std::nullopt;
  }
  if (run->timed_out) {
    out.status = fmt::format("{} did not answer within {} ms", label, options.deadline.count());
    out.facts["timed_out"] = "yes";
    out.findings.push_back(
        {std::string(key) + "-timeout", Severity::problem,
         fmt::format("{} hung: no answer within {:.1f} s (the worker was killed)", label,
                     static_cast<double>(options.deadline.count()) / 1000.0),
         "a hanging hipInit/rsmi_init usually means a wedged GPU or driver: check `sudo dmesg | "
         "grep -i amdgpu`, then reset the GPU or reboot",
         {}, {}});
    return std::nullopt;
  }
  auto parsed = parse_worker_output(run->out);
  if (run->end.signal || !parsed) {
    const std::string how = run->end.signal ? isolate::describe(run->end)
                                            : "printed no result (" + isolate::describe(run->end) +
                                                  ")";
    out.status = fmt::format("{} {}", label, how);
    const std::string tail = last_line(run->err);
    out.findings.push_back(
        {std::string(key) + "-crashed", Severity::problem,
         fmt::format("asking {} failed: the enum worker {}{}", label, how,
                     tail.empty() ? "" : ": " + tail),
         "the ROCm install may be broken or mismatched with the kernel driver: reinstall ROCm "
         "and check `sudo dmesg | grep -i amdgpu`",
         {}, {}});
    return std::nullopt;
  }
  auto it = parsed->find(key);
  if (it == parsed->end() || !it->is_object()) {
    out.status = fmt::format("the enum worker's answer has no '{}' part", key);
    return std::nullopt;
  }
  return *it;
}

// Runtime libraries answer for this machine; next to a captured tree they would mislead.
std::string not_asked(const EnumerateOptions& options, const char* flag) {
  if (!options.sysfs_root.empty() && options.sysfs_root != "/")
    return "not asked: the sysfs tree is a capture, not this machine";
  return fmt::format("disabled ({})", flag);
}

class HipSource final : public DeviceSource {
public:
  std::string_view name() const override { return "hip"; }
  std::string skip_reason(const EnumerateOptions& options) const override {
    return options.use_hip ? "" : not_asked(options, "--no-hip");
  }
  SourceResult read(const EnumerateOptions& options) override {
    SourceResult out;
    auto part = run_worker_part(options, "--hip", "hip", "the HIP runtime", out);
    if (!part) return out;
    const json& hip = *part;
    if (!hip.value("built", false)) {
      out.status = "HIP runtime not built in";
      out.findings.push_back({"hip-not-built-in", Severity::warning,
                              "this sdpa-doctor was built without the HIP runtime: HIP device "
                              "indices (cuda:N) are taken from the KFD topology order",
                              "rebuild with -DSDPA_DOCTOR_WITH_HIP=ON for HIP's own view", {}, {}});
      return out;
    }
    if (auto v = get_number<int64_t>(hip, "runtime_version"))
      out.runtime["hip_runtime_version"] = hip_version_text(*v);
    if (auto v = get_number<int64_t>(hip, "driver_version"))
      out.runtime["hip_driver_version"] = hip_version_text(*v);
    out.facts["hip_init"] = get_string(hip, "init");
    const std::string error = get_string(hip, "error");
    if (!error.empty()) {
      out.facts["hip_error"] = error;
      const std::string text = get_string(hip, "error_text");
      out.status = text.empty() || text == error ? error : error + " (" + text + ")";
      return out;
    }
    for (const json& entry : hip.value("devices", json::array())) {
      Device device;
      device.index = entry.value("index", -1);
      if (entry.contains("error")) {
        out.findings.push_back(
            {"hip-device-properties", Severity::warning,
             fmt::format("hipGetDeviceProperties({}) failed: {}", device.index,
                         get_string(entry, "error")),
             "", {}, {}});
        out.devices.push_back(device);
        continue;
      }
      device.name = get_string(entry, "name");
      device.gfx_arch_name = get_string(entry, "gcnArchName");
      device.gfx_target = base_gfx_target(device.gfx_arch_name);
      device.vram_total_bytes = get_number<int64_t>(entry, "totalGlobalMem");
      device.compute_units = get_number<int>(entry, "multiProcessorCount");
      device.wave_size = get_number<int>(entry, "warpSize");
      device.lds_per_block_bytes = get_number<int64_t>(entry, "sharedMemPerBlock");
      device.lds_per_cu_bytes = get_number<int64_t>(entry, "maxSharedMemoryPerMultiProcessor");
      device.integrated = entry.value("integrated", false);
      const auto domain = get_number<uint32_t>(entry, "pciDomainID");
      const auto bus = get_number<uint32_t>(entry, "pciBusID");
      const auto dev = get_number<uint32_t>(entry, "pciDeviceID");
      // HIP reports no PCI function; GPUs are function 0.
      if (bus && dev) device.pci_bdf = make_pci_bdf(domain.value_or(0), *bus, *dev, 0);
      out.devices.push_back(std::move(device));
    }
    if (out.devices.empty()) out.status = "hipGetDeviceCount returned 0";
    return out;
  }
};

class RocmSmiSource final : public DeviceSource {
public:
  std::string_view name() const override { return "rocm_smi"; }
  std::string skip_reason(const EnumerateOptions& options) const override {
    return options.use_rocm_smi ? "" : not_asked(options, "--no-rocm-smi");
  }
  SourceResult read(const EnumerateOptions& options) override {
    SourceResult out;
    auto part = run_worker_part(options, "--rocm-smi", "rsmi", "ROCm SMI", out);
    if (!part) return out;
    const json& rsmi = *part;
    if (!rsmi.value("built", false)) {
      out.status = "ROCm SMI not built in";
      return out;
    }
    const std::string init = get_string(rsmi, "init");
    out.facts["rsmi_init"] = init;
    if (init != "RSMI_STATUS_SUCCESS") {
      const std::string text = get_string(rsmi, "init_text");
      out.status = fmt::format("rsmi_init: {}{}", init, text.empty() || text == init
                                                            ? ""
                                                            : " (" + text + ")");
      return out;
    }
    const std::string driver = get_string(rsmi, "driver_version");
    if (!driver.empty()) out.runtime["rocm_smi_driver_version"] = driver;
    for (const json& entry : rsmi.value("devices", json::array())) {
      Device device;
      device.name = get_string(entry, "name");
      if (auto bdfid = get_number<uint64_t>(entry, "bdfid"))
        device.pci_bdf = pci_bdf_from_rsmi(*bdfid);
      device.vram_total_bytes = get_number<int64_t>(entry, "vram_total_bytes");
      device.vram_used_bytes = get_number<int64_t>(entry, "vram_used_bytes");
      device.temperature_c = get_number<double>(entry, "temperature_c");
      device.power_w = get_number<double>(entry, "power_w");
      device.vbios = get_string(entry, "vbios");
      device.driver_version = driver;
      const std::string brand = get_string(entry, "brand");
      if (!brand.empty()) device.sources["brand"]["rocm_smi"] = brand;
      if (auto errors = entry.find("errors"); errors != entry.end() && errors->is_object())
        for (const auto& [what, status] : errors->items())
          if (status.is_string())
            device.sources[what]["rocm_smi"] = "error: " + status.get<std::string>();
      out.devices.push_back(std::move(device));
    }
    if (out.devices.empty()) out.status = "rsmi_num_monitor_devices returned 0";
    return out;
  }
};

} // namespace

std::unique_ptr<DeviceSource> make_hip_source() { return std::make_unique<HipSource>(); }
std::unique_ptr<DeviceSource> make_rocm_smi_source() { return std::make_unique<RocmSmiSource>(); }

} // namespace sdpa_doctor::devices
