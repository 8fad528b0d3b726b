// The HIP entry points of kernels.hpp over the HIP kernels' module: case -> host buffers in the
// case dtype and layout -> device run -> logical output. Built only when HIP is (hip_stub.cpp
// otherwise); the module is loaded on first use, so the CPU paths never load the HIP runtime.
#include "kernels/hip_attention.hpp"
#include "kernels/kernels.hpp"
#include "core/paths.hpp"

#include <cstring>
#include <dlfcn.h>
#include <mutex>

namespace sdpa_doctor::kernels {

namespace {

struct Module {
  const hip_impl::Api* api = nullptr;
  std::string why_not; // when api is null
};

// Beside the executable (workers, an install's bin/), or one folder up (the tests' binaries).
const Module& module() {
  static Module loaded;
  static std::once_flag once;
  std::call_once(once, [] {
    const std::filesystem::path dir = executable_dir();
    std::string errors;
    for (const auto& path : {dir / hip_impl::k_module_file, dir.parent_path() / hip_impl::k_module_file}) {
      if (!std::filesystem::exists(path)) continue;
      void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!handle) {
        const char* error = ::dlerror();
        loaded.why_not = std::string("the HIP kernels cannot load: ") + (error ? error : "dlopen failed");
        return;
      }
      using Entry = const hip_impl::Api* (*)();
      auto entry = reinterpret_cast<Entry>(::dlsym(handle, hip_impl::k_api_symbol));
      loaded.api = entry ? entry() : nullptr;
      if (!loaded.api) loaded.why_not = "the HIP kernels module has no entry point: " + path.string();
      return;
    }
    loaded.why_not = std::string("the HIP kernels module ") + hip_impl::k_module_file +
                     " is missing beside " + dir.string();
  });
  return loaded;
}

} // namespace

bool hip_built_in() { return true; }
std::string hip_unavailable_reason(int device) {
  const Module& m = module();
  return m.api ? m.api->unavailable_reason(device) : m.why_not;
}
std::string hip_health_check(int device) {
  const Module& m = module();
  return m.api ? m.api->health_check(device) : m.why_not;
}

namespace {
ElemType elem_of(DType dtype) {
  switch (dtype) {
  case DType::f32: return ElemType::f32;
  case DType::f16: return ElemType::f16;
  case DType::bf16: return ElemType::bf16;
  }
  return ElemType::f32;
}

// Values already rounded to the dtype, stored as the device will read them.
std::vector<unsigned char> to_storage(DType dtype, const std::vector<float>& values) {
  std::vector<unsigned char> out;
  if (dtype == DType::f32) {
    out.resize(values.size() * sizeof(float));
    std::memcpy(out.data(), values.data(), out.size());
    return out;
  }
  out.resize(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t bits = dtype == DType::f16 ? float_to_half_bits(values[i])
                                              : float_to_bf16_bits(values[i]);
    std::memcpy(out.data() + 2 * i, &bits, 2);
  }
  return out;
}

std::vector<float> from_storage(DType dtype, const std::vector<unsigned char>& bytes) {
  if (dtype == DType::f32) {
    std::vector<float> out(bytes.size() / sizeof(float));
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
    return out;
  }
  std::vector<float> out(bytes.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, bytes.data() + 2 * i, 2);
    out[i] = dtype == DType::f16 ? half_bits_to_float(bits) : bf16_bits_to_float(bits);
  }
  return out;
}
} // namespace

Expected<KernelRun> run_hip(RefKernel kernel, int device, const Case& c, const HostInputs& inputs,
                            int warmup, int repeat) {
  if (const std::string bad = validate(c); !bad.empty()) return make_error(bad);
  const std::vector<unsigned char> q = to_storage(c.dtype, to_layout(c, inputs.q, c.hq, c.lq));
  const std::vector<unsigned char> k = to_storage(c.dtype, to_layout(c, inputs.k, c.hkv, c.lkv));
  const std::vector<unsigned char> v = to_storage(c.dtype, to_layout(c, inputs.v, c.hkv, c.lkv));
  hip_impl::HipRun rq;
  rq.params = params_for(c);
  rq.params.elem = elem_of(c.dtype);
  rq.q = q.data();
  rq.k = k.data();
  rq.v = v.data();
  rq.mask = inputs.mask.empty() ? nullptr : inputs.mask.data();
  rq.q_count = size_t(c.q_elements());
  rq.kv_count = size_t(c.kv_elements());
  rq.mask_count = inputs.mask.size();
  rq.flash = kernel == RefKernel::flash;
  rq.device = device;
  rq.warmup = warmup;
  rq.repeat = repeat;
  const Module& m = module();
  if (!m.api) return make_error(m.why_not);
  hip_impl::HipResult result;
  if (std::string why = m.api->run(rq, result); !why.empty()) return make_error(why);
  KernelRun run;
  run.out = output_from_layout(c, from_storage(c.dtype, result.out));
  run.times_ms = std::move(result.times_ms);
  return run;
}

} // namespace sdpa_doctor::kernels
