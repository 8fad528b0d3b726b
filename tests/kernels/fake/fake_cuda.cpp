// A fake CUDA driver (installed by the tests as libcuda.so.1, CUDA 13.0) with FAKE_GPU_COUNT
// devices of arch FAKE_GPU_ARCH (default sm_90), for the NVIDIA path of the reference worker where
// no NVIDIA GPU is. It takes what the real NVRTC made: a cubin whose ELF header names its sm, or
// PTX for an arch no newer than its own; a kernel must be named in the image; the kernels run
// emulated.
#include "fake_device.hpp"

#include <cstdint>
#include <cstring>
#include <list>
#include <map>
#include <string>

namespace {

enum : int {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_SUPPORTED = 801,
};

int sm() { return std::atoi(fake::env("FAKE_GPU_ARCH", "sm_90").c_str() + 3); }

struct Module {
  std::string image;
};
// A driver owns the modules it loaded until the process ends, as the real one does.
std::list<Module> g_modules;
std::map<void*, fake::Kernel> g_functions;

// A cubin's ELF e_flags carry its sm: bits 8-15 since CUDA 12.x, bits 0-7 before.
bool image_fits(const std::string& image) {
  if (image.rfind("\x7f" "ELF", 0) == 0) {
    if (image.size() < 0x34) return false;
    uint32_t flags = 0;
    std::memcpy(&flags, image.data() + 0x30, 4);
    return int((flags >> 8) & 0xff) == sm() || int(flags & 0xff) == sm();
  }
  const size_t target = image.find(".target sm_");
  return target != std::string::npos && std::atoi(image.c_str() + target + 11) <= sm();
}

} // namespace

extern "C" {

int cuGetErrorName(int error, const char** name) {
  switch (error) {
  case CUDA_SUCCESS: *name = "CUDA_SUCCESS"; break;
  case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; break;
  case CUDA_ERROR_NO_DEVICE: *name = "CUDA_ERROR_NO_DEVICE"; break;
  case CUDA_ERROR_INVALID_DEVICE: *name = "CUDA_ERROR_INVALID_DEVICE"; break;
  case CUDA_ERROR_INVALID_IMAGE: *name = "CUDA_ERROR_INVALID_IMAGE"; break;
  case CUDA_ERROR_NO_BINARY_FOR_GPU: *name = "CUDA_ERROR_NO_BINARY_FOR_GPU"; break;
  case CUDA_ERROR_NOT_FOUND: *name = "CUDA_ERROR_NOT_FOUND"; break;
  default: *name = "CUDA_ERROR_UNKNOWN";
  }
  return CUDA_SUCCESS;
}

int cuInit(unsigned) { return fake::device_count() > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE; }
// NVRTC itself opens libcuda.so.1 and asks for the driver's private tables: there are none here,
// which it takes as a driver that offers none.
int cuGetExportTable(const void** table, const void*) {
  *table = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}
int cuDriverGetVersion(int* version) {
  *version = 13000;
  return CUDA_SUCCESS;
}
int cuDeviceGetCount(int* count) {
  *count = fake::device_count();
  return CUDA_SUCCESS;
}
int cuDeviceGet(int* device, int ordinal) {
  if (ordinal < 0 || ordinal >= fake::device_count()) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}
int cuDeviceGetName(char* name, int length, int) {
  std::snprintf(name, size_t(length), "Fake NVIDIA (sm_%d)", sm());
  return CUDA_SUCCESS;
}
int cuDeviceGetAttribute(int* value, int attribute, int) {
  if (attribute == 75) *value = sm() / 10; // compute capability major
  else if (attribute == 76) *value = sm() % 10;
  else return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}
int cuDevicePrimaryCtxRetain(void** context, int device) {
  static int contexts[64];
  *context = &contexts[device & 63];
  return CUDA_SUCCESS;
}
int cuCtxSetCurrent(void*) { return CUDA_SUCCESS; }
int cuCtxSynchronize() { return CUDA_SUCCESS; }

int cuMemAlloc_v2(unsigned long long* ptr, size_t bytes) {
  void* p = std::malloc(bytes);
  *ptr = reinterpret_cast<uintptr_t>(p);
  return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
int cuMemFree_v2(unsigned long long ptr) {
  std::free(reinterpret_cast<void*>(uintptr_t(ptr)));
  return CUDA_SUCCESS;
}
int cuMemcpyHtoD_v2(unsigned long long dst, const void* src, size_t bytes) {
  std::memcpy(reinterpret_cast<void*>(uintptr_t(dst)), src, bytes);
  return CUDA_SUCCESS;
}
int cuMemcpyDtoH_v2(void* dst, unsigned long long src, size_t bytes) {
  std::memcpy(dst, reinterpret_cast<const void*>(uintptr_t(src)), bytes);
  return CUDA_SUCCESS;
}
int cuMemsetD8_v2(unsigned long long dst, unsigned char value, size_t bytes) {
  std::memset(reinterpret_cast<void*>(uintptr_t(dst)), value, bytes);
  return CUDA_SUCCESS;
}

int cuModuleLoadDataEx(void** module, const void* image, unsigned, int*, void**) {
  // A cubin is ELF (binary: its size is in its headers); PTX is a NUL-terminated text.
  const char* bytes = static_cast<const char*>(image);
  std::string text;
  if (std::memcmp(bytes, "\x7f" "ELF", 4) == 0) {
    uint64_t shoff = 0;
    uint16_t shentsize = 0, shnum = 0;
    std::memcpy(&shoff, bytes + 0x28, 8);
    std::memcpy(&shentsize, bytes + 0x3a, 2);
    std::memcpy(&shnum, bytes + 0x3c, 2);
    text.assign(bytes, size_t(shoff + uint64_t(shentsize) * shnum));
  } else {
    text = bytes;
  }
  if (!image_fits(text)) return CUDA_ERROR_NO_BINARY_FOR_GPU;
  *module = &g_modules.emplace_back(Module{text});
  return CUDA_SUCCESS;
}
int cuModuleGetFunction(void** function, void* module, const char* name) {
  const std::string& image = static_cast<Module*>(module)->image;
  fake::Entry entry = fake::find_kernel(name);
  if (image.find(name) == std::string::npos || !entry) return CUDA_ERROR_NOT_FOUND;
  *function = reinterpret_cast<void*>(entry);
  g_functions[*function] = fake::Kernel{name, entry};
  return CUDA_SUCCESS;
}
int cuLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, void*, void** args, void**) {
  const auto it = g_functions.find(function);
  // Without opting in (cuFuncSetAttribute) a block gets at most 48 KiB of shared memory.
  if (it == g_functions.end() || bx * by * bz > 1024 || shared > 48 * 1024 || gy > 65535 ||
      gz != 1)
    return CUDA_ERROR_INVALID_VALUE;
  fake::launch(it->second, {gx, gy, gz}, {bx, by, bz}, shared, args);
  return CUDA_SUCCESS;
}

SDPA_FAKE_EVENT_CALLS(cuEventCreate(void** event, unsigned), cuEventRecord, cuEventSynchronize,
                      cuEventElapsedTime_v2, cuEventDestroy_v2, CUDA_SUCCESS)

} // extern "C"
