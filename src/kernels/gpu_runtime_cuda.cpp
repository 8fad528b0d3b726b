// The CUDA driver API (libcuda.so.1) behind gpu::Runtime: it loads what NVRTC compiled (a cubin,
// or PTX it finishes for the card). Signatures as in cuda.h, handles as void*, the versioned
// symbols (_v2) the driver has exported since CUDA 4.
#include "kernels/gpu_runtime_module.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <type_traits>

namespace sdpa_doctor::kernels::gpu {

namespace {

constexpr int k_attr_cc_major = 75; // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int k_attr_cc_minor = 76;
constexpr int k_jit_error_log = 5; // CU_JIT_ERROR_LOG_BUFFER
constexpr int k_jit_error_log_size = 6;

struct CudaApi {
  int (*init)(unsigned flags);
  int (*driver_version)(int* version);
  int (*device_count)(int* count);
  int (*device_get)(int* device, int ordinal);
  int (*device_name)(char* name, int length, int device);
  int (*device_attribute)(int* value, int attribute, int device);
  int (*primary_ctx_retain)(void** context, int device);
  int (*ctx_set_current)(void* context);
  int (*malloc)(unsigned long long* ptr, size_t bytes);
  int (*free)(unsigned long long ptr);
  int (*htod)(unsigned long long dst, const void* src, size_t bytes);
  int (*dtoh)(void* dst, unsigned long long src, size_t bytes);
  int (*memset_d8)(unsigned long long dst, unsigned char value, size_t bytes);
  int (*synchronize)();
  int (*module_load)(void** module, const void* image, unsigned count, int* options,
                     void** values);
  int (*module_function)(void** function, void* module, const char* name);
  int (*launch)(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                unsigned bz, unsigned shared, void* stream, void** args, void** extra);
  int (*event_create)(void** event, unsigned flags);
  int (*event_record)(void* event, void* stream);
  int (*event_synchronize)(void* event);
  int (*event_elapsed)(float* ms, void* start, void* stop);
  int (*error_name)(int error, const char** name);
};

class CudaRuntime final : public ModuleRuntime<CudaApi> {
public:
  CudaRuntime(loader::Opened library, CudaApi api)
      : ModuleRuntime(std::move(library), api,
                      {"cuModuleGetFunction", "cuLaunchKernel", "cuEventCreate", "cuEventRecord",
                       "cuEventSynchronize", "cuEventElapsedTime"}) {}
  rtc::Vendor vendor() const override { return rtc::Vendor::nvidia; }
  std::string name() const override {
    int version = 0;
    if (m_api.driver_version(&version) != 0 || version <= 0) return "CUDA driver";
    return fmt::format("CUDA driver {}.{}", version / 1000, version % 1000 / 10);
  }

  Expected<int> device_count() override {
    int count = 0;
    if (const int rc = m_api.init(0); rc != 0) return make_error("cuInit: " + error(rc));
    if (const int rc = m_api.device_count(&count); rc != 0) return make_error(error(rc));
    if (count == 0) return make_error("CUDA_ERROR_NO_DEVICE");
    return count;
  }

  // The device's primary context, the one torch's CUDA runtime uses too.
  Expected<DeviceInfo> open_device(int ordinal) override {
    int device = 0, major = 0, minor = 0;
    std::string why = check("cuDeviceGet", m_api.device_get(&device, ordinal));
    if (why.empty())
      why = check("cuDeviceGetAttribute", m_api.device_attribute(&major, k_attr_cc_major, device));
    if (why.empty())
      why = check("cuDeviceGetAttribute", m_api.device_attribute(&minor, k_attr_cc_minor, device));
    void* context = nullptr;
    if (why.empty())
      why = check("cuDevicePrimaryCtxRetain", m_api.primary_ctx_retain(&context, device));
    if (why.empty()) why = check("cuCtxSetCurrent", m_api.ctx_set_current(context));
    if (!why.empty()) return make_error(why);
    DeviceInfo info;
    char name[256] = {};
    if (m_api.device_name(name, int(sizeof name) - 1, device) == 0) info.name = name;
    info.arch = fmt::format("sm_{}{}", major, minor);
    return info;
  }

  Expected<DevicePtr> allocate(size_t bytes) override {
    unsigned long long ptr = 0;
    if (std::string why = check("cuMemAlloc", m_api.malloc(&ptr, bytes)); !why.empty())
      return make_error(why);
    return DevicePtr(ptr);
  }
  void release(DevicePtr ptr) override { (void)m_api.free(ptr); }
  std::string upload(DevicePtr dst, const void* src, size_t bytes) override {
    return check("cuMemcpyHtoD", m_api.htod(dst, src, bytes));
  }
  std::string download(void* dst, DevicePtr src, size_t bytes) override {
    return check("cuMemcpyDtoH", m_api.dtoh(dst, src, bytes));
  }
  std::string fill(DevicePtr dst, unsigned char value, size_t bytes) override {
    return check("cuMemsetD8", m_api.memset_d8(dst, value, bytes));
  }
  std::string synchronize() override { return check("cuCtxSynchronize", m_api.synchronize()); }

  // PTX the driver cannot take (newer than it) says why in the JIT's log: kept in the error.
  std::string load_module(const std::string& image) override {
    char log[4096] = {};
    int options[] = {k_jit_error_log, k_jit_error_log_size};
    void* values[] = {log, reinterpret_cast<void*>(uintptr_t(sizeof log - 1))};
    std::string why = check("cuModuleLoadDataEx",
                            m_api.module_load(&m_module, image.data(), 2, options, values));
    if (!why.empty() && log[0]) why += fmt::format(" ({})", log);
    return why;
  }

protected:
  int create_event(void** event) override { return m_api.event_create(event, 0); }
  std::string error(int rc) const override {
    const char* name = nullptr;
    if (m_api.error_name(rc, &name) != 0 || !name) return fmt::format("CUresult {}", rc);
    return name;
  }
};

} // namespace

Expected<std::unique_ptr<Runtime>> open_cuda(const loader::SearchContext& context) {
  auto library = loader::open(loader::Library::cuda_driver, context);
  if (!library) return make_error(library.error().message);
  CudaApi api{};
  bool complete = true;
  const auto bind = [&](auto& fn, std::initializer_list<const char*> names) {
    for (const char* name : names)
      if ((fn = loader::symbol_as<std::remove_reference_t<decltype(fn)>>(*library, name))) return;
    complete = false;
  };
  bind(api.init, {"cuInit"});
  bind(api.driver_version, {"cuDriverGetVersion"});
  bind(api.device_count, {"cuDeviceGetCount"});
  bind(api.device_get, {"cuDeviceGet"});
  bind(api.device_name, {"cuDeviceGetName"});
  bind(api.device_attribute, {"cuDeviceGetAttribute"});
  bind(api.primary_ctx_retain, {"cuDevicePrimaryCtxRetain"});
  bind(api.ctx_set_current, {"cuCtxSetCurrent"});
  bind(api.malloc, {"cuMemAlloc_v2"});
  bind(api.free, {"cuMemFree_v2"});
  bind(api.htod, {"cuMemcpyHtoD_v2"});
  bind(api.dtoh, {"cuMemcpyDtoH_v2"});
  bind(api.memset_d8, {"cuMemsetD8_v2"});
  bind(api.synchronize, {"cuCtxSynchronize"});
  bind(api.module_load, {"cuModuleLoadDataEx"});
  bind(api.module_function, {"cuModuleGetFunction"});
  bind(api.launch, {"cuLaunchKernel"});
  bind(api.event_create, {"cuEventCreate"});
  bind(api.event_record, {"cuEventRecord"});
  bind(api.event_synchronize, {"cuEventSynchronize"});
  bind(api.event_elapsed, {"cuEventElapsedTime_v2", "cuEventElapsedTime"});
  bind(api.error_name, {"cuGetErrorName"});
  if (!complete)
    return make_error(fmt::format("{} lacks a call the kernels need (cuLaunchKernel, ...)",
                                  library->path));
  return std::unique_ptr<Runtime>(std::make_unique<CudaRuntime>(std::move(*library), api));
}

} // namespace sdpa_doctor::kernels::gpu
