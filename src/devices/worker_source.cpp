#include "devices/sources.hpp"

#include "core/paths.hpp"
#include "core/text.hpp"
#include "devices/enum_worker.hpp"
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

// The strings of an array member; anything else in it (or no array) is left out.
std::vector<std::string> get_strings(const json& object, const char* key) {
  std::vector<std::string> out;
  auto it = object.find(key);
  if (it == object.end() || !it->is_array()) return out;
  for (const json& e : *it)
    if (e.is_string()) out.push_back(e.get<std::string>());
  return out;
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

// The library the worker was calling when it died, from its last "calling" line on stderr; an
// empty path when it died before calling any.
struct CalledLibrary {
  std::string path;
  std::string found_in; // the loader's reason for that file
};
CalledLibrary library_being_called(const std::string& err) {
  const size_t at = err.rfind(enum_worker::k_calling_mark);
  if (at == std::string::npos) return {};
  const size_t start = at + enum_worker::k_calling_mark.size();
  const std::string line = err.substr(start, err.find('\n', start) - start);
  const size_t tab = line.find('\t');
  return {escape_to_one_line(line.substr(0, tab)),
          tab == std::string::npos ? std::string{} : escape_to_one_line(line.substr(tab + 1))};
}

// " while calling PATH, found in WHY" for the library the worker was in; empty when none.
std::string calling_text(const CalledLibrary& called) {
  if (called.path.empty()) return {};
  return fmt::format(" while calling {}, found in {}", called.path,
                     called.found_in.empty() ? "?" : called.found_in);
}

// A part whose worker died or printed no answer: the library it was calling is the suspect.
Finding crash_finding(const std::string& key, const std::string& label, const std::string& how,
                      const std::string& err) {
  const CalledLibrary called = library_being_called(err);
  std::string tail = last_line(err);
  if (tail.rfind(enum_worker::k_calling_mark, 0) == 0) tail.clear(); // said as `called` below
  const std::string calling = calling_text(called);
  const std::string message = fmt::format("asking {} failed: the enum worker {}{}{}", label, how,
                                          calling, tail.empty() ? "" : ": " + tail);
  const bool nvidia = key == "cuda" || key == "nvml";
  const char* dmesg = nvidia ? "`sudo dmesg | grep -i nvrm`" : "`sudo dmesg | grep -i amdgpu`";
  if (called.path.empty())
    return {key + "-crashed", Severity::problem, message,
            nvidia ? fmt::format("the NVIDIA driver may be broken or its user-space libraries may "
                                 "not match the kernel module: check `nvidia-smi` and {}",
                                 dmesg)
                   : fmt::format("the ROCm install may be broken or mismatched with the kernel "
                                 "driver: reinstall ROCm and check {}",
                                 dmesg),
            {}, {}};
  return {key + "-crashed", Severity::problem, message,
          fmt::format("{} crashed when called: reinstall the package that owns it (or move it out "
                      "of the way), then check {}",
                      called.path, dmesg),
          {}, {}};
}

// Runs the enum worker for one part ("--hip" or "--smi") and returns that part's object, or
// fills `out` with why there is none.
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
  for (const std::string& dir : options.torch_lib_dirs) {
    command.argv.push_back("--torch-lib");
    command.argv.push_back(dir);
  }
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
        {std::string(key) + "-timeout",
         Severity::problem,
         fmt::format("{} hung: no answer within {:.1f} s (the worker was killed){}", label,
                     static_cast<double>(options.deadline.count()) / 1000.0,
                     calling_text(library_being_called(run->err))),
         std::string(key) == "cuda" || std::string(key) == "nvml"
             ? "a hanging cuInit/nvmlInit usually means a wedged GPU or driver: check `nvidia-smi` "
               "and `sudo dmesg | grep -i nvrm`, then reset the GPU or reboot"
             : "a hanging hipInit/amdsmi_init usually means a wedged GPU or driver: check `sudo "
               "dmesg | grep -i amdgpu`, then reset the GPU or reboot",
         {},
         {}});
    return std::nullopt;
  }
  auto parsed = parse_worker_output(run->out);
  if (run->end.signal || !parsed) {
    const std::string how = run->end.signal ? isolate::describe(run->end)
                                            : "printed no result (" + isolate::describe(run->end) +
                                                  ")";
    out.status = fmt::format("{} {}", label, how);
    out.findings.push_back(crash_finding(key, label, how, run->err));
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

// One library the worker opened (or could not), as the report says it: which file, why that one,
// and every file that failed to load before it.
struct LibraryFacts {
  std::string id;    // finding ids start with it: "hip-runtime", "amd-smi", "rocm-smi"
  std::string key;   // inventory.runtime keys start with it: "hip_runtime", "amd_smi", ...
  std::string label; // "the HIP runtime"
};

bool in_torch_folders(const std::string& path, const EnumerateOptions& options) {
  return std::any_of(
      options.torch_lib_dirs.begin(), options.torch_lib_dirs.end(),
      [&](const std::string& dir) { return !dir.empty() && path.rfind(dir + "/", 0) == 0; });
}

// The library's facts into `out.runtime`, and a finding for each way it went wrong; false when
// no file of it opened.
bool note_library(const json& library, const LibraryFacts& lib, const EnumerateOptions& options,
                  SourceResult& out) {
  const std::vector<std::string> found = get_strings(library, "found");
  if (library.contains("error")) {
    const std::string error = get_string(library, "error");
    if (!found.empty())
      out.findings.push_back(
          {lib.id + "-unloadable",
           Severity::problem,
           fmt::format("{} is installed but does not load: {}", lib.label, error),
           in_torch_folders(found.front(), options)
               ? "the torch under test carries a broken copy: reinstall torch (pip install "
                 "--force-reinstall torch, from the index it came from)"
               : "reinstall the package that owns " + found.front(),
           {},
           {}});
    return false;
  }
  const std::string path = get_string(library, "path");
  out.runtime[lib.key + "_library"] = path;
  out.runtime[lib.key + "_loaded_because"] = get_string(library, "why");
  const std::vector<std::string> tried = get_strings(library, "tried");
  if (!tried.empty()) {
    const bool torchs = in_torch_folders(tried.front(), options);
    out.findings.push_back(
        {lib.id + "-unloadable",
         Severity::problem,
         fmt::format("{}{} did not load ({}); {} was used instead ({}){}",
                     torchs ? "the torch under test's own copy of " : "", lib.label,
                     fmt::join(tried, "; "), path, get_string(library, "why"),
                     torchs ? ": what the doctor sees may not be what torch sees" : ""),
         torchs ? "reinstall torch (pip install --force-reinstall torch, from the index it came "
                  "from)"
                : "reinstall or remove the file that does not load",
         {},
         {}});
  }
  return true;
}

// The run-time compiler a part found (our kernels' GPU compiler): its file and version into
// `out.runtime` ("nvrtc_library", "nvrtc_version"); a copy that does not load is a finding.
void note_compiler(const json& part, const char* key, const LibraryFacts& lib,
                   const EnumerateOptions& options, SourceResult& out) {
  const auto it = part.find(key);
  if (it == part.end() || !it->is_object()) return;
  if (note_library(*it, lib, options, out))
    if (const std::string version = get_string(*it, "version"); !version.empty())
      out.runtime[lib.key + "_version"] = version;
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
    const json library = hip.value("library", json::object());
    note_compiler(hip, "hiprtc", {"hiprtc", "hiprtc", "hipRTC (libhiprtc)"}, options, out);
    if (!note_library(library,
                      {"hip-runtime", "hip_runtime", "the HIP runtime (libamdhip64)"}, options,
                      out)) {
      out.status = "no HIP runtime could be opened";
      if (out.findings.empty())
        out.findings.push_back(
            {"hip-runtime-missing",
             Severity::warning,
             "no HIP runtime (libamdhip64) was found where the torch under test, $ROCM_PATH, "
             "/opt/rocm* or the system keep it: HIP device indices (cuda:N) are taken from the "
             "KFD topology order",
             "install ROCm (or a ROCm build of torch, whose torch/lib carries its own), or set "
             "ROCM_PATH to where it is installed",
             {},
             {}});
      return out;
    }
    if (auto v = get_number<int64_t>(hip, "runtime_version"))
      out.runtime["hip_runtime_version"] = hip_version_text(*v);
    if (auto v = get_number<int64_t>(hip, "driver_version"))
      out.runtime["hip_driver_version"] = hip_version_text(*v);
    const std::string props_abi = get_string(hip, "props_abi");
    if (!props_abi.empty()) out.runtime["hip_runtime_props_abi"] = props_abi;
    if (const std::string abi = get_string(hip, "abi_error"); !abi.empty())
      out.findings.push_back(
          {"hip-abi-unknown",
           Severity::warning,
           fmt::format("the HIP runtime {}{}: {}; what it could not tell (gcnArchName) is "
                       "taken from the KFD topology",
                       get_string(library, "path"),
                       out.runtime.count("hip_runtime_version")
                           ? " (" + out.runtime.at("hip_runtime_version") + ")"
                           : std::string(),
                       abi),
           "a newer sdpa-doctor may know this HIP release",
           {},
           {}});
    const auto mapped = get_strings(hip, "mapped");
    if (mapped.size() > 1)
      out.findings.push_back(two_hip_runtimes("the enumeration worker", mapped));
    out.facts["hip_init"] = get_string(hip, "init");
    const std::string error = get_string(hip, "error");
    if (!error.empty()) {
      out.facts["hip_error"] = error;
      const std::string text = get_string(hip, "error_text");
      out.status = text.empty() || text == error ? error : error + " (" + text + ")";
      return out;
    }
    if (!hip.contains("count")) {
      out.status = "the HIP runtime could not be asked: " + get_string(hip, "abi_error");
      return out;
    }
    for (const json& entry : hip.value("devices", json::array())) {
      Device device;
      device.index = entry.value("index", -1);
      device.name = get_string(entry, "name");
      device.gfx_arch_name = get_string(entry, "gcnArchName");
      device.gfx_target = base_gfx_target(device.gfx_arch_name);
      device.vram_total_bytes = get_number<int64_t>(entry, "totalGlobalMem");
      device.compute_units = get_number<int>(entry, "multiProcessorCount");
      device.wave_size = get_number<int>(entry, "warpSize");
      device.lds_per_block_bytes = get_number<int64_t>(entry, "sharedMemPerBlock");
      device.lds_per_cu_bytes = get_number<int64_t>(entry, "maxSharedMemoryPerMultiProcessor");
      device.integrated = entry.value("integrated", false);
      device.pci_bdf = normalize_pci_bdf(get_string(entry, "pci_bus_id"));
      if (const std::string why = get_string(entry, "arch_error"); !why.empty())
        out.findings.push_back({"hip-arch-name-unread",
                                Severity::warning,
                                fmt::format("cuda:{}: gcnArchName not read: {}", device.index, why),
                                "",
                                {},
                                fmt::format("cuda:{}", device.index)});
      out.devices.push_back(std::move(device));
    }
    if (out.devices.empty()) out.status = "hipGetDeviceCount returned 0";
    return out;
  }
};

// AMD SMI where it opens, else ROCm SMI: one source of telemetry, named by the library that spoke.
class SmiSource final : public DeviceSource {
public:
  std::string_view name() const override { return "smi"; }
  std::string skip_reason(const EnumerateOptions& options) const override {
    return options.use_smi ? "" : not_asked(options, "--no-smi");
  }
  SourceResult read(const EnumerateOptions& options) override {
    SourceResult out;
    auto part = run_worker_part(options, "--smi", "smi", "AMD SMI / ROCm SMI", out);
    if (!part) return out;
    const json& smi = *part;
    const json library = smi.value("library", json::object());
    const bool amd = get_string(library, "name") == "amd_smi";
    const LibraryFacts lib = amd ? LibraryFacts{"amd-smi", "amd_smi", "AMD SMI (libamd_smi)"}
                                 : LibraryFacts{"rocm-smi", "rocm_smi", "ROCm SMI (librocm_smi64)"};
    // AMD SMI was tried first: a copy that does not load is worth saying even when ROCm SMI
    // answered.
    if (!amd && smi.contains("amd_smi"))
      note_library(smi["amd_smi"], {"amd-smi", "amd_smi", "AMD SMI (libamd_smi)"}, options, out);
    if (!note_library(library, lib, options, out)) {
      out.status = "neither AMD SMI nor ROCm SMI could be opened";
      out.findings.push_back(
          {"smi-missing",
           Severity::warning,
           "neither AMD SMI (libamd_smi) nor ROCm SMI (librocm_smi64) could be opened: no VRAM "
           "use, temperature or power readings",
           "install amd-smi-lib (ROCm 6.1 and later) or rocm-smi-lib, or set ROCM_PATH to where "
           "ROCm is installed",
           {},
           {}});
      return out;
    }
    const std::string version = get_string(smi, "version");
    if (!version.empty()) out.runtime[lib.key + "_version"] = version;
    if (const std::string abi = get_string(smi, "abi_error"); !abi.empty()) {
      out.status = fmt::format("{} could not be asked: {}", lib.label, abi);
      return out;
    }
    const std::string init = get_string(smi, "init");
    out.facts["smi_init"] = init;
    if (init != "RSMI_STATUS_SUCCESS" && init != "AMDSMI_STATUS_SUCCESS") {
      const std::string text = get_string(smi, "init_text");
      out.status = fmt::format("{}: {}{}", amd ? "amdsmi_init" : "rsmi_init", init,
                               text.empty() || text == init ? "" : " (" + text + ")");
      return out;
    }
    const std::string driver = get_string(smi, "driver_version");
    if (!driver.empty()) out.runtime["rocm_smi_driver_version"] = driver;
    for (const json& entry : smi.value("devices", json::array())) {
      Device device;
      device.name = get_string(entry, "name");
      if (auto bdfid = get_number<uint64_t>(entry, "bdfid"))
        device.pci_bdf = pci_bdf_from_rsmi(*bdfid);
      if (const std::string bdf = get_string(entry, "pci_bdf"); !bdf.empty())
        device.pci_bdf = normalize_pci_bdf(bdf);
      device.vram_total_bytes = get_number<int64_t>(entry, "vram_total_bytes");
      device.vram_used_bytes = get_number<int64_t>(entry, "vram_used_bytes");
      device.temperature_c = get_number<double>(entry, "temperature_c");
      device.power_w = get_number<double>(entry, "power_w");
      device.vbios = get_string(entry, "vbios");
      device.driver_version = driver;
      const std::string brand = get_string(entry, "brand");
      if (!brand.empty()) device.sources["brand"]["smi"] = brand;
      if (auto errors = entry.find("errors"); errors != entry.end() && errors->is_object())
        for (const auto& [what, status] : errors->items())
          if (status.is_string())
            device.sources[what]["smi"] = "error: " + status.get<std::string>();
      out.devices.push_back(std::move(device));
    }
    if (out.devices.empty())
      out.status = fmt::format("{} listed no GPU", amd ? "AMD SMI" : "rsmi_num_monitor_devices");
    return out;
  }
};

// "sm_90" from a compute capability; empty when either half is unknown.
std::string sm_target(const json& entry) {
  const auto major = get_number<int>(entry, "cc_major");
  const auto minor = get_number<int>(entry, "cc_minor");
  return major && minor && *major > 0 && *minor >= 0 ? fmt::format("sm_{}{}", *major, *minor)
                                                      : std::string();
}

// A CUDA torch cannot run without the driver; for any other torch its absence is no finding.
bool torch_is_cuda(const EnumerateOptions& options) {
  return options.torch_build && !options.torch_build->cuda.empty();
}

// CUDA packs versions as major * 1000 + minor * 10.
std::string cuda_version_text(int64_t version) {
  return fmt::format("{}.{}", version / 1000, (version % 1000) / 10);
}

// Why an NVIDIA part is not asked: disabled, or a captured tree, which is another machine (this
// one's driver would answer for the wrong GPUs); empty when it is.
std::string nvidia_skip_reason(const EnumerateOptions& options, bool enabled) {
  if (!enabled || (!options.sysfs_root.empty() && options.sysfs_root != "/"))
    return not_asked(options, "--no-nvidia");
  return "";
}

// The CUDA driver API: the devices torch numbers cuda:N, with their compute capability.
class CudaSource final : public DeviceSource {
public:
  std::string_view name() const override { return "cuda"; }
  std::string skip_reason(const EnumerateOptions& options) const override {
    return nvidia_skip_reason(options, options.use_cuda);
  }
  SourceResult read(const EnumerateOptions& options) override {
    SourceResult out;
    auto part = run_worker_part(options, "--cuda", "cuda", "the CUDA driver", out);
    if (!part) return out;
    const json& cuda = *part;
    const json library = cuda.value("library", json::object());
    note_compiler(cuda, "nvrtc", {"nvrtc", "nvrtc", "NVRTC (libnvrtc)"}, options, out);
    if (!note_library(library, {"cuda-driver", "cuda_driver", "the CUDA driver (libcuda.so.1)"},
                      options, out)) {
      out.status = "no CUDA driver (libcuda.so.1) could be opened";
      if (out.findings.empty() && torch_is_cuda(options))
        out.findings.push_back(
            {"cuda-driver-missing",
             Severity::warning,
             fmt::format("the torch under test ({}) is a CUDA {} build, but no CUDA driver "
                         "(libcuda.so.1) is on the system's library path: it sees no NVIDIA GPU",
                         options.torch_build->version, options.torch_build->cuda),
             "install the NVIDIA driver (in a container: start it with --gpus all through the "
             "NVIDIA Container Toolkit)",
             {},
             {}});
      return out;
    }
    if (auto v = get_number<int64_t>(cuda, "driver_version"))
      out.runtime["cuda_driver_api_version"] = cuda_version_text(*v);
    if (const std::string abi = get_string(cuda, "abi_error"); !abi.empty()) {
      out.status = "the CUDA driver could not be asked: " + abi;
      return out;
    }
    out.facts["cuda_init"] = get_string(cuda, "init");
    if (const std::string error = get_string(cuda, "error"); !error.empty()) {
      const std::string text = get_string(cuda, "error_text");
      out.status = "cuInit: " + (text.empty() || text == error ? error : error + " (" + text + ")");
      return out;
    }
    for (const json& entry : cuda.value("devices", json::array())) {
      Device device;
      device.index = entry.value("index", -1);
      device.name = get_string(entry, "name");
      device.sm_target = sm_target(entry);
      device.vram_total_bytes = get_number<int64_t>(entry, "total_mem_bytes");
      device.compute_units = get_number<int>(entry, "multiprocessor_count");
      device.wave_size = get_number<int>(entry, "warp_size");
      device.lds_per_block_bytes = get_number<int64_t>(entry, "shared_mem_per_block");
      device.lds_per_cu_bytes = get_number<int64_t>(entry, "shared_mem_per_multiprocessor");
      device.integrated = entry.value("integrated", 0) != 0;
      const auto domain = get_number<uint32_t>(entry, "pci_domain");
      const auto bus = get_number<uint32_t>(entry, "pci_bus");
      const auto dev = get_number<uint32_t>(entry, "pci_device");
      if (bus && dev) device.pci_bdf = make_pci_bdf(domain.value_or(0), *bus, *dev, 0);
      out.devices.push_back(std::move(device));
    }
    if (out.devices.empty()) out.status = "cuDeviceGetCount returned 0";
    return out;
  }
};

// NVML: the driver's version and each GPU's memory use, temperature and power, by PCI address.
class NvmlSource final : public DeviceSource {
public:
  std::string_view name() const override { return "nvml"; }
  std::string skip_reason(const EnumerateOptions& options) const override {
    return nvidia_skip_reason(options, options.use_nvml);
  }
  SourceResult read(const EnumerateOptions& options) override {
    SourceResult out;
    auto part = run_worker_part(options, "--nvml", "nvml", "NVML", out);
    if (!part) return out;
    const json& nvml = *part;
    const json library = nvml.value("library", json::object());
    if (!note_library(library, {"nvml", "nvml", "NVML (libnvidia-ml.so.1)"}, options, out)) {
      out.status = "NVML (libnvidia-ml.so.1) could not be opened";
      return out;
    }
    if (const std::string abi = get_string(nvml, "abi_error"); !abi.empty()) {
      out.status = "NVML could not be asked: " + abi;
      return out;
    }
    out.facts["nvml_init"] = get_string(nvml, "init");
    if (const std::string error = get_string(nvml, "error"); !error.empty()) {
      out.status = "nvmlInit: " + error;
      return out;
    }
    const std::string driver = get_string(nvml, "driver_version");
    if (!driver.empty()) out.runtime["nvidia_driver_version"] = driver;
    if (auto v = get_number<int64_t>(nvml, "cuda_driver_version"))
      out.runtime["nvidia_driver_cuda_version"] = cuda_version_text(*v);
    for (const json& entry : nvml.value("devices", json::array())) {
      Device device;
      device.name = get_string(entry, "name");
      device.pci_bdf = normalize_pci_bdf(get_string(entry, "pci_bus_id"));
      device.sm_target = sm_target(entry);
      device.vram_total_bytes = get_number<int64_t>(entry, "memory_total_bytes");
      device.vram_used_bytes = get_number<int64_t>(entry, "memory_used_bytes");
      device.temperature_c = get_number<double>(entry, "temperature_c");
      device.power_w = get_number<double>(entry, "power_w");
      device.vbios = get_string(entry, "vbios");
      if (!driver.empty()) device.driver_version = "NVIDIA " + driver;
      if (auto errors = entry.find("errors"); errors != entry.end() && errors->is_object())
        for (const auto& [what, status] : errors->items())
          if (status.is_string())
            device.sources[what]["nvml"] = "error: " + status.get<std::string>();
      out.devices.push_back(std::move(device));
    }
    if (out.devices.empty()) out.status = "NVML listed no GPU";
    return out;
  }
};

} // namespace

std::unique_ptr<DeviceSource> make_hip_source() { return std::make_unique<HipSource>(); }
std::unique_ptr<DeviceSource> make_smi_source() { return std::make_unique<SmiSource>(); }
std::unique_ptr<DeviceSource> make_cuda_source() { return std::make_unique<CudaSource>(); }
std::unique_ptr<DeviceSource> make_nvml_source() { return std::make_unique<NvmlSource>(); }

Finding two_hip_runtimes(const std::string& process, const std::vector<std::string>& mapped) {
  return {"two-hip-runtimes",
          Severity::problem,
          fmt::format("{} has {} HIP runtimes mapped at once: {}", process, mapped.size(),
                      fmt::join(mapped, ", ")),
          "two HIP runtimes in one process fight over the same devices (crashes, double frees at "
          "exit, pytorch/pytorch#141014): keep one on the library path (check LD_PRELOAD, "
          "LD_LIBRARY_PATH and what was linked against /opt/rocm)",
          {},
          {}};
}

} // namespace sdpa_doctor::devices
