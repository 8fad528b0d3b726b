// kernels/gpu_runtime_module: the part of gpu::Runtime that the HIP runtime's module API and the
// CUDA driver API spell alike, call for call: kernels by name, launches and the two timing
// events. Private to gpu_runtime_hip.cpp and gpu_runtime_cuda.cpp.
#pragma once

#include "kernels/gpu_runtime.hpp"

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>

namespace sdpa_doctor::kernels::gpu {

// The vendor's names of the calls below, for the errors: "hipModuleGetFunction", ...
struct ModuleCallNames {
  const char* module_function;
  const char* launch;
  const char* event_create;
  const char* event_record;
  const char* event_synchronize;
  const char* event_elapsed;
};

// `Api` holds the vendor's entry points; those used here (module_function, launch, event_record,
// event_synchronize, event_elapsed) take the same arguments in both. A vendor class adds how an
// event is created and how an error code reads, and what differs (devices, memory, modules).
template <typename Api> class ModuleRuntime : public Runtime {
public:
  const loader::Opened& library() const override { return m_library; }

  Expected<void*> function(const char* name) override {
    void* fn = nullptr;
    if (std::string why = check(fmt::format("{}({})", m_calls.module_function, name),
                                m_api.module_function(&fn, m_module, name));
        !why.empty())
      return make_error(why);
    return fn;
  }
  std::string launch(void* function, Dim3 grid, Dim3 block, size_t shared_bytes,
                     void** args) override {
    return check(m_calls.launch, m_api.launch(function, grid.x, grid.y, grid.z, block.x, block.y,
                                              block.z, unsigned(shared_bytes), nullptr, args,
                                              nullptr));
  }

protected:
  ModuleRuntime(loader::Opened library, Api api, ModuleCallNames calls)
      : m_library(std::move(library)), m_api(api), m_calls(calls) {}

  // The runtime's name for an error code ("hipErrorOutOfMemory", "CUDA_ERROR_INVALID_VALUE").
  virtual std::string error(int rc) const = 0;
  // hipEventCreate(event) / cuEventCreate(event, 0).
  virtual int create_event(void** event) = 0;

  std::string check(std::string_view call, int rc) const {
    return rc == 0 ? std::string{} : fmt::format("{}: {}", call, error(rc));
  }

  std::string record_event(Event event) override {
    void*& e = event == Event::start ? m_start : m_stop;
    std::string why = e ? std::string{} : check(m_calls.event_create, create_event(&e));
    return why.empty() ? check(m_calls.event_record, m_api.event_record(e, nullptr)) : why;
  }
  Expected<double> elapsed_ms() override {
    float ms = 0;
    std::string why = check(m_calls.event_synchronize, m_api.event_synchronize(m_stop));
    if (why.empty())
      why = check(m_calls.event_elapsed, m_api.event_elapsed(&ms, m_start, m_stop));
    if (!why.empty()) return make_error(why);
    return double(ms);
  }

  loader::Opened m_library;
  Api m_api;
  void* m_module = nullptr; // the one module load_module loaded

private:
  ModuleCallNames m_calls;
  void* m_start = nullptr;
  void* m_stop = nullptr;
};

} // namespace sdpa_doctor::kernels::gpu
