// kernels/gpu_runtime: the dozen calls our GPU kernels need from a vendor's runtime (devices,
// memory, copies, modules, launches, timing), over the HIP runtime's module API or the CUDA
// driver API, each opened with dlopen through the loader (one file per vendor). Internal to
// kernels; depends on core, the loader and rtc's Vendor, never on a vendor header: the few
// types and signatures are spelled in the implementations.
#pragma once

#include "core/expected.hpp"
#include "kernels/rtc.hpp"
#include "loader/loader.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace sdpa_doctor::kernels::gpu {

using DevicePtr = uint64_t; // a device address (hipDeviceptr_t, CUdeviceptr)

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct DeviceInfo {
  std::string name; // "AMD Radeon RX 9070 XT", "NVIDIA H100 80GB HBM3"
  std::string arch; // what the compiler targets: "gfx1201", "gfx90a:sramecc+:xnack-", "sm_90"
};

// Calls return an empty string when they worked, else one line naming the call and the
// runtime's error ("hipMalloc: hipErrorOutOfMemory").
class Runtime {
public:
  virtual ~Runtime() = default;
  virtual rtc::Vendor vendor() const = 0;
  virtual std::string name() const = 0; // with its version: "HIP runtime 6.4", "CUDA driver 13.0"
  virtual const loader::Opened& library() const = 0;

  // Initialises the runtime (hipInit / cuInit) and counts the devices it sees, in torch's cuda:N
  // order; an error in the runtime's words when none.
  virtual Expected<int> device_count() = 0;
  // Makes `device` current for every call below and says what it is.
  virtual Expected<DeviceInfo> open_device(int device) = 0;

  virtual Expected<DevicePtr> allocate(size_t bytes) = 0;
  virtual void release(DevicePtr ptr) = 0;
  virtual std::string upload(DevicePtr dst, const void* src, size_t bytes) = 0;
  virtual std::string download(void* dst, DevicePtr src, size_t bytes) = 0;
  virtual std::string fill(DevicePtr dst, unsigned char value, size_t bytes) = 0;
  virtual std::string synchronize() = 0;

  // A code image from rtc, and the kernels in it by name; both live as long as the process.
  virtual std::string load_module(const std::string& image) = 0;
  virtual Expected<void*> function(const char* name) = 0;
  // args: pointers to each argument's value, as hipModuleLaunchKernel / cuLaunchKernel take.
  virtual std::string launch(void* function, Dim3 grid, Dim3 block, size_t shared_bytes,
                             void** args) = 0;
  // Milliseconds the device spent between the start and the end of `work` (its launches), by
  // events around it; an error when `work` or the events fail.
  Expected<double> time_ms(const std::function<std::string()>& work) {
    std::string why = record_event(Event::start);
    if (why.empty()) why = work();
    if (why.empty()) why = record_event(Event::stop);
    if (!why.empty()) return make_error(why);
    return elapsed_ms();
  }

protected:
  // Two device events, created on first use: recorded on the default stream; elapsed_ms waits
  // for `stop` and measures from `start`.
  enum class Event { start, stop };
  virtual std::string record_event(Event event) = 0;
  virtual Expected<double> elapsed_ms() = 0;
};

// The runtime's library opened with every call the kernels need, or why it cannot be.
Expected<std::unique_ptr<Runtime>> open_hip(const loader::SearchContext& context);
Expected<std::unique_ptr<Runtime>> open_cuda(const loader::SearchContext& context);

// Device memory freed when it goes out of scope.
class DeviceBuffer {
public:
  explicit DeviceBuffer(Runtime& runtime) : m_runtime(runtime) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (m_ptr) m_runtime.release(m_ptr);
  }
  std::string allocate(size_t bytes) {
    auto ptr = m_runtime.allocate(bytes == 0 ? 1 : bytes);
    if (!ptr) return ptr.error().message;
    m_ptr = *ptr;
    return {};
  }
  DevicePtr get() const { return m_ptr; }

private:
  Runtime& m_runtime;
  DevicePtr m_ptr = 0;
};

} // namespace sdpa_doctor::kernels::gpu
