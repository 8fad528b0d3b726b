// A fake HIP runtime (installed by the tests as libamdhip64.so.7) with FAKE_GPU_COUNT devices of
// arch FAKE_GPU_ARCH (default gfx1201), for the AMD path of the reference worker where no AMD GPU
// is: it loads only what fake_hiprtc.cpp compiled for its arch, and runs the emulated kernels.
#include "fake_device.hpp"

#include <cstring>
#include <list>
#include <map>
#include <string>

namespace {

enum : int {
  hipSuccess = 0,
  hipErrorInvalidValue = 1,
  hipErrorInvalidDevice = 101,
  hipErrorNoDevice = 100,
  hipErrorInvalidImage = 200,
  hipErrorNoBinaryForGpu = 209,
  hipErrorNotFound = 500,
};

std::string arch() { return fake::env("FAKE_GPU_ARCH", "gfx1201"); }

struct Module {
  std::string image;
};
// A runtime owns the modules it loaded until the process ends, as the real one does.
std::list<Module> g_modules;
std::map<void*, fake::Kernel> g_functions;

} // namespace

extern "C" {

const char* hipGetErrorName(int error) {
  switch (error) {
  case hipSuccess: return "hipSuccess";
  case hipErrorInvalidValue: return "hipErrorInvalidValue";
  case hipErrorNoDevice: return "hipErrorNoDevice";
  case hipErrorInvalidDevice: return "hipErrorInvalidDevice";
  case hipErrorInvalidImage: return "hipErrorInvalidImage";
  case hipErrorNoBinaryForGpu: return "hipErrorNoBinaryForGpu";
  case hipErrorNotFound: return "hipErrorNotFound";
  }
  return "hipErrorUnknown";
}

int hipInit(unsigned) { return fake::device_count() > 0 ? hipSuccess : hipErrorNoDevice; }
int hipRuntimeGetVersion(int* version) {
  *version = 70100000; // 7.1.0 as HIP encodes it
  return hipSuccess;
}
int hipGetDeviceCount(int* count) {
  *count = fake::device_count();
  return *count > 0 ? hipSuccess : hipErrorNoDevice;
}
int hipSetDevice(int device) {
  return device >= 0 && device < fake::device_count() ? hipSuccess : hipErrorInvalidDevice;
}
int hipDeviceGetName(char* name, int length, int) {
  std::snprintf(name, size_t(length), "Fake Radeon (%s)", arch().c_str());
  return hipSuccess;
}
// The ROCm 6 layout's name field first, gcnArchName much further on, as in hipDeviceProp_tR0600.
int hipGetDevicePropertiesR0600(void* props, int device) {
  if (hipSetDevice(device) != hipSuccess) return hipErrorInvalidDevice;
  auto* bytes = static_cast<char*>(props);
  std::snprintf(bytes, 256, "Fake Radeon");
  std::snprintf(bytes + 1160, 256, "%s", arch().c_str());
  return hipSuccess;
}

int hipMalloc(void** ptr, size_t bytes) {
  *ptr = std::malloc(bytes);
  return *ptr ? hipSuccess : hipErrorInvalidValue;
}
int hipFree(void* ptr) {
  std::free(ptr);
  return hipSuccess;
}
int hipMemcpyHtoD(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
  return hipSuccess;
}
int hipMemcpyDtoH(void* dst, void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
  return hipSuccess;
}
int hipMemsetD8(void* dst, unsigned char value, size_t bytes) {
  std::memset(dst, value, bytes);
  return hipSuccess;
}
int hipDeviceSynchronize() { return hipSuccess; }

// fake_hiprtc's code objects read "FAKE-HSACO <arch> <options>".
int hipModuleLoadData(void** module, const void* image) {
  const std::string text(static_cast<const char*>(image));
  if (text.rfind("FAKE-HSACO ", 0) != 0) return hipErrorInvalidImage;
  if (text.substr(11, text.find(' ', 11) - 11) != arch()) return hipErrorNoBinaryForGpu;
  *module = &g_modules.emplace_back(Module{text});
  return hipSuccess;
}
// A kernel the compile left out (-DSDPA_WITH_FLASH=0 / -DSDPA_WITH_MATH=0) is not in the module.
int hipModuleGetFunction(void** function, void* module, const char* name) {
  const std::string& image = static_cast<Module*>(module)->image;
  const bool flash = std::strncmp(name, "sdpa_flash_", 11) == 0;
  const bool left_out = image.find(flash ? "-DSDPA_WITH_FLASH=0" : "-DSDPA_WITH_MATH=0") !=
                        std::string::npos;
  fake::Entry entry = fake::find_kernel(name);
  if (left_out || !entry) return hipErrorNotFound;
  *function = reinterpret_cast<void*>(entry);
  g_functions[*function] = fake::Kernel{name, entry};
  return hipSuccess;
}
int hipModuleLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned shared, void*, void** args, void**) {
  const auto it = g_functions.find(function);
  if (it == g_functions.end() || bx * by * bz > 1024 || shared > 64 * 1024 || gz != 1)
    return hipErrorInvalidValue;
  fake::launch(it->second, {gx, gy, gz}, {bx, by, bz}, shared, args);
  return hipSuccess;
}

SDPA_FAKE_EVENT_CALLS(hipEventCreate(void** event), hipEventRecord, hipEventSynchronize,
                      hipEventElapsedTime, hipEventDestroy, hipSuccess)

} // extern "C"
