// The search order of loader.hpp and dlopen over it.
#include "loader/loader.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <link.h>
#include <set>

namespace sdpa_doctor::loader {

namespace fs = std::filesystem;

std::string_view to_string(Library library) {
  switch (library) {
  case Library::hip_runtime: return "hip_runtime";
  case Library::hiprtc: return "hiprtc";
  case Library::amd_smi: return "amd_smi";
  case Library::rocm_smi: return "rocm_smi";
  case Library::cuda_driver: return "cuda_driver";
  case Library::nvrtc: return "nvrtc";
  }
  return "unknown";
}

std::vector<std::string> sonames(Library library) {
  switch (library) {
  case Library::hip_runtime:
    return {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"};
  case Library::hiprtc: return {"libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so"};
  case Library::amd_smi:
    return {"libamd_smi.so.26", "libamd_smi.so.25", "libamd_smi.so.24", "libamd_smi.so"};
  case Library::rocm_smi:
    return {"librocm_smi64.so.7", "librocm_smi64.so.6", "librocm_smi64.so.5", "librocm_smi64.so.1",
            "librocm_smi64.so"};
  case Library::cuda_driver: return {"libcuda.so.1", "libcuda.so"};
  case Library::nvrtc:
    return {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"};
  }
  return {};
}

namespace {

bool is_amd(Library library) {
  return library == Library::hip_runtime || library == Library::hiprtc ||
         library == Library::amd_smi || library == Library::rocm_smi;
}

// /opt/rocm first (the installed default), then /opt/rocm-X.Y.Z newest first.
std::vector<fs::path> opt_rocm_dirs(const std::string& opt_root) {
  std::vector<fs::path> versioned;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(opt_root, ec))
    if (entry.path().filename().string().rfind("rocm-", 0) == 0) versioned.push_back(entry.path());
  const auto numbers = [](const fs::path& p) {
    std::vector<int> out;
    const std::string name = p.filename().string().substr(5);
    size_t at = 0;
    while (at < name.size()) {
      out.push_back(std::atoi(name.c_str() + at));
      const size_t dot = name.find('.', at);
      if (dot == std::string::npos) break;
      at = dot + 1;
    }
    return out;
  };
  std::sort(versioned.begin(), versioned.end(),
            [&](const fs::path& a, const fs::path& b) { return numbers(a) > numbers(b); });
  versioned.insert(versioned.begin(), fs::path(opt_root) / "rocm");
  return versioned;
}

} // namespace

std::vector<SearchPlace> search_places(Library library, const SearchContext& context) {
  // The driver comes from the system alone: a copy elsewhere would not match the kernel module.
  if (library == Library::cuda_driver) return {{"", "the system's library path"}};
  std::vector<SearchPlace> places;
  for (const std::string& dir : context.torch_lib_dirs) {
    places.push_back({dir, "torch/lib of the torch under test"});
    // PyPI's CUDA wheels sit beside torch in site-packages: nvidia/cu13/lib (CUDA 13),
    // nvidia/cuda_nvrtc/lib (CUDA 12).
    if (library == Library::nvrtc) {
      const fs::path site = fs::path(dir).parent_path().parent_path();
      places.push_back({(site / "nvidia" / "cu13" / "lib").string(),
                        "PyPI's nvidia-cuda-nvrtc beside the torch under test"});
      places.push_back({(site / "nvidia" / "cuda_nvrtc" / "lib").string(),
                        "PyPI's nvidia-cuda-nvrtc beside the torch under test"});
    }
  }
  if (is_amd(library)) {
    if (!context.rocm_path.empty())
      places.push_back({(fs::path(context.rocm_path) / "lib").string(), "$ROCM_PATH/lib"});
    for (const fs::path& dir : opt_rocm_dirs(context.opt_root))
      places.push_back({(dir / "lib").string(), (dir / "lib").string()});
  } else if (library == Library::nvrtc) {
    if (!context.cuda_path.empty())
      places.push_back({(fs::path(context.cuda_path) / "lib64").string(), "$CUDA_PATH/lib64"});
    places.push_back({"/usr/local/cuda/lib64", "/usr/local/cuda/lib64"});
  }
  places.push_back({"", "the system's library path"});
  return places;
}

Expected<Opened> open(Library library, const SearchContext& context) {
  std::vector<std::string> tried;
  std::set<std::string> seen;
  for (const SearchPlace& place : search_places(library, context))
    for (const std::string& soname : sonames(library)) {
      const std::string path = place.dir.empty() ? soname : (fs::path(place.dir) / soname).string();
      std::error_code ec;
      if (!place.dir.empty() && !fs::exists(path, ec)) continue;
      if (!seen.insert(path).second) continue;
      ::dlerror();
      void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!handle) {
        const char* error = ::dlerror();
        const std::string why = error ? error : "dlopen failed";
        // A bare name the system does not have is simply absent; anything else is worth saying.
        if (!place.dir.empty() || why.find("No such file or directory") == std::string::npos)
          tried.push_back(fmt::format("{}: {}", path, why));
        continue;
      }
      Opened opened{handle, path, soname, place.why, tried};
      link_map* map = nullptr;
      if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name)
        opened.path = fs::weakly_canonical(map->l_name, ec).string();
      return opened;
    }
  std::string message = fmt::format("{} not found", sonames(library).front());
  if (!tried.empty()) message += fmt::format(" (tried {})", fmt::join(tried, "; "));
  return make_error(message);
}

void* symbol(const Opened& library, const char* name) {
  return library.handle ? ::dlsym(library.handle, name) : nullptr;
}

std::vector<std::string> mapped_files(std::string_view prefix) {
  std::vector<std::string> files;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (fs::path(path).filename().string().rfind(prefix, 0) != 0) continue;
    if (std::find(files.begin(), files.end(), path) == files.end()) files.push_back(path);
  }
  return files;
}

} // namespace sdpa_doctor::loader
