// The GPU entry points of kernels.hpp: which runtime answers for cuda:N, the kernels compiled for
// its device (rtc) and loaded once, and a case run as host buffers in the case dtype and layout
// -> device -> launches -> the logical output.
#include "kernels/gpu_launch.hpp"
#include "kernels/gpu_runtime.hpp"
#include "kernels/kernels.hpp"
#include "kernels/rtc.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace sdpa_doctor::kernels {

namespace {

std::vector<std::string> split_dirs(const char* list) {
  std::vector<std::string> dirs;
  if (!list) return dirs;
  for (std::string_view rest = list; !rest.empty();) {
    const size_t colon = rest.find(':');
    const std::string_view dir = rest.substr(0, colon);
    if (!dir.empty()) dirs.emplace_back(dir);
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return dirs;
}

const char* env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

loader::SearchContext search_context() {
  loader::SearchContext context;
  context.torch_lib_dirs = split_dirs(std::getenv("SDPA_DOCTOR_TORCH_LIB_DIRS"));
  context.rocm_path = env_or_empty("ROCM_PATH");
  context.cuda_path = env_or_empty("CUDA_PATH");
  if (context.cuda_path.empty()) context.cuda_path = env_or_empty("CUDA_HOME");
  return context;
}

std::string described(const gpu::Runtime& runtime) {
  return fmt::format("{} ({})", runtime.name(), runtime.library().path);
}

// The process's one GPU runtime: HIP's when it sees a device, else the CUDA driver's.
struct Gpu {
  std::unique_ptr<gpu::Runtime> runtime;
  int devices = 0;
  std::string why_not;      // when runtime is null
  bool any_runtime = false; // a runtime opened, whether or not it saw a device
  int current = -1;         // the device made current last, and what it is
  gpu::DeviceInfo current_info;
};

// Never destroyed: at exit the vendor's runtime may already be torn down, and nothing is owed to
// it (the process's end frees the device's memory, modules and events).
Gpu& the_gpu() {
  static Gpu& gpu = *new Gpu;
  static std::once_flag once;
  std::call_once(once, [] {
    const loader::SearchContext context = search_context();
    std::vector<std::string> answers;
    const std::pair<const char*, decltype(&gpu::open_hip)> runtimes[] = {{"HIP", &gpu::open_hip},
                                                                         {"CUDA", &gpu::open_cuda}};
    for (const auto& [label, open] : runtimes) {
      auto runtime = open(context);
      if (!runtime) {
        answers.push_back(fmt::format("{}: {}", label, runtime.error().message));
        continue;
      }
      gpu.any_runtime = true;
      auto count = (*runtime)->device_count();
      if (!count) {
        answers.push_back(fmt::format("{}: {}", described(**runtime), count.error().message));
        continue;
      }
      gpu.runtime = std::move(*runtime);
      gpu.devices = *count;
      return;
    }
    gpu.why_not = fmt::format("no GPU device: {}", fmt::join(answers, "; "));
  });
  return gpu;
}

// The runtime with `device` current, or why not (a line starting "no GPU device").
Expected<gpu::Runtime*> runtime_for(int device, gpu::DeviceInfo* info = nullptr) {
  Gpu& gpu = the_gpu();
  if (!gpu.runtime) return make_error(gpu.why_not);
  if (device < 0 || device >= gpu.devices)
    return make_error(fmt::format("no GPU device cuda:{} ({} visible to {})", device, gpu.devices,
                                  described(*gpu.runtime)));
  if (gpu.current != device) {
    auto opened = gpu.runtime->open_device(device);
    if (!opened) return make_error(opened.error().message);
    gpu.current = device;
    gpu.current_info = *opened;
  }
  if (info) *info = gpu.current_info;
  return gpu.runtime.get();
}

rtc::Entries entries_of(RefKernel kernel) {
  return kernel == RefKernel::flash ? rtc::Entries::flash : rtc::Entries::math;
}

// Storage suffix of the entry points: sdpa_flash_<storage>_d<bucket>, sdpa_math_*_<storage>.
const char* storage_of(DType dtype) {
  switch (dtype) {
  case DType::f32: return "f32";
  case DType::f16: return "f16";
  case DType::bf16: return "bf16";
  }
  return "f32";
}

std::vector<std::string> entry_names(RefKernel kernel) {
  std::vector<std::string> names;
  for (const char* storage : {"f32", "f16", "bf16"}) {
    if (kernel == RefKernel::flash) {
      for (int dmax : {64, 128, 256})
        names.push_back(fmt::format("sdpa_flash_{}_d{}", storage, dmax));
    } else {
      names.push_back(fmt::format("sdpa_math_scores_{}", storage));
      names.push_back(fmt::format("sdpa_math_pv_{}", storage));
    }
  }
  if (kernel == RefKernel::math) names.push_back("sdpa_math_softmax");
  return names;
}

struct Loaded {
  GpuKernels status;
  std::map<std::string, void*> functions;
};

// Compiles (or takes from the cache) and loads; a cached image the runtime refuses is compiled
// afresh once (a cache written by a broken run must not stick).
Loaded load(RefKernel kernel, int device) {
  Loaded loaded;
  GpuKernels& st = loaded.status;
  gpu::DeviceInfo info;
  auto runtime = runtime_for(device, &info);
  if (!runtime) {
    st.failure = runtime.error().message;
    st.refusal = st.failure.rfind("no ", 0) == 0;
    return loaded;
  }
  gpu::Runtime& rt = **runtime;
  st.facts["gpu_runtime"] = described(rt);
  st.facts["gpu_device"] = info.name;
  st.facts["gpu_arch"] = info.arch;
  const loader::SearchContext context = search_context();
  auto compiler = rt.vendor() == rtc::Vendor::amd ? rtc::open_hiprtc(context, &rt.library())
                                                  : rtc::open_nvrtc(context);
  if (!compiler) {
    st.failure =
        fmt::format("no run-time compiler for {}: {}", info.arch, compiler.error().message);
    st.refusal = true;
    return loaded;
  }
  const std::string cache_dir = rtc::default_cache_dir();
  for (int attempt = 0; attempt < 2; ++attempt) {
    rtc::Build build = rtc::build_kernels(**compiler, info.arch, entries_of(kernel),
                                          attempt == 0 ? cache_dir : std::string{});
    st.facts["rtc_compiler"] = build.compiler;
    if (!build.image) {
      st.failure = build.failure;
      st.refusal = !build.compile_failed;
      st.compiler_log = build.log;
      return loaded;
    }
    st.facts["rtc_target"] = fmt::format("{} ({})", build.image->target, build.image->format);
    st.facts["kernel_cache"] = build.cache_file.empty() ? "none" : build.cache_file;
    st.facts["compile_ms"] = build.from_cache ? "cached" : fmt::format("{:.0f}", build.compile_ms);
    std::string why = rt.load_module(build.image->bytes);
    for (const std::string& name : entry_names(kernel)) {
      if (!why.empty()) break;
      auto fn = rt.function(name.c_str());
      if (fn) loaded.functions[name] = *fn;
      else why = fn.error().message;
    }
    if (why.empty()) return loaded;
    if (build.from_cache) { // the cached image, not our source, may be at fault
      rtc::evict(build);
      continue;
    }
    st.failure = fmt::format("our reference kernel did not load on {} ({}): {}", info.arch,
                             described(rt), why);
    return loaded;
  }
  return loaded;
}

Loaded& loaded_for(RefKernel kernel, int device) {
  static std::mutex mutex;
  static std::map<std::pair<RefKernel, int>, Loaded> all;
  std::lock_guard lock(mutex);
  const auto key = std::pair{kernel, device};
  auto it = all.find(key);
  if (it == all.end()) it = all.emplace(key, load(kernel, device)).first;
  return it->second;
}

// Values already rounded to the dtype, stored as the device reads them.
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

ElemType elem_of(DType dtype) {
  switch (dtype) {
  case DType::f32: return ElemType::f32;
  case DType::f16: return ElemType::f16;
  case DType::bf16: return ElemType::bf16;
  }
  return ElemType::f32;
}

struct Launch {
  void* function;
  gpu::Dim3 grid, block;
  size_t shared_bytes;
};

constexpr int64_t k_max_grid_x = (int64_t{1} << 31) - 1;
constexpr int64_t k_max_grid_y = 65535;

// The launches of one run of `kernel` over `p`, or why there is no instance for it.
Expected<std::vector<Launch>> plan_launches(RefKernel kernel, const Case& c, const AttnParams& p,
                                            const std::map<std::string, void*>& functions) {
  const auto fn = [&](const std::string& name) { return functions.at(name); };
  const int64_t rows = p.b * p.hq * p.lq;
  if (kernel == RefKernel::flash) {
    if (p.d > gpu::k_flash_max_head_dim)
      return make_error(fmt::format("no ref-flash GPU instance for head dim {} (max {})", p.d,
                                    gpu::k_flash_max_head_dim));
    const int dmax = gpu::flash_bucket(p.d);
    const int64_t rows_per_block = gpu::flash_rows(dmax);
    const int64_t blocks = p.b * p.hq * ((p.lq + rows_per_block - 1) / rows_per_block);
    if (blocks > k_max_grid_x) return make_error("no ref-flash GPU instance for so many rows");
    return std::vector<Launch>{{fn(fmt::format("sdpa_flash_{}_d{}", storage_of(c.dtype), dmax)),
                                {unsigned(blocks)},
                                {unsigned(gpu::k_flash_threads)},
                                size_t(gpu::flash_shared_bytes(dmax, p.d))}};
  }
  const int64_t key_chunks = (p.lkv + gpu::k_math_threads - 1) / gpu::k_math_threads;
  const int64_t column_chunks = (p.d + gpu::k_pv_threads - 1) / gpu::k_pv_threads;
  if (rows > k_max_grid_x || key_chunks > k_max_grid_y || column_chunks > k_max_grid_y)
    return make_error("no ref-math GPU instance for so many rows or keys");
  const std::string storage = storage_of(c.dtype);
  return std::vector<Launch>{
      {fn("sdpa_math_scores_" + storage), {unsigned(rows), unsigned(key_chunks)},
       {unsigned(gpu::k_math_threads)}, 0},
      {fn("sdpa_math_softmax"), {unsigned(rows)}, {unsigned(gpu::k_math_threads)},
       size_t(gpu::k_math_threads) * sizeof(float)},
      {fn("sdpa_math_pv_" + storage), {unsigned(rows), unsigned(column_chunks)},
       {unsigned(gpu::k_pv_threads)}, 0}};
}

} // namespace

std::string gpu_unavailable_reason(int device) {
  auto runtime = runtime_for(device);
  return runtime ? std::string{} : runtime.error().message;
}

GpuHealth gpu_health_check(int device) {
  auto runtime = runtime_for(device);
  if (!runtime) return GpuHealth{the_gpu().any_runtime, runtime.error().message};
  gpu::Runtime& rt = **runtime;
  constexpr size_t k_bytes = size_t(1) << 20;
  gpu::DeviceBuffer buffer(rt);
  std::vector<unsigned char> back(k_bytes, 0);
  std::string why = buffer.allocate(k_bytes);
  if (why.empty()) why = rt.fill(buffer.get(), 0x5a, k_bytes);
  if (why.empty()) why = rt.download(back.data(), buffer.get(), k_bytes);
  if (why.empty()) why = rt.synchronize();
  if (why.empty())
    for (unsigned char c : back)
      if (c != 0x5a) {
        why = "device memory read back wrong values";
        break;
      }
  return GpuHealth{true, why};
}

const GpuKernels& gpu_kernels(RefKernel kernel, int device) {
  return loaded_for(kernel, device).status;
}

Expected<KernelRun> run_gpu(RefKernel kernel, int device, const Case& c, const HostInputs& inputs,
                            int warmup, int repeat) {
  if (const std::string bad = validate(c); !bad.empty()) return make_error(bad);
  const Loaded& loaded = loaded_for(kernel, device);
  if (!loaded.status.failure.empty()) return make_error(loaded.status.failure);
  auto runtime = runtime_for(device);
  if (!runtime) return make_error(runtime.error().message);
  gpu::Runtime& rt = **runtime;

  AttnParams p = params_for(c);
  p.elem = elem_of(c.dtype);
  auto launches = plan_launches(kernel, c, p, loaded.functions);
  if (!launches) return make_error(launches.error().message);
  const bool masked = p.mask_kind != MaskKind::none;
  if (masked && inputs.mask.size() != size_t(c.b * c.lq * c.lkv))
    return make_error("mask has the wrong size for the case");

  const auto [lq_, lk_, lv_] = c.qkv_layouts();
  const std::vector<unsigned char> q = to_storage(c.dtype, to_layout(c, lq_, inputs.q, c.hq, c.lq));
  const std::vector<unsigned char> k =
      to_storage(c.dtype, to_layout(c, lk_, inputs.k, c.hkv, c.lkv));
  const std::vector<unsigned char> v =
      to_storage(c.dtype, to_layout(c, lv_, inputs.v, c.hkv, c.lkv));
  const size_t out_bytes = q.size(); // the output follows q's layout (params_for)
  gpu::DeviceBuffer dq(rt), dk(rt), dv(rt), dmask(rt), dout(rt), dscores(rt);
  std::string why = dq.allocate(q.size());
  if (why.empty()) why = dk.allocate(k.size());
  if (why.empty()) why = dv.allocate(v.size());
  if (why.empty()) why = dout.allocate(out_bytes);
  if (why.empty() && masked) why = dmask.allocate(inputs.mask.size() * sizeof(float));
  if (why.empty() && kernel == RefKernel::math)
    why = dscores.allocate(size_t(c.b * c.hq * c.lq) * size_t(c.lkv) * sizeof(float));
  if (why.empty()) why = rt.upload(dq.get(), q.data(), q.size());
  if (why.empty()) why = rt.upload(dk.get(), k.data(), k.size());
  if (why.empty()) why = rt.upload(dv.get(), v.data(), v.size());
  if (why.empty() && masked)
    why = rt.upload(dmask.get(), inputs.mask.data(), inputs.mask.size() * sizeof(float));
  if (!why.empty()) return make_error(why);

  // An offset layout's view starts one element into its buffer (scalar loads: no alignment).
  const auto view = [&](gpu::DevicePtr base, Layout layout) {
    return base + (layout == Layout::offset ? gpu::DevicePtr(dtype_size_bytes(c.dtype)) : 0);
  };
  p.q = reinterpret_cast<const void*>(view(dq.get(), lq_));
  p.k = reinterpret_cast<const void*>(view(dk.get(), lk_));
  p.v = reinterpret_cast<const void*>(view(dv.get(), lv_));
  p.o = reinterpret_cast<void*>(view(dout.get(), lq_));
  p.mask = masked ? reinterpret_cast<const float*>(dmask.get()) : nullptr;
  p.lse = nullptr;
  gpu::DevicePtr scores = dscores.get();
  void* args[] = {&p, &scores};
  const auto once = [&]() -> std::string {
    for (const Launch& l : *launches)
      if (std::string failed = rt.launch(l.function, l.grid, l.block, l.shared_bytes, args);
          !failed.empty())
        return failed;
    return {};
  };
  KernelRun run;
  warmup = std::max(warmup, 0);
  for (int r = 0; r < warmup + std::max(repeat, 1); ++r) {
    auto ms = rt.time_ms(once);
    if (!ms) return make_error(ms.error().message);
    if (r >= warmup) run.times_ms.push_back(*ms);
  }
  std::vector<unsigned char> out(out_bytes);
  if (why = rt.download(out.data(), dout.get(), out_bytes); !why.empty()) return make_error(why);
  run.out = output_from_layout(c, from_storage(c.dtype, out));
  return run;
}

} // namespace sdpa_doctor::kernels
