// A stand-in HIP 6 runtime with one GPU, built only for the tests: it answers the entry points the
// enumeration worker resolves, with hipDeviceProp_t in the R0600 layout (gcnArchName at byte
// 1160), so the worker's path for a machine with a GPU runs here, where there is none. It proves
// the worker's plumbing, not HIP's ABI: that is hip_abi.hpp's, checked against HIP's headers.
#include <cstddef>
#include <cstdio>
#include <cstring>

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {
constexpr int k_success = 0, k_invalid_device = 101;
constexpr const char* k_name = "AMD Radeon RX 9070 XT";
} // namespace

EXPORT int hipRuntimeGetVersion(int* v) { return *v = 60443482, k_success; }
EXPORT int hipDriverGetVersion(int* v) { return *v = 60443482, k_success; }
EXPORT int hipInit(unsigned) { return k_success; }
EXPORT int hipGetDeviceCount(int* n) { return *n = 1, k_success; }
EXPORT const char* hipGetErrorName(int e) { return e == 0 ? "hipSuccess" : "hipErrorInvalidDevice"; }
EXPORT const char* hipGetErrorString(int e) { return hipGetErrorName(e); }
EXPORT int hipDeviceGet(int* d, int i) { return i == 0 ? (*d = 0, k_success) : k_invalid_device; }
EXPORT int hipDeviceGetName(char* out, int len, int d) {
  if (d != 0) return k_invalid_device;
  std::snprintf(out, static_cast<std::size_t>(len), "%s", k_name);
  return k_success;
}
EXPORT int hipDeviceGetPCIBusId(char* out, int len, int d) {
  if (d != 0) return k_invalid_device;
  std::snprintf(out, static_cast<std::size_t>(len), "0000:03:00.0");
  return k_success;
}
EXPORT int hipDeviceTotalMem(std::size_t* bytes, int d) {
  return d == 0 ? (*bytes = std::size_t{17095983104}, k_success) : k_invalid_device;
}
EXPORT int hipDeviceGetAttribute(int* value, int attribute, int d) {
  if (d != 0) return k_invalid_device;
  switch (attribute) {
  case 16: *value = 0; return k_success;      // integrated
  case 63: *value = 32; return k_success;     // multiprocessor count
  case 74: *value = 65536; return k_success;  // shared memory per block
  case 87: *value = 32; return k_success;     // warp size
  case 10002: *value = 65536; return k_success;
  default: return 1; // hipErrorInvalidValue
  }
}
EXPORT int hipGetDevicePropertiesR0600(void* props, int d) {
  if (d != 0) return k_invalid_device;
  auto* bytes = static_cast<char*>(props);
  std::memset(bytes, 0, 1472);
  std::strcpy(bytes, k_name);
  std::strcpy(bytes + 1160, "gfx1201");
  return k_success;
}
