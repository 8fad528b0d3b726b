// A stand-in CUDA driver (libcuda.so.1) for the enumeration tests: one GPU per entry of
// FAKE_NVIDIA_GPUS ("sm_90,sm_86"; unset: one sm_90), each an "NVIDIA Fake sm_XY" with 80 GiB at
// PCI 0000:NN:00.0 (NN = 0x41 + its ordinal); FAKE_NVIDIA_GPUS="" answers cuInit with
// CUDA_ERROR_NO_DEVICE. Only the entry points the enumeration worker resolves.
#include "fake_nvidia_gpus.hpp"

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {
constexpr int k_success = 0, k_invalid_value = 1, k_no_device = 100, k_invalid_device = 101;

std::vector<int> gpus() { return fake_nvidia_gpus(); }
bool valid(int d) { return d >= 0 && d < int(gpus().size()); }
} // namespace

EXPORT int cuGetErrorName(int e, const char** name) {
  *name = e == k_success ? "CUDA_SUCCESS" : e == k_no_device ? "CUDA_ERROR_NO_DEVICE"
                                                            : "CUDA_ERROR_INVALID_DEVICE";
  return k_success;
}
EXPORT int cuGetErrorString(int e, const char** text) {
  *text = e == k_no_device ? "no CUDA-capable device is detected" : "fake error";
  return k_success;
}
EXPORT int cuInit(unsigned) { return gpus().empty() ? k_no_device : k_success; }
EXPORT int cuDriverGetVersion(int* v) { return *v = 13000, k_success; }
EXPORT int cuDeviceGetCount(int* n) { return *n = int(gpus().size()), k_success; }
EXPORT int cuDeviceGet(int* d, int ordinal) {
  return valid(ordinal) ? (*d = ordinal, k_success) : k_invalid_device;
}
EXPORT int cuDeviceGetName(char* out, int len, int d) {
  if (!valid(d)) return k_invalid_device;
  std::snprintf(out, std::size_t(len), "NVIDIA Fake sm_%d", gpus()[std::size_t(d)]);
  return k_success;
}
EXPORT int cuDeviceTotalMem_v2(std::size_t* bytes, int d) {
  return valid(d) ? (*bytes = std::size_t{80} << 30, k_success) : k_invalid_device;
}
EXPORT int cuDeviceGetAttribute(int* value, int attribute, int d) {
  if (!valid(d)) return k_invalid_device;
  const int sm = gpus()[std::size_t(d)];
  switch (attribute) {
  case 8: *value = 49152; return k_success;       // shared memory per block
  case 10: *value = 32; return k_success;         // warp size
  case 16: *value = 132; return k_success;        // multiprocessors
  case 18: *value = 0; return k_success;          // integrated
  case 33: *value = 0x41 + d; return k_success;   // PCI bus
  case 34: *value = 0; return k_success;          // PCI device
  case 50: *value = 0; return k_success;          // PCI domain
  case 75: *value = sm / 10; return k_success;    // compute capability major
  case 76: *value = sm % 10; return k_success;    // compute capability minor
  case 81: *value = 233472; return k_success;     // shared memory per multiprocessor
  default: return k_invalid_value;
  }
}
