// The HIP part of the enumeration worker: the runtime opened through the loader, asked with
// calls whose ABI has not changed (attributes, name, PCI id), and hipDeviceProp_t read only for
// gcnArchName, in the layout of the runtime's major version.
#include "devices/enum_worker.hpp"
#include "devices/hip_abi.hpp"

#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

namespace sdpa_doctor::devices::enum_worker {

namespace {

using hip_abi::Api;
using hip_abi::Error;

Api resolve(const loader::Opened& hip, const char* props_function) {
  Api api;
  const auto get = [&](auto& slot, const char* name) {
    slot = loader::symbol_as<std::remove_reference_t<decltype(slot)>>(hip, name);
  };
  get(api.runtime_get_version, "hipRuntimeGetVersion");
  get(api.driver_get_version, "hipDriverGetVersion");
  get(api.init, "hipInit");
  get(api.get_device_count, "hipGetDeviceCount");
  get(api.get_error_name, "hipGetErrorName");
  get(api.get_error_string, "hipGetErrorString");
  get(api.device_get, "hipDeviceGet");
  get(api.device_get_name, "hipDeviceGetName");
  get(api.device_get_pci_bus_id, "hipDeviceGetPCIBusId");
  get(api.device_total_mem, "hipDeviceTotalMem");
  get(api.device_get_attribute, "hipDeviceGetAttribute");
  if (props_function) get(api.get_device_properties, props_function);
  return api;
}

// The one place a hipError_t becomes text.
std::string error_name(const Api& api, Error error) {
  const char* name = api.get_error_name ? api.get_error_name(error) : nullptr;
  return name ? name : "hipError" + std::to_string(error);
}

nlohmann::json device_json(const Api& api, int index,
                           const std::optional<hip_abi::PropsLayout>& layout) {
  nlohmann::json device = {{"index", index}};
  int handle = index;
  if (api.device_get && api.device_get(&handle, index) != hip_abi::k_success) handle = index;
  std::array<char, 256> name{};
  if (api.device_get_name &&
      api.device_get_name(name.data(), name.size(), handle) == hip_abi::k_success)
    device["name"] = text_of(name);
  std::array<char, 64> pci{};
  if (api.device_get_pci_bus_id &&
      api.device_get_pci_bus_id(pci.data(), pci.size(), index) == hip_abi::k_success)
    device["pci_bus_id"] = text_of(pci);
  std::size_t total = 0;
  if (api.device_total_mem && api.device_total_mem(&total, handle) == hip_abi::k_success)
    device["totalGlobalMem"] = static_cast<unsigned long long>(total);
  const auto attribute = [&](const char* key, hip_abi::Attribute which) {
    int value = 0;
    if (api.device_get_attribute &&
        api.device_get_attribute(&value, which, index) == hip_abi::k_success)
      device[key] = value;
  };
  attribute("multiProcessorCount", hip_abi::multiprocessor_count);
  attribute("warpSize", hip_abi::warp_size);
  attribute("sharedMemPerBlock", hip_abi::max_shared_memory_per_block);
  attribute("maxSharedMemoryPerMultiProcessor", hip_abi::max_shared_memory_per_multiprocessor);
  int integrated = 0;
  if (api.device_get_attribute &&
      api.device_get_attribute(&integrated, hip_abi::integrated, index) == hip_abi::k_success)
    device["integrated"] = integrated != 0;

  if (!layout || !api.get_device_properties) return device; // the part's props_abi says why
  // Zeroed and larger than any layout, so a runtime that writes more than we expect stays inside.
  auto props = std::make_unique<unsigned char[]>(hip_abi::k_props_buffer_bytes);
  const Error status = api.get_device_properties(props.get(), index);
  if (status != hip_abi::k_success) {
    device["arch_error"] = std::string(layout->function) + ": " + error_name(api, status);
    return device;
  }
  const auto arch = hip_abi::read_arch_name(props.get(), hip_abi::k_props_buffer_bytes, *layout,
                                            device.value("name", ""));
  if (arch.problem.empty())
    device["gcnArchName"] = arch.value;
  else
    device["arch_error"] = arch.problem;
  return device;
}

} // namespace

nlohmann::json query_hip(const loader::SearchContext& where) {
  const auto opened = loader::open(loader::Library::hip_runtime, where);
  nlohmann::json out = {{"library", library_json(opened, loader::Library::hip_runtime, where)}};
  out["hiprtc"] = rtc_json(loader::Library::hiprtc, "hiprtcVersion", where);
  if (!opened) return out;

  say_calling(*opened);
  const Api probe = resolve(*opened, nullptr);
  if (!probe.runtime_get_version || !probe.init || !probe.get_device_count) {
    out["abi_error"] = "hipRuntimeGetVersion, hipInit or hipGetDeviceCount is missing";
    return out;
  }
  int runtime_version = 0;
  if (probe.runtime_get_version(&runtime_version) == hip_abi::k_success)
    out["runtime_version"] = runtime_version;
  const auto layout = hip_abi::props_layout(hip_abi::major_of(runtime_version));
  const Api api = resolve(*opened, layout ? layout->function : nullptr);
  if (!layout)
    out["abi_error"] = "hipDeviceProp_t layout of HIP " +
                       std::to_string(hip_abi::major_of(runtime_version)) +
                       " is not known to this doctor";
  else if (!api.get_device_properties)
    out["abi_error"] = std::string(layout->function) + " is missing";
  out["props_abi"] = layout && api.get_device_properties
                         ? std::string(layout->function) + ", " + layout->label
                         : std::string("unknown");

  const Error init = api.init(0);
  out["init"] = error_name(api, init);
  int driver_version = 0;
  if (api.driver_get_version && api.driver_get_version(&driver_version) == hip_abi::k_success)
    out["driver_version"] = driver_version;

  int count = 0;
  const Error count_status = api.get_device_count(&count);
  out["count_status"] = error_name(api, count_status);
  if (count_status != hip_abi::k_success) {
    out["count"] = 0;
    out["error"] = error_name(api, count_status);
    if (const char* text = api.get_error_string ? api.get_error_string(count_status) : nullptr)
      out["error_text"] = text;
  } else {
    out["count"] = count;
    nlohmann::json devices = nlohmann::json::array();
    for (int i = 0; i < count; ++i)
      devices.push_back(device_json(api, i, layout));
    out["devices"] = devices;
  }
  // Checked last: initialising may load more libraries, and a second runtime would come then.
  out["mapped"] = loader::mapped_files("libamdhip64");
  return out;
}

} // namespace sdpa_doctor::devices::enum_worker
