#include "loader/loader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
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
  case Library::nvml: return "nvml";
  case Library::nvrtc: return "nvrtc";
  }
  return "unknown";
}

std::vector<std::string> sonames(Library library) {
  switch (library) {
  case Library::hip_runtime:
    return {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"};
  case Library::hiprtc: return {"libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so"};
  // AMD SMI's soname follows its own major version (24 in ROCm 6.1, 26 in ROCm 7.0).
  case Library::amd_smi:
    return {"libamd_smi.so.26", "libamd_smi.so.25", "libamd_smi.so.24", "libamd_smi.so"};
  case Library::rocm_smi:
    return {"librocm_smi64.so.7", "librocm_smi64.so.6", "librocm_smi64.so.5", "librocm_smi64.so.1",
            "librocm_smi64.so"};
  case Library::cuda_driver: return {"libcuda.so.1"};
  case Library::nvml: return {"libnvidia-ml.so.1"};
  case Library::nvrtc:
    return {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"};
  }
  return {};
}

namespace {

bool is_cuda(Library library) {
  return library == Library::cuda_driver || library == Library::nvml || library == Library::nvrtc;
}

// "rocm-6.4.0" -> {6, 4, 0}; "rocm" -> {}: a version-less folder sorts after every numbered one.
std::vector<int> rocm_folder_version(const std::string& name) {
  std::vector<int> parts;
  size_t i = name.find_first_of("0123456789");
  while (i != std::string::npos && i < name.size()) {
    size_t end = i;
    while (end < name.size() && name[end] >= '0' && name[end] <= '9')
      ++end;
    parts.push_back(std::atoi(name.substr(i, std::min<size_t>(end - i, 9)).c_str()));
    i = name.find_first_of("0123456789", end);
  }
  return parts;
}

// /opt/rocm first (the installation the machine calls its own), then /opt/rocm-X.Y.Z newest first.
std::vector<SearchPlace> opt_rocm_places(const std::string& opt_root) {
  std::vector<std::string> versioned;
  std::error_code ec;
  for (fs::directory_iterator it(opt_root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("rocm-", 0) == 0) versioned.push_back(name);
  }
  std::sort(versioned.begin(), versioned.end(), [](const std::string& a, const std::string& b) {
    return rocm_folder_version(a) > rocm_folder_version(b);
  });
  std::vector<SearchPlace> out;
  const fs::path root(opt_root);
  out.push_back({(root / "rocm/lib").string(), (root / "rocm/lib").string()});
  for (const std::string& name : versioned) {
    const std::string dir = (root / name / "lib").string();
    out.push_back({dir, dir});
  }
  return out;
}

// Why a folder of the torch under test is searched: TheRock's packages say which one they are.
std::string torch_folder_why(const std::string& dir) {
  const fs::path p(dir);
  for (const fs::path& part : p)
    if (part.string().rfind("_rocm_sdk_", 0) == 0)
      return fmt::format("TheRock package {} of the torch under test", part.string());
  return "torch/lib of the torch under test";
}

// The same folder reached twice (ROCM_PATH=/opt/rocm, a symlinked version) is searched once.
std::vector<SearchPlace> without_repeats(std::vector<SearchPlace> places) {
  std::set<std::string> seen;
  std::vector<SearchPlace> out;
  for (SearchPlace& place : places) {
    std::error_code ec;
    std::string key = place.dir;
    if (!place.dir.empty()) {
      const fs::path canonical = fs::canonical(place.dir, ec);
      if (ec) continue; // a folder that does not exist holds nothing to try
      key = canonical.string();
    }
    if (seen.insert(key).second) out.push_back(std::move(place));
  }
  return out;
}

std::string real_path_of(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  std::string path = fallback;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name)
    path = map->l_name;
  std::error_code ec;
  const fs::path canonical = fs::canonical(path, ec);
  return ec ? path : canonical.string();
}

std::string dl_error() {
  const char* text = ::dlerror();
  return text ? text : "unknown dlopen error";
}

// dlopen's own words for "no file of that name on the system's path": not an attempt at a file.
bool not_on_system_path(const std::string& error) {
  return error.find("No such file or directory") != std::string::npos;
}

} // namespace

std::vector<SearchPlace> search_places(Library library, const SearchContext& context) {
  std::vector<SearchPlace> places;
  for (const std::string& dir : context.torch_lib_dirs) {
    if (dir.empty()) continue;
    places.push_back({dir, torch_folder_why(dir)});
    // PyPI's CUDA wheels put NVRTC beside torch in site-packages: nvidia/cu13/lib (CUDA 13),
    // nvidia/cuda_nvrtc/lib (CUDA 12).
    if (library == Library::nvrtc && fs::path(dir).filename() == "lib" &&
        fs::path(dir).parent_path().filename() == "torch") {
      const fs::path site = fs::path(dir).parent_path().parent_path();
      for (const char* sub : {"nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"})
        places.push_back({(site / sub).string(), "PyPI's NVRTC beside the torch under test"});
    }
  }
  if (is_cuda(library)) {
    // The driver and NVML come from the system alone: a copy elsewhere would not match the kernel
    // module.
    if (library == Library::nvrtc) {
      if (!context.cuda_path.empty())
        places.push_back({(fs::path(context.cuda_path) / "lib64").string(), "$CUDA_PATH/lib64"});
      places.push_back({"/usr/local/cuda/lib64", "/usr/local/cuda/lib64"});
    }
  } else {
    if (!context.rocm_path.empty())
      places.push_back({(fs::path(context.rocm_path) / "lib").string(), "$ROCM_PATH/lib"});
    for (SearchPlace& place : opt_rocm_places(context.opt_root))
      places.push_back(std::move(place));
  }
  places.push_back({"", "the system's library path (LD_LIBRARY_PATH, ld.so.cache)"});
  if (library == Library::cuda_driver || library == Library::nvml)
    std::erase_if(places, [](const SearchPlace& p) { return !p.dir.empty(); });
  return without_repeats(std::move(places));
}

Expected<Opened> open(Library library, const SearchContext& context) {
  const std::vector<std::string> names = sonames(library);
  const std::vector<SearchPlace> places = search_places(library, context);
  std::vector<std::string> tried;
  for (const SearchPlace& place : places) {
    for (const std::string& soname : names) {
      std::string target = soname;
      if (!place.dir.empty()) {
        std::error_code ec;
        target = (fs::path(place.dir) / soname).string();
        if (!fs::exists(target, ec)) continue;
      }
      ::dlerror();
      if (void* handle = ::dlopen(target.c_str(), RTLD_NOW | RTLD_LOCAL)) {
        Opened opened;
        opened.handle = handle;
        opened.path = real_path_of(handle, target);
        opened.soname = soname;
        opened.why = place.why;
        opened.tried = std::move(tried);
        return opened;
      }
      const std::string error = dl_error();
      if (place.dir.empty() && not_on_system_path(error)) continue;
      // dlerror usually names the file itself; say it once.
      tried.push_back(error.rfind(target, 0) == 0 ? error : fmt::format("{}: {}", target, error));
    }
  }
  std::vector<std::string> where;
  for (const SearchPlace& place : places)
    where.push_back(place.dir.empty() ? place.why : fmt::format("{} ({})", place.dir, place.why));
  std::string message = fmt::format("no {} opened (looked for {} in: {})",
                                    names.front().substr(0, names.front().find('.')),
                                    fmt::join(names, ", "), fmt::join(where, "; "));
  if (!tried.empty()) message += fmt::format("; failed to load: {}", fmt::join(tried, "; "));
  return make_error(std::move(message));
}

void* symbol(const Opened& library, const char* name) {
  return library.handle ? ::dlsym(library.handle, name) : nullptr;
}

std::vector<std::string> mapped_files(std::string_view prefix) {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> files;
  std::string line;
  while (std::getline(maps, line)) {
    // address perms offset dev inode pathname: the path is what follows the fifth field.
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    if (const size_t deleted = path.rfind(" (deleted)"); deleted != std::string::npos)
      path.erase(deleted);
    if (fs::path(path).filename().string().rfind(prefix, 0) == 0) files.insert(path);
  }
  return {files.begin(), files.end()};
}

} // namespace sdpa_doctor::loader
