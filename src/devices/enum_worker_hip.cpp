#include "devices/enum_worker.hpp"

#include <hip/hip_runtime_api.h>

#include <string>

namespace sdpa_doctor::devices::enum_worker {

namespace {

// The one place a hipError_t becomes text.
std::string error_name(hipError_t error) {
  const char* name = hipGetErrorName(error);
  return name ? name : "hipError" + std::to_string(static_cast<int>(error));
}

} // namespace

nlohmann::json query_hip() {
  nlohmann::json out = {{"built", true}, {"header_version", HIP_VERSION}};
  int runtime_version = 0;
  if (hipRuntimeGetVersion(&runtime_version) == hipSuccess) out["runtime_version"] = runtime_version;

  const hipError_t init = hipInit(0);
  out["init"] = error_name(init);
  int driver_version = 0;
  if (hipDriverGetVersion(&driver_version) == hipSuccess) out["driver_version"] = driver_version;

  int count = 0;
  const hipError_t count_status = hipGetDeviceCount(&count);
  out["count_status"] = error_name(count_status);
  if (count_status != hipSuccess) {
    out["count"] = 0;
    out["error"] = error_name(count_status);
    if (const char* text = hipGetErrorString(count_status)) out["error_text"] = text;
    return out;
  }
  out["count"] = count;
  nlohmann::json devices = nlohmann::json::array();
  for (int i = 0; i < count; ++i) {
    hipDeviceProp_t props{};
    const hipError_t status = hipGetDeviceProperties(&props, i);
    nlohmann::json device = {{"index", i}};
    if (status != hipSuccess) {
      device["error"] = error_name(status);
      devices.push_back(device);
      continue;
    }
    device["name"] = std::string(props.name);
    device["gcnArchName"] = std::string(props.gcnArchName);
    device["totalGlobalMem"] = static_cast<unsigned long long>(props.totalGlobalMem);
    device["multiProcessorCount"] = props.multiProcessorCount;
    device["warpSize"] = props.warpSize;
    device["sharedMemPerBlock"] = static_cast<unsigned long long>(props.sharedMemPerBlock);
    device["maxSharedMemoryPerMultiProcessor"] =
        static_cast<unsigned long long>(props.maxSharedMemoryPerMultiProcessor);
    device["pciDomainID"] = props.pciDomainID;
    device["pciBusID"] = props.pciBusID;
    device["pciDeviceID"] = props.pciDeviceID;
    device["integrated"] = props.integrated != 0;
    devices.push_back(device);
  }
  out["devices"] = devices;
  return out;
}

} // namespace sdpa_doctor::devices::enum_worker
