// The SMI part of the enumeration worker: AMD SMI, the library ROCm is moving to, and ROCm SMI
// (deprecated since ROCm 6.1, absent from TheRock builds) only where AMD SMI cannot be opened.
// "Not supported" is an ordinary answer: the key stays absent.
#include "devices/enum_worker.hpp"
#include "devices/smi_abi.hpp"

#include <fmt/format.h>

#include <array>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sdpa_doctor::devices::enum_worker {

namespace {

using namespace smi_abi;

// Fills one entry point of an Api struct from the opened library (null when absent).
struct Resolver {
  const loader::Opened& library;
  template <typename F> void operator()(F& slot, const char* name) const {
    slot = loader::symbol_as<F>(library, name);
  }
};

// Failures other than "not supported" are kept under "errors", so a reader can tell "this card
// has no sensor" from "the call failed".
template <typename Status> struct Recorder {
  nlohmann::json& device;
  Status success, not_supported;
  std::function<std::string(Status)> name;
  bool ok(const char* key, Status status) {
    if (status == success) return true;
    if (status != not_supported) device["errors"][key] = name(status);
    return false;
  }
  // Calls `fn`, an entry point the library may lack (then false, nothing recorded), with `args`:
  // true when it answered success.
  template <typename Fn, typename... Args> bool call(const char* key, Fn fn, Args... args) {
    return fn && ok(key, fn(args...));
  }
};

// ---- ROCm SMI -------------------------------------------------------------------------------

std::string rsmi_status_name(RsmiStatus status) {
  static constexpr const char* k_names[] = {"RSMI_STATUS_SUCCESS",
                                            "RSMI_STATUS_INVALID_ARGS",
                                            "RSMI_STATUS_NOT_SUPPORTED",
                                            "RSMI_STATUS_FILE_ERROR",
                                            "RSMI_STATUS_PERMISSION",
                                            "RSMI_STATUS_OUT_OF_RESOURCES",
                                            "RSMI_STATUS_INTERNAL_EXCEPTION",
                                            "RSMI_STATUS_INPUT_OUT_OF_BOUNDS",
                                            "RSMI_STATUS_INIT_ERROR",
                                            "RSMI_STATUS_NOT_YET_IMPLEMENTED",
                                            "RSMI_STATUS_NOT_FOUND",
                                            "RSMI_STATUS_INSUFFICIENT_SIZE",
                                            "RSMI_STATUS_INTERRUPT",
                                            "RSMI_STATUS_UNEXPECTED_SIZE",
                                            "RSMI_STATUS_NO_DATA",
                                            "RSMI_STATUS_UNEXPECTED_DATA",
                                            "RSMI_STATUS_BUSY",
                                            "RSMI_STATUS_REFCOUNT_OVERFLOW"};
  if (status >= 0 && static_cast<std::size_t>(status) < std::size(k_names)) return k_names[status];
  return "RSMI_STATUS_" + std::to_string(status);
}

RsmiApi resolve_rsmi(const loader::Opened& library) {
  RsmiApi api;
  const Resolver get{library};
  get(api.init, "rsmi_init");
  get(api.shut_down, "rsmi_shut_down");
  get(api.version_get, "rsmi_version_get");
  get(api.version_str_get, "rsmi_version_str_get");
  get(api.status_string, "rsmi_status_string");
  get(api.num_monitor_devices, "rsmi_num_monitor_devices");
  get(api.dev_name_get, "rsmi_dev_name_get");
  get(api.dev_brand_get, "rsmi_dev_brand_get");
  get(api.dev_vendor_name_get, "rsmi_dev_vendor_name_get");
  get(api.dev_pci_id_get, "rsmi_dev_pci_id_get");
  get(api.dev_memory_total_get, "rsmi_dev_memory_total_get");
  get(api.dev_memory_usage_get, "rsmi_dev_memory_usage_get");
  get(api.dev_temp_metric_get, "rsmi_dev_temp_metric_get");
  get(api.dev_power_ave_get, "rsmi_dev_power_ave_get");
  get(api.dev_vbios_version_get, "rsmi_dev_vbios_version_get");
  return api;
}

nlohmann::json rsmi_device(const RsmiApi& api, uint32_t i) {
  nlohmann::json device = {{"index", i}};
  Recorder<RsmiStatus> r{device, k_rsmi_success, k_rsmi_not_supported, rsmi_status_name};
  std::array<char, 256> buffer{};
  const auto text = [&](const char* key, auto fn) {
    buffer.fill('\0');
    if (r.call(key, fn, i, buffer.data(), static_cast<uint32_t>(buffer.size())))
      device[key] = text_of(buffer);
  };
  text("name", api.dev_name_get);
  text("brand", api.dev_brand_get);
  text("vendor", api.dev_vendor_name_get);
  text("vbios", api.dev_vbios_version_get);
  uint64_t bdfid = 0, total = 0, used = 0, microwatts = 0;
  int64_t millidegrees = 0;
  if (r.call("bdfid", api.dev_pci_id_get, i, &bdfid)) device["bdfid"] = bdfid;
  if (r.call("vram_total", api.dev_memory_total_get, i, k_rsmi_mem_type_vram, &total))
    device["vram_total_bytes"] = total;
  if (r.call("vram_used", api.dev_memory_usage_get, i, k_rsmi_mem_type_vram, &used))
    device["vram_used_bytes"] = used;
  if (r.call("temperature", api.dev_temp_metric_get, i, k_rsmi_temp_edge, k_rsmi_temp_current,
             &millidegrees))
    device["temperature_c"] = static_cast<double>(millidegrees) / 1000.0;
  if (r.call("power", api.dev_power_ave_get, i, 0u, &microwatts))
    device["power_w"] = static_cast<double>(microwatts) / 1e6;
  return device;
}

nlohmann::json query_rocm_smi(const loader::Opened& library, nlohmann::json out) {
  const RsmiApi api = resolve_rsmi(library);
  if (!api.init || !api.num_monitor_devices) {
    out["abi_error"] = "rsmi_init or rsmi_num_monitor_devices is missing";
    return out;
  }
  // The library's own version, not its file name: sonames repeat across releases.
  RsmiVersion version{};
  if (api.version_get && api.version_get(&version) == k_rsmi_success)
    out["version"] = fmt::format("{}.{}.{}", version.major, version.minor, version.patch);
  const RsmiStatus init = api.init(0);
  out["init"] = rsmi_status_name(init);
  if (init != k_rsmi_success) {
    const char* text = nullptr;
    if (api.status_string && api.status_string(init, &text) == k_rsmi_success && text)
      out["init_text"] = text;
    out["count"] = 0;
    return out;
  }
  std::array<char, 256> buffer{};
  if (api.version_str_get &&
      api.version_str_get(k_rsmi_sw_comp_driver, buffer.data(), buffer.size()) == k_rsmi_success)
    out["driver_version"] = text_of(buffer);
  uint32_t count = 0;
  if (const RsmiStatus s = api.num_monitor_devices(&count); s != k_rsmi_success) {
    out["count_status"] = rsmi_status_name(s);
    count = 0;
  }
  out["count"] = count;
  nlohmann::json devices = nlohmann::json::array();
  for (uint32_t i = 0; i < count; ++i)
    devices.push_back(rsmi_device(api, i));
  out["devices"] = devices;
  if (api.shut_down) api.shut_down();
  return out;
}

// ---- AMD SMI --------------------------------------------------------------------------------

AmdsmiApi resolve_amdsmi(const loader::Opened& library) {
  AmdsmiApi api;
  const Resolver get{library};
  get(api.init, "amdsmi_init");
  get(api.shut_down, "amdsmi_shut_down");
  get(api.get_lib_version, "amdsmi_get_lib_version");
  get(api.status_code_to_string, "amdsmi_status_code_to_string");
  get(api.get_socket_handles, "amdsmi_get_socket_handles");
  get(api.get_processor_handles, "amdsmi_get_processor_handles");
  get(api.get_gpu_device_bdf, "amdsmi_get_gpu_device_bdf");
  get(api.get_gpu_asic_info, "amdsmi_get_gpu_asic_info");
  get(api.get_gpu_vram_usage, "amdsmi_get_gpu_vram_usage");
  get(api.get_temp_metric, "amdsmi_get_temp_metric");
  return api;
}

// The library's own name for a status ("AMDSMI_STATUS_NOT_SUPPORTED"), else its number.
std::string amdsmi_status_name(const AmdsmiApi& api, AmdsmiStatus status) {
  const char* text = nullptr;
  if (api.status_code_to_string && api.status_code_to_string(status, &text) == k_amdsmi_success &&
      text)
    return text;
  return "AMDSMI_STATUS_" + std::to_string(status);
}

// Every GPU handle, socket by socket (two-call enumeration: count, then fill).
std::vector<Handle> amdsmi_gpus(const AmdsmiApi& api, nlohmann::json& out) {
  std::vector<Handle> gpus;
  uint32_t sockets = 0;
  if (AmdsmiStatus s = api.get_socket_handles(&sockets, nullptr); s != k_amdsmi_success) {
    out["count_status"] = amdsmi_status_name(api, s);
    return gpus;
  }
  std::vector<Handle> socket_handles(sockets);
  if (sockets == 0 || api.get_socket_handles(&sockets, socket_handles.data()) != k_amdsmi_success)
    return gpus;
  socket_handles.resize(sockets);
  for (Handle socket : socket_handles) {
    uint32_t n = 0;
    if (api.get_processor_handles(socket, &n, nullptr) != k_amdsmi_success || n == 0) continue;
    std::vector<Handle> handles(n);
    if (api.get_processor_handles(socket, &n, handles.data()) != k_amdsmi_success) continue;
    handles.resize(n);
    gpus.insert(gpus.end(), handles.begin(), handles.end());
  }
  return gpus;
}

nlohmann::json amdsmi_device(const AmdsmiApi& api, Handle gpu, std::size_t index) {
  nlohmann::json device = {{"index", index}};
  Recorder<AmdsmiStatus> r{device, k_amdsmi_success, k_amdsmi_not_supported,
                           [&api](AmdsmiStatus s) { return amdsmi_status_name(api, s); }};
  uint64_t bdf = 0;
  if (r.call("bdf", api.get_gpu_device_bdf, gpu, &bdf)) {
    const Bdf b = decode_amdsmi_bdf(bdf);
    device["pci_bdf"] =
        fmt::format("{:04x}:{:02x}:{:02x}.{}", b.domain, b.bus, b.device, b.function);
  }
  if (api.get_gpu_asic_info) {
    auto info = std::make_unique<unsigned char[]>(k_amdsmi_struct_buffer_bytes);
    if (r.call("name", api.get_gpu_asic_info, gpu, info.get())) {
      const char* name = reinterpret_cast<const char*>(info.get());
      const std::size_t length = strnlen(name, k_amdsmi_market_name_min_bytes);
      if (length > 0 && length < k_amdsmi_market_name_min_bytes)
        device["name"] = std::string(name, length);
    }
  }
  AmdsmiVramUsage vram{};
  if (r.call("vram", api.get_gpu_vram_usage, gpu, &vram)) {
    device["vram_total_bytes"] = static_cast<uint64_t>(vram.vram_total) << 20;
    device["vram_used_bytes"] = static_cast<uint64_t>(vram.vram_used) << 20;
  }
  int64_t celsius = 0;
  if (r.call("temperature", api.get_temp_metric, gpu, k_amdsmi_temperature_edge,
             k_amdsmi_temp_current, &celsius))
    device["temperature_c"] = static_cast<double>(celsius);
  return device;
}

nlohmann::json query_amd_smi(const loader::Opened& library, nlohmann::json out) {
  const AmdsmiApi api = resolve_amdsmi(library);
  if (!api.init || !api.get_socket_handles || !api.get_processor_handles) {
    out["abi_error"] = "amdsmi_init, amdsmi_get_socket_handles or amdsmi_get_processor_handles "
                       "is missing";
    return out;
  }
  const AmdsmiStatus init = api.init(k_amdsmi_init_amd_gpus);
  out["init"] = amdsmi_status_name(api, init);
  if (init != k_amdsmi_success) {
    out["count"] = 0;
    return out;
  }
  // Only the build string: amdsmi_version_t's numbers moved in ROCm 7, its `build` did not.
  if (api.get_lib_version) {
    auto version = std::make_unique<unsigned char[]>(k_amdsmi_struct_buffer_bytes);
    if (api.get_lib_version(version.get()) == k_amdsmi_success) {
      const char* build = nullptr;
      std::memcpy(&build, version.get() + k_amdsmi_version_build_offset, sizeof build);
      if (build) out["version"] = std::string(build, strnlen(build, 64));
    }
  }
  const std::vector<Handle> gpus = amdsmi_gpus(api, out);
  out["count"] = gpus.size();
  nlohmann::json devices = nlohmann::json::array();
  for (std::size_t i = 0; i < gpus.size(); ++i)
    devices.push_back(amdsmi_device(api, gpus[i], i));
  out["devices"] = devices;
  if (api.shut_down) api.shut_down();
  return out;
}

} // namespace

nlohmann::json query_smi(const loader::SearchContext& where) {
  const auto amd_smi = loader::open(loader::Library::amd_smi, where);
  nlohmann::json amd_smi_library = library_json(amd_smi, loader::Library::amd_smi, where);
  amd_smi_library["name"] = "amd_smi";
  if (amd_smi) {
    say_calling(*amd_smi);
    nlohmann::json out = query_amd_smi(*amd_smi, {{"library", amd_smi_library}});
    if (!out.contains("abi_error")) return out;
    amd_smi_library["abi_error"] = out["abi_error"]; // too old to use: ROCm SMI answers instead
  }
  const auto rocm_smi = loader::open(loader::Library::rocm_smi, where);
  nlohmann::json library = library_json(rocm_smi, loader::Library::rocm_smi, where);
  library["name"] = "rocm_smi";
  nlohmann::json out = {{"library", library}, {"amd_smi", amd_smi_library}};
  if (!rocm_smi) return out;
  say_calling(*rocm_smi);
  return query_rocm_smi(*rocm_smi, std::move(out));
}

} // namespace sdpa_doctor::devices::enum_worker
