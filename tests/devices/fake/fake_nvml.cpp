// A stand-in NVML (libnvidia-ml.so.1) for the enumeration tests: the GPUs of FAKE_NVIDIA_GPUS as
// fake_cuda_driver.cpp lists them (same PCI addresses), driver 580.65.06 for CUDA 13.0, 1 GiB of
// each in use, 41 C, 70.5 W; the VBIOS is "not supported" (an ordinary answer). Only the entry
// points the enumeration worker resolves.
#include "fake_nvidia_gpus.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {
constexpr int k_success = 0, k_invalid_argument = 2, k_not_supported = 3;

std::vector<int> gpus() { return fake_nvidia_gpus(); }
// A handle is the ordinal plus one, so that none is null.
int ordinal(void* handle) { return int(reinterpret_cast<std::intptr_t>(handle)) - 1; }
bool valid(void* handle) { return ordinal(handle) >= 0 && ordinal(handle) < int(gpus().size()); }

struct PciInfo {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
struct Memory {
  unsigned long long total, free, used;
};
} // namespace

EXPORT int nvmlInit_v2() { return k_success; }
EXPORT int nvmlShutdown() { return k_success; }
EXPORT const char* nvmlErrorString(int e) {
  return e == k_success ? "Success" : e == k_not_supported ? "Not Supported" : "Invalid Argument";
}
EXPORT int nvmlSystemGetDriverVersion(char* out, unsigned len) {
  std::snprintf(out, len, "580.65.06");
  return k_success;
}
EXPORT int nvmlSystemGetCudaDriverVersion_v2(int* v) { return *v = 13000, k_success; }
EXPORT int nvmlDeviceGetCount_v2(unsigned* n) { return *n = unsigned(gpus().size()), k_success; }
EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** handle) {
  if (i >= gpus().size()) return k_invalid_argument;
  *handle = reinterpret_cast<void*>(std::intptr_t(i) + 1);
  return k_success;
}
EXPORT int nvmlDeviceGetName(void* h, char* out, unsigned len) {
  if (!valid(h)) return k_invalid_argument;
  std::snprintf(out, len, "NVIDIA Fake sm_%d", gpus()[std::size_t(ordinal(h))]);
  return k_success;
}
EXPORT int nvmlDeviceGetPciInfo_v3(void* h, PciInfo* pci) {
  if (!valid(h)) return k_invalid_argument;
  std::memset(pci, 0, sizeof *pci);
  pci->bus = unsigned(0x41 + ordinal(h));
  std::snprintf(pci->bus_id, sizeof pci->bus_id, "00000000:%02X:00.0", pci->bus);
  return k_success;
}
EXPORT int nvmlDeviceGetMemoryInfo(void* h, Memory* m) {
  if (!valid(h)) return k_invalid_argument;
  m->total = 80ull << 30;
  m->used = 1ull << 30;
  m->free = m->total - m->used;
  return k_success;
}
EXPORT int nvmlDeviceGetTemperature(void* h, int, unsigned* c) {
  return valid(h) ? (*c = 41, k_success) : k_invalid_argument;
}
EXPORT int nvmlDeviceGetPowerUsage(void* h, unsigned* mw) {
  return valid(h) ? (*mw = 70500, k_success) : k_invalid_argument;
}
EXPORT int nvmlDeviceGetVbiosVersion(void*, char*, unsigned) { return k_not_supported; }
EXPORT int nvmlDeviceGetCudaComputeCapability(void* h, int* major, int* minor) {
  if (!valid(h)) return k_invalid_argument;
  const int sm = gpus()[std::size_t(ordinal(h))];
  *major = sm / 10;
  *minor = sm % 10;
  return k_success;
}
