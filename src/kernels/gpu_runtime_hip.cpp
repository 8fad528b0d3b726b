// The HIP runtime (libamdhip64, any of ROCm 5 to 7) behind gpu::Runtime: its module API loads
// what hipRTC compiled. Signatures as in hip_runtime_api.h, handles as void*.
#include "kernels/gpu_runtime_module.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cstring>
#include <type_traits>
#include <vector>

namespace sdpa_doctor::kernels::gpu {

namespace {

struct HipApi {
  int (*init)(unsigned flags);
  int (*device_count)(int* count);
  int (*set_device)(int device);
  int (*device_name)(char* name, int length, int device);
  int (*properties)(void* props, int device); // hipGetDevicePropertiesR0600, else the HIP 5 one
  int (*runtime_version)(int* version);
  int (*malloc)(void** ptr, size_t bytes);
  int (*free)(void* ptr);
  int (*htod)(void* dst, const void* src, size_t bytes); // hipMemcpyHtoD
  int (*dtoh)(void* dst, void* src, size_t bytes);       // hipMemcpyDtoH
  int (*memset_d8)(void* dst, unsigned char value, size_t bytes);
  int (*synchronize)();
  int (*module_load)(void** module, const void* image);
  int (*module_function)(void** function, void* module, const char* name);
  int (*launch)(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                unsigned bz, unsigned shared, void* stream, void** args, void** extra);
  int (*event_create)(void** event);
  int (*event_record)(void* event, void* stream);
  int (*event_synchronize)(void* event);
  int (*event_elapsed)(float* ms, void* start, void* stop);
  const char* (*error_name)(int error);
};

// hipDeviceProp_t changed layout in ROCm 6 (hipGetDevicePropertiesR0600) and may again; the
// props are read into a buffer larger than any layout, and gcnArchName is found as the
// NUL-terminated "gfx..." string that follows the 256-byte name field.
std::string arch_in_properties(const std::vector<char>& props) {
  std::string fallback;
  for (size_t at = 0; at + 4 < props.size(); ++at) {
    if ((at > 0 && props[at - 1] != '\0') || std::strncmp(&props[at], "gfx", 3) != 0) continue;
    const size_t end = props.size() > at + 256 ? at + 256 : props.size();
    const void* nul = std::memchr(&props[at], '\0', end - at);
    if (!nul) continue;
    const std::string name(&props[at], static_cast<const char*>(nul));
    const bool plausible = name.size() > 3 && std::isxdigit(static_cast<unsigned char>(name[3])) &&
                           name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789:+-_") ==
                               std::string::npos;
    if (!plausible) continue;
    if (at >= 256) return name;
    if (fallback.empty()) fallback = name;
  }
  return fallback;
}

class HipRuntime final : public ModuleRuntime<HipApi> {
public:
  HipRuntime(loader::Opened library, HipApi api)
      : ModuleRuntime(std::move(library), api,
                      {"hipModuleGetFunction", "hipModuleLaunchKernel", "hipEventCreate",
                       "hipEventRecord", "hipEventSynchronize", "hipEventElapsedTime"}) {
    int version = 0;
    if (m_api.runtime_version && m_api.runtime_version(&version) == 0 && version > 0)
      m_name = fmt::format("HIP runtime {}.{}", version / 10000000, version / 100000 % 100);
  }
  rtc::Vendor vendor() const override { return rtc::Vendor::amd; }
  std::string name() const override { return m_name; }

  Expected<int> device_count() override {
    int count = 0;
    (void)m_api.init(0); // its failure shows in the count's answer, which says more
    if (const int rc = m_api.device_count(&count); rc != 0) return make_error(error(rc));
    if (count == 0) return make_error("hipErrorNoDevice");
    return count;
  }

  Expected<DeviceInfo> open_device(int device) override {
    if (std::string why = check("hipSetDevice", m_api.set_device(device)); !why.empty())
      return make_error(why);
    DeviceInfo info;
    char name[256] = {};
    if (m_api.device_name && m_api.device_name(name, int(sizeof name) - 1, device) == 0)
      info.name = name;
    std::vector<char> props(16384, '\0');
    if (std::string why = check("hipGetDeviceProperties", m_api.properties(props.data(), device));
        !why.empty())
      return make_error(why);
    info.arch = arch_in_properties(props);
    if (info.arch.empty())
      return make_error(fmt::format("{} ({}) gave no gcnArchName for device {}", m_name,
                                    m_library.path, device));
    return info;
  }

  Expected<DevicePtr> allocate(size_t bytes) override {
    void* ptr = nullptr;
    if (std::string why = check("hipMalloc", m_api.malloc(&ptr, bytes)); !why.empty())
      return make_error(why);
    return reinterpret_cast<DevicePtr>(ptr);
  }
  void release(DevicePtr ptr) override { (void)m_api.free(reinterpret_cast<void*>(ptr)); }
  std::string upload(DevicePtr dst, const void* src, size_t bytes) override {
    return check("hipMemcpyHtoD", m_api.htod(reinterpret_cast<void*>(dst), src, bytes));
  }
  std::string download(void* dst, DevicePtr src, size_t bytes) override {
    return check("hipMemcpyDtoH", m_api.dtoh(dst, reinterpret_cast<void*>(src), bytes));
  }
  std::string fill(DevicePtr dst, unsigned char value, size_t bytes) override {
    return check("hipMemsetD8", m_api.memset_d8(reinterpret_cast<void*>(dst), value, bytes));
  }
  std::string synchronize() override {
    return check("hipDeviceSynchronize", m_api.synchronize());
  }

  std::string load_module(const std::string& image) override {
    return check("hipModuleLoadData", m_api.module_load(&m_module, image.data()));
  }

protected:
  int create_event(void** event) override { return m_api.event_create(event); }
  std::string error(int rc) const override {
    const char* name = m_api.error_name ? m_api.error_name(rc) : nullptr;
    return name ? name : fmt::format("hipError {}", rc);
  }

private:
  std::string m_name = "HIP runtime";
};

} // namespace

Expected<std::unique_ptr<Runtime>> open_hip(const loader::SearchContext& context) {
  auto library = loader::open(loader::Library::hip_runtime, context);
  if (!library) return make_error(library.error().message);
  HipApi api{};
  bool complete = true;
  const auto bind = [&](auto& fn, const char* name) {
    fn = loader::symbol_as<std::remove_reference_t<decltype(fn)>>(*library, name);
    complete = complete && fn;
  };
  bind(api.init, "hipInit");
  bind(api.device_count, "hipGetDeviceCount");
  bind(api.set_device, "hipSetDevice");
  bind(api.malloc, "hipMalloc");
  bind(api.free, "hipFree");
  bind(api.htod, "hipMemcpyHtoD");
  bind(api.dtoh, "hipMemcpyDtoH");
  bind(api.memset_d8, "hipMemsetD8");
  bind(api.synchronize, "hipDeviceSynchronize");
  bind(api.module_load, "hipModuleLoadData");
  bind(api.module_function, "hipModuleGetFunction");
  bind(api.launch, "hipModuleLaunchKernel");
  bind(api.event_create, "hipEventCreate");
  bind(api.event_record, "hipEventRecord");
  bind(api.event_synchronize, "hipEventSynchronize");
  bind(api.event_elapsed, "hipEventElapsedTime");
  api.properties =
      loader::symbol_as<decltype(api.properties)>(*library, "hipGetDevicePropertiesR0600");
  if (!api.properties) bind(api.properties, "hipGetDeviceProperties");
  // Optional: a name and a version are nice to say, not needed to run.
  api.device_name = loader::symbol_as<decltype(api.device_name)>(*library, "hipDeviceGetName");
  api.runtime_version =
      loader::symbol_as<decltype(api.runtime_version)>(*library, "hipRuntimeGetVersion");
  api.error_name = loader::symbol_as<decltype(api.error_name)>(*library, "hipGetErrorName");
  if (!complete)
    return make_error(fmt::format("{} lacks a call the kernels need (hipModuleLaunchKernel, ...)",
                                  library->path));
  return std::unique_ptr<Runtime>(std::make_unique<HipRuntime>(std::move(*library), api));
}

} // namespace sdpa_doctor::kernels::gpu
