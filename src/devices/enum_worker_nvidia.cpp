// The NVIDIA parts of the enumeration worker: the CUDA driver API (libcuda.so.1) for what torch
// numbers as cuda:N, and NVML (libnvidia-ml.so.1) for the driver version and readings, both opened
// through the loader. The entry points and values are the driver's own stable C ABI (cuda.h and
// nvml.h of CUDA 11 to 13: CUresult and nvmlReturn_t codes, CUdevice_attribute values, the _v2
// entry points that take 64-bit sizes); no vendor header is included.
#include "devices/enum_worker.hpp"

#include <array>
#include <cstddef>
#include <string>
#include <type_traits>

namespace sdpa_doctor::devices::enum_worker {

namespace {

// CUdevice_attribute values.
enum CudaAttribute : int {
  max_shared_memory_per_block = 8,
  warp_size = 10,
  multiprocessor_count = 16,
  integrated = 18,
  pci_bus_id = 33,
  pci_device_id = 34,
  pci_domain_id = 50,
  compute_capability_major = 75,
  compute_capability_minor = 76,
  max_shared_memory_per_multiprocessor = 81,
};

struct CudaApi {
  int (*init)(unsigned) = nullptr;                           // cuInit
  int (*driver_get_version)(int*) = nullptr;                 // cuDriverGetVersion
  int (*device_get_count)(int*) = nullptr;                   // cuDeviceGetCount
  int (*device_get)(int*, int) = nullptr;                    // cuDeviceGet
  int (*device_get_name)(char*, int, int) = nullptr;         // cuDeviceGetName
  int (*device_get_attribute)(int*, int, int) = nullptr;     // cuDeviceGetAttribute
  int (*device_total_mem)(std::size_t*, int) = nullptr;      // cuDeviceTotalMem_v2
  int (*get_error_name)(int, const char**) = nullptr;        // cuGetErrorName
  int (*get_error_string)(int, const char**) = nullptr;      // cuGetErrorString
};

template <typename Slot> void resolve(const loader::Opened& lib, Slot& slot, const char* name) {
  slot = loader::symbol_as<std::remove_reference_t<Slot>>(lib, name);
}

std::string cuda_error(const CudaApi& api, int code) {
  const char* name = nullptr;
  if (api.get_error_name && api.get_error_name(code, &name) == 0 && name) return name;
  return "CUresult " + std::to_string(code);
}

nlohmann::json cuda_device(const CudaApi& api, int ordinal) {
  nlohmann::json device = {{"index", ordinal}};
  int handle = ordinal;
  if (api.device_get && api.device_get(&handle, ordinal) != 0) {
    device["error"] = "cuDeviceGet failed";
    return device;
  }
  std::array<char, 256> name{};
  if (api.device_get_name && api.device_get_name(name.data(), int(name.size()), handle) == 0)
    device["name"] = text_of(name);
  std::size_t total = 0;
  if (api.device_total_mem && api.device_total_mem(&total, handle) == 0)
    device["total_mem_bytes"] = static_cast<unsigned long long>(total);
  const auto attribute = [&](const char* key, CudaAttribute which) {
    int value = 0;
    if (api.device_get_attribute && api.device_get_attribute(&value, which, handle) == 0)
      device[key] = value;
  };
  attribute("cc_major", compute_capability_major);
  attribute("cc_minor", compute_capability_minor);
  attribute("multiprocessor_count", multiprocessor_count);
  attribute("warp_size", warp_size);
  attribute("shared_mem_per_block", max_shared_memory_per_block);
  attribute("shared_mem_per_multiprocessor", max_shared_memory_per_multiprocessor);
  attribute("integrated", integrated);
  attribute("pci_domain", pci_domain_id);
  attribute("pci_bus", pci_bus_id);
  attribute("pci_device", pci_device_id);
  return device;
}

// nvmlMemory_t and the leading fields of nvmlPciInfo_t, as nvml.h lays them out.
struct NvmlMemory {
  unsigned long long total, free, used;
};
struct NvmlPciInfo {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};

struct NvmlApi {
  int (*init)() = nullptr;                                         // nvmlInit_v2
  int (*shutdown)() = nullptr;                                     // nvmlShutdown
  const char* (*error_string)(int) = nullptr;                      // nvmlErrorString
  int (*driver_version)(char*, unsigned) = nullptr;                // nvmlSystemGetDriverVersion
  int (*cuda_driver_version)(int*) = nullptr;                      // nvmlSystemGetCudaDriverVersion_v2
  int (*device_count)(unsigned*) = nullptr;                        // nvmlDeviceGetCount_v2
  int (*handle_by_index)(unsigned, void**) = nullptr;              // nvmlDeviceGetHandleByIndex_v2
  int (*name)(void*, char*, unsigned) = nullptr;                   // nvmlDeviceGetName
  int (*pci_info)(void*, NvmlPciInfo*) = nullptr;                  // nvmlDeviceGetPciInfo_v3
  int (*memory_info)(void*, NvmlMemory*) = nullptr;                // nvmlDeviceGetMemoryInfo
  int (*temperature)(void*, int, unsigned*) = nullptr;             // nvmlDeviceGetTemperature
  int (*power_usage)(void*, unsigned*) = nullptr;                  // nvmlDeviceGetPowerUsage (mW)
  int (*vbios_version)(void*, char*, unsigned) = nullptr;          // nvmlDeviceGetVbiosVersion
  int (*compute_capability)(void*, int*, int*) = nullptr;          // nvmlDeviceGetCudaComputeCapability
};

constexpr int k_nvml_success = 0;
constexpr int k_nvml_not_supported = 3;

std::string nvml_error(const NvmlApi& api, int code) {
  const char* text = api.error_string ? api.error_string(code) : nullptr;
  return text ? text : "nvmlReturn_t " + std::to_string(code);
}

nlohmann::json nvml_device(const NvmlApi& api, unsigned index) {
  nlohmann::json device = {{"index", index}};
  void* handle = nullptr;
  if (const int rc = api.handle_by_index(index, &handle); rc != k_nvml_success) {
    device["error"] = "nvmlDeviceGetHandleByIndex: " + nvml_error(api, rc);
    return device;
  }
  nlohmann::json errors = nlohmann::json::object();
  // "not supported" is an ordinary answer (a reading this board lacks): left out, not an error.
  const auto note = [&](const char* what, int rc) {
    if (rc != k_nvml_success && rc != k_nvml_not_supported) errors[what] = nvml_error(api, rc);
    return rc == k_nvml_success;
  };
  std::array<char, 96> name{};
  if (api.name && note("name", api.name(handle, name.data(), unsigned(name.size()))))
    device["name"] = text_of(name);
  NvmlPciInfo pci{};
  if (api.pci_info && note("pci", api.pci_info(handle, &pci)))
    device["pci_bus_id"] = text_of(std::to_array(pci.bus_id));
  NvmlMemory memory{};
  if (api.memory_info && note("memory", api.memory_info(handle, &memory))) {
    device["memory_total_bytes"] = memory.total;
    device["memory_used_bytes"] = memory.used;
  }
  unsigned temperature = 0;
  if (api.temperature && note("temperature", api.temperature(handle, 0, &temperature)))
    device["temperature_c"] = temperature;
  unsigned milliwatts = 0;
  if (api.power_usage && note("power", api.power_usage(handle, &milliwatts)))
    device["power_w"] = milliwatts / 1000.0;
  std::array<char, 64> vbios{};
  if (api.vbios_version && note("vbios", api.vbios_version(handle, vbios.data(), unsigned(vbios.size()))))
    device["vbios"] = text_of(vbios);
  int major = 0, minor = 0;
  if (api.compute_capability && note("compute_capability", api.compute_capability(handle, &major, &minor))) {
    device["cc_major"] = major;
    device["cc_minor"] = minor;
  }
  if (!errors.empty()) device["errors"] = errors;
  return device;
}

} // namespace

nlohmann::json rtc_json(loader::Library library, const char* version_function,
                        const loader::SearchContext& where) {
  const auto opened = loader::open(library, where);
  nlohmann::json out = library_json(opened, library, where);
  if (!opened) return out;
  // nvrtcVersion / hiprtcVersion(int* major, int* minor): asks nothing of a device.
  using Version = int (*)(int*, int*);
  int major = 0, minor = 0;
  if (const auto version = loader::symbol_as<Version>(*opened, version_function);
      version && version(&major, &minor) == 0)
    out["version"] = std::to_string(major) + "." + std::to_string(minor);
  return out;
}

nlohmann::json query_cuda(const loader::SearchContext& where) {
  const auto opened = loader::open(loader::Library::cuda_driver, where);
  nlohmann::json out = {{"library", library_json(opened, loader::Library::cuda_driver, where)}};
  // The run-time compiler of our own kernels: found, and its version asked, with or without a GPU.
  out["nvrtc"] = rtc_json(loader::Library::nvrtc, "nvrtcVersion", where);
  if (!opened) return out;
  say_calling(*opened);
  CudaApi api;
  resolve(*opened, api.init, "cuInit");
  resolve(*opened, api.driver_get_version, "cuDriverGetVersion");
  resolve(*opened, api.device_get_count, "cuDeviceGetCount");
  resolve(*opened, api.device_get, "cuDeviceGet");
  resolve(*opened, api.device_get_name, "cuDeviceGetName");
  resolve(*opened, api.device_get_attribute, "cuDeviceGetAttribute");
  resolve(*opened, api.device_total_mem, "cuDeviceTotalMem_v2");
  resolve(*opened, api.get_error_name, "cuGetErrorName");
  resolve(*opened, api.get_error_string, "cuGetErrorString");
  if (!api.init || !api.device_get_count) {
    out["abi_error"] = "cuInit or cuDeviceGetCount is missing";
    return out;
  }
  int version = 0;
  if (api.driver_get_version && api.driver_get_version(&version) == 0)
    out["driver_version"] = version;
  const int init = api.init(0);
  out["init"] = cuda_error(api, init);
  int count = 0;
  if (init != 0) {
    out["count"] = 0;
    out["error"] = cuda_error(api, init);
    const char* text = nullptr;
    if (api.get_error_string && api.get_error_string(init, &text) == 0 && text)
      out["error_text"] = text;
    return out;
  }
  if (const int rc = api.device_get_count(&count); rc != 0) {
    out["count"] = 0;
    out["error"] = cuda_error(api, rc);
    return out;
  }
  out["count"] = count;
  nlohmann::json devices = nlohmann::json::array();
  for (int i = 0; i < count; ++i) devices.push_back(cuda_device(api, i));
  out["devices"] = devices;
  return out;
}

nlohmann::json query_nvml(const loader::SearchContext& where) {
  const auto opened = loader::open(loader::Library::nvml, where);
  nlohmann::json out = {{"library", library_json(opened, loader::Library::nvml, where)}};
  if (!opened) return out;
  say_calling(*opened);
  NvmlApi api;
  resolve(*opened, api.init, "nvmlInit_v2");
  resolve(*opened, api.shutdown, "nvmlShutdown");
  resolve(*opened, api.error_string, "nvmlErrorString");
  resolve(*opened, api.driver_version, "nvmlSystemGetDriverVersion");
  resolve(*opened, api.cuda_driver_version, "nvmlSystemGetCudaDriverVersion_v2");
  resolve(*opened, api.device_count, "nvmlDeviceGetCount_v2");
  resolve(*opened, api.handle_by_index, "nvmlDeviceGetHandleByIndex_v2");
  resolve(*opened, api.name, "nvmlDeviceGetName");
  resolve(*opened, api.pci_info, "nvmlDeviceGetPciInfo_v3");
  resolve(*opened, api.memory_info, "nvmlDeviceGetMemoryInfo");
  resolve(*opened, api.temperature, "nvmlDeviceGetTemperature");
  resolve(*opened, api.power_usage, "nvmlDeviceGetPowerUsage");
  resolve(*opened, api.vbios_version, "nvmlDeviceGetVbiosVersion");
  resolve(*opened, api.compute_capability, "nvmlDeviceGetCudaComputeCapability");
  if (!api.init || !api.device_count || !api.handle_by_index) {
    out["abi_error"] = "nvmlInit_v2, nvmlDeviceGetCount_v2 or nvmlDeviceGetHandleByIndex_v2 is missing";
    return out;
  }
  const int init = api.init();
  out["init"] = nvml_error(api, init);
  if (init != k_nvml_success) {
    out["error"] = nvml_error(api, init);
    return out;
  }
  std::array<char, 96> driver{};
  if (api.driver_version && api.driver_version(driver.data(), unsigned(driver.size())) == k_nvml_success)
    out["driver_version"] = text_of(driver);
  int cuda = 0;
  if (api.cuda_driver_version && api.cuda_driver_version(&cuda) == k_nvml_success)
    out["cuda_driver_version"] = cuda;
  unsigned count = 0;
  if (const int rc = api.device_count(&count); rc != k_nvml_success) {
    out["count"] = 0;
    out["error"] = nvml_error(api, rc);
  } else {
    out["count"] = count;
    nlohmann::json devices = nlohmann::json::array();
    for (unsigned i = 0; i < count; ++i) devices.push_back(nvml_device(api, i));
    out["devices"] = devices;
  }
  if (api.shutdown) api.shutdown();
  return out;
}

} // namespace sdpa_doctor::devices::enum_worker
