// The run-time compilers (hipRTC, NVRTC: the same calls under two prefixes) and the disk cache of
// what they compiled.
#include "kernels/rtc.hpp"
#include "kernels/attn_params.hpp"
#include "core/cache.hpp"
#include "core/io.hpp"
#include "core/status.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <sstream>
#include <type_traits>

namespace sdpa_doctor::kernels::rtc {

namespace fs = std::filesystem;

const std::vector<SourceFile>& kernel_sources() {
  static const std::vector<SourceFile> files{
#include "attention_gpu_sources.inc"
  };
  return files;
}

namespace {

// A device's image is a few hundred KiB; this keeps every arch and compiler version a machine
// or a shared home directory sees, and stops a cache that would grow with each upgrade.
constexpr int64_t k_kernel_cache_bytes = int64_t{256} << 20;

// hiprtcResult and nvrtcResult are C enums: 0 is success. Programs are opaque pointers.
struct RtcApi {
  int (*create)(void** program, const char* source, const char* name, int headers,
                const char* const* header_texts, const char* const* header_names) = nullptr;
  int (*compile)(void* program, int count, const char* const* options) = nullptr;
  int (*log_size)(void* program, size_t* bytes) = nullptr;
  int (*log)(void* program, char* out) = nullptr;
  int (*code_size)(void* program, size_t* bytes) = nullptr; // hipRTC code object, NVRTC cubin
  int (*code)(void* program, char* out) = nullptr;
  int (*ptx_size)(void* program, size_t* bytes) = nullptr; // NVRTC only
  int (*ptx)(void* program, char* out) = nullptr;
  int (*destroy)(void** program) = nullptr;
  int (*version)(int* major, int* minor) = nullptr;
  const char* (*error_string)(int result) = nullptr;
  int (*num_archs)(int* count) = nullptr; // NVRTC 11.2 and later
  int (*archs)(int* out) = nullptr;
};

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

class RtcCompiler final : public Compiler {
public:
  RtcCompiler(Vendor vendor, loader::Opened library, RtcApi api, std::string name)
      : m_vendor(vendor), m_library(std::move(library)), m_api(api), m_name(std::move(name)) {}

  Vendor vendor() const override { return m_vendor; }
  std::string name() const override { return m_name; }
  const loader::Opened& library() const override { return m_library; }

  Expected<std::string> target_for(const std::string& device_arch) const override {
    if (m_vendor == Vendor::amd) {
      if (!starts_with(device_arch, "gfx"))
        return make_error(fmt::format("{} builds for gfx targets, not '{}'", m_name, device_arch));
      return device_arch; // with its feature flags (gfx90a:sramecc+:xnack-): the code must match
    }
    int sm = 0;
    if (!starts_with(device_arch, "sm_") ||
        std::sscanf(device_arch.c_str() + 3, "%d", &sm) != 1 || sm <= 0)
      return make_error(fmt::format("{} builds for sm_XX targets, not '{}'", m_name, device_arch));
    return nvidia_target(sm, supported_archs(sm), m_name);
  }

  CompileOutput compile(const std::vector<SourceFile>& sources, const std::string& target,
                        const std::vector<std::string>& options) const override {
    CompileOutput out;
    std::vector<const char*> texts, names, args;
    for (size_t i = 1; i < sources.size(); ++i) {
      texts.push_back(sources[i].text.c_str());
      names.push_back(sources[i].name.c_str());
    }
    for (const std::string& o : options) args.push_back(o.c_str());
    void* program = nullptr;
    if (int rc = m_api.create(&program, sources.at(0).text.c_str(), sources[0].name.c_str(),
                              int(texts.size()), texts.data(), names.data());
        rc != 0) {
      out.status = status_name(rc);
      return out;
    }
    const int rc = m_api.compile(program, int(args.size()), args.data());
    out.status = status_name(rc);
    out.log = read(program, m_api.log_size, m_api.log, true);
    if (rc == 0) {
      const bool ptx = m_vendor == Vendor::nvidia && !starts_with(target, "sm_");
      std::string bytes = ptx ? read(program, m_api.ptx_size, m_api.ptx)
                              : read(program, m_api.code_size, m_api.code);
      const char* format = m_vendor == Vendor::amd ? "hsaco" : ptx ? "ptx" : "cubin";
      if (!bytes.empty())
        out.image = CodeImage{std::move(bytes), format, target};
      else
        out.status += " (but no code came out)";
    }
    m_api.destroy(&program);
    return out;
  }

private:
  std::string status_name(int rc) const {
    const char* text = m_api.error_string ? m_api.error_string(rc) : nullptr;
    return text ? text : fmt::format("status {}", rc);
  }

  // What a size/read pair of calls returns. A log loses the NUL the API counts; code keeps every
  // byte (PTX its NUL: the driver reads it as a C string).
  static std::string read(void* program, int (*size_fn)(void*, size_t*),
                          int (*read_fn)(void*, char*), bool text = false) {
    size_t size = 0;
    if (!size_fn || !read_fn || size_fn(program, &size) != 0 || size == 0) return {};
    std::string bytes(size, '\0');
    if (read_fn(program, bytes.data()) != 0) return {};
    if (text) bytes.resize(bytes.find('\0') == std::string::npos ? size : bytes.find('\0'));
    return bytes;
  }

  std::vector<int> supported_archs(int fallback) const {
    int count = 0;
    if (!m_api.num_archs || !m_api.archs || m_api.num_archs(&count) != 0 || count <= 0)
      return {fallback}; // an NVRTC before 11.2: let it say itself whether it knows the card
    std::vector<int> archs(size_t(count), 0);
    if (m_api.archs(archs.data()) != 0) return {fallback};
    return archs;
  }

  Vendor m_vendor;
  loader::Opened m_library;
  RtcApi m_api;
  std::string m_name;
};

Expected<std::unique_ptr<Compiler>> make_compiler(Vendor vendor, loader::Opened library,
                                                  const std::string& prefix,
                                                  const std::string& label) {
  RtcApi api;
  const auto bind = [&](auto& fn, const std::string& suffix) {
    using Fn = std::remove_reference_t<decltype(fn)>;
    fn = loader::symbol_as<Fn>(library, (prefix + suffix).c_str());
    return fn != nullptr;
  };
  const bool nvidia = vendor == Vendor::nvidia;
  const bool complete = bind(api.create, "CreateProgram") && bind(api.compile, "CompileProgram") &&
                        bind(api.log_size, "GetProgramLogSize") && bind(api.log, "GetProgramLog") &&
                        bind(api.code_size, nvidia ? "GetCUBINSize" : "GetCodeSize") &&
                        bind(api.code, nvidia ? "GetCUBIN" : "GetCode") &&
                        bind(api.destroy, "DestroyProgram") && bind(api.version, "Version");
  if (!complete)
    return make_error(fmt::format("{} ({}) lacks {}CreateProgram, CompileProgram or another call "
                                  "the kernels need",
                                  label, library.path, prefix));
  bind(api.error_string, "GetErrorString");
  if (nvidia) {
    bind(api.ptx_size, "GetPTXSize");
    bind(api.ptx, "GetPTX");
    bind(api.num_archs, "GetNumSupportedArchs");
    bind(api.archs, "GetSupportedArchs");
  }
  int major = 0, minor = 0;
  api.version(&major, &minor);
  return std::unique_ptr<Compiler>(std::make_unique<RtcCompiler>(
      vendor, std::move(library), api, fmt::format("{} {}.{}", label, major, minor)));
}

// FNV-1a, 64 bits: a cache key, not a defence against anyone.
std::string file_safe(std::string text) {
  for (char& ch : text)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '_' && ch != '-')
      ch = '_';
  return text;
}

std::string first_error_line(const std::string& log, const std::string& status) {
  std::istringstream lines(log);
  std::string first_nonempty;
  for (std::string line; std::getline(lines, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (first_nonempty.empty()) first_nonempty = line;
    if (line.find("error") != std::string::npos) return line;
  }
  return first_nonempty.empty() ? status : first_nonempty;
}

// A cached image; none when it is not a regular file of at most 256 MiB ($SDPA_DOCTOR_KERNEL_CACHE
// is the user's: a FIFO or a device there is compiled over, never read).
std::optional<std::string> read_file(const fs::path& path) {
  auto bytes = read_regular_file(path.string(), path.string(), int64_t{256} << 20);
  if (!bytes || bytes->empty()) return std::nullopt;
  return std::move(*bytes);
}

// Through core's one atomic write: readers see the whole image or none.
bool store_file(const fs::path& path, const std::string& bytes) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  // An empty directory where the image goes (never the user's files: the name is a hash of ours)
  // would make the rename fail; a FIFO or a link is replaced by the rename itself.
  if (fs::is_directory(fs::symlink_status(path, ec))) fs::remove(path, ec);
  return write_file_atomically(path.string(), bytes).has_value();
}

} // namespace

Expected<std::unique_ptr<Compiler>> open_hiprtc(const loader::SearchContext& context,
                                                const loader::Opened* hip_runtime) {
  auto library = loader::open(loader::Library::hiprtc, context);
  if (library) return make_compiler(Vendor::amd, std::move(*library), "hiprtc", "hipRTC");
  if (hip_runtime && loader::symbol(*hip_runtime, "hiprtcCreateProgram"))
    return make_compiler(Vendor::amd, *hip_runtime, "hiprtc", "hipRTC");
  return make_error("no hipRTC: " + library.error().message);
}

Expected<std::unique_ptr<Compiler>> open_nvrtc(const loader::SearchContext& context) {
  auto library = loader::open(loader::Library::nvrtc, context);
  if (!library) return make_error("no NVRTC: " + library.error().message);
  // NVRTC opens its builtins by soname from its own folder ($ORIGIN). Where an interposed dlopen
  // breaks that lookup (AddressSanitizer's), the copy already loaded from that folder is found.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(library->path).parent_path(), ec))
    if (e.path().filename().string().rfind("libnvrtc-builtins.so", 0) == 0)
      ::dlopen(e.path().c_str(), RTLD_NOW | RTLD_LOCAL); // kept for the process, as NVRTC is
  return make_compiler(Vendor::nvidia, std::move(*library), "nvrtc", "NVRTC");
}

Expected<std::string> nvidia_target(int sm, const std::vector<int>& supported,
                                    const std::string& compiler_name) {
  if (std::find(supported.begin(), supported.end(), sm) != supported.end())
    return fmt::format("sm_{}", sm);
  int below = 0;
  for (int arch : supported)
    if (arch < sm) below = std::max(below, arch);
  if (below > 0) return fmt::format("compute_{}", below);
  return make_error(fmt::format("no {} target for sm_{}: it builds for sm_{} and newer only",
                                compiler_name, sm,
                                supported.empty() ? 0 : *std::min_element(supported.begin(),
                                                                          supported.end())));
}

std::vector<std::string> kernel_options(Vendor vendor, const std::string& target, Entries entries) {
  std::vector<std::string> options;
  if (vendor == Vendor::amd) options = {"--offload-arch=" + target, "-O3"};
  else options = {"--gpu-architecture=" + target};
  options.push_back("-std=c++17");
  options.push_back(fmt::format("-DSDPA_HOST_PARAMS_SIZE={}", sizeof(AttnParams)));
  if (entries == Entries::flash) options.push_back("-DSDPA_WITH_MATH=0");
  if (entries == Entries::math) options.push_back("-DSDPA_WITH_FLASH=0");
  return options;
}

std::string cache_file_name(const std::vector<SourceFile>& sources,
                            const std::vector<std::string>& options, const std::string& target,
                            const std::string& compiler, const std::string& format) {
  cache::KeyHash hash;
  for (const SourceFile& f : sources) {
    hash.add(f.name);
    hash.add(f.text);
  }
  for (const std::string& o : options) hash.add(o);
  return file_safe(fmt::format("sdpa-{}-{}-{:016x}.{}", target, compiler, hash.value, format));
}

std::string default_cache_dir() {
  if (const char* dir = std::getenv("SDPA_DOCTOR_KERNEL_CACHE"); dir && *dir)
    return std::string_view(dir) == "off" ? std::string{} : std::string(dir);
  return cache::folder("kernels");
}

Build build_kernels(const Compiler& compiler, const std::string& device_arch, Entries entries,
                    const std::string& cache_dir, const std::vector<SourceFile>& sources) {
  Build build;
  build.compiler = fmt::format("{} ({})", compiler.name(), compiler.library().path);
  auto target = compiler.target_for(device_arch);
  if (!target) {
    build.failure = target.error().message;
    return build;
  }
  const std::vector<std::string> options = kernel_options(compiler.vendor(), *target, entries);
  const std::string format = compiler.vendor() == Vendor::amd ? "hsaco"
                             : starts_with(*target, "sm_") ? "cubin"
                                                           : "ptx";
  const fs::path file = cache_dir.empty() ? fs::path{}
                                          : fs::path(cache_dir) / cache_file_name(sources, options,
                                                                                  *target,
                                                                                  compiler.name(),
                                                                                  format);
  if (!file.empty())
    if (auto bytes = read_file(file)) {
      build.image = CodeImage{std::move(*bytes), format, *target};
      build.from_cache = true;
      build.cache_file = file.string();
      cache::mark_used(file);
      return build;
    }
  const auto start = std::chrono::steady_clock::now();
  CompileOutput out = compiler.compile(sources, *target, options);
  build.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  build.log = std::move(out.log);
  if (!out.image) {
    build.compile_failed = true;
    build.failure = fmt::format("{} for {} ({}): {}", k_reference_compile_failure, *target,
                                compiler.name(), first_error_line(build.log, out.status));
    return build;
  }
  build.image = std::move(out.image);
  if (!file.empty()) {
    const cache::FolderLock lock(cache_dir);
    const auto stored = fs::file_time_type::clock::now();
    if (store_file(file, build.image->bytes)) build.cache_file = file.string();
    cache::evict_least_recently_used(cache_dir, "." + format, k_kernel_cache_bytes, stored);
  }
  return build;
}

void evict(const Build& build) {
  std::error_code ec;
  if (build.from_cache && !build.cache_file.empty()) fs::remove(build.cache_file, ec);
}

} // namespace sdpa_doctor::kernels::rtc
