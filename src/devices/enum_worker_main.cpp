// sdpa-doctor-enum-worker [--hip] [--smi] [--cuda] [--nvml] [--torch-lib DIR]...: prints one JSON
// object on stdout, then exits 0. With no part named all run. --torch-lib names a folder where the diagnosed
// torch keeps its own libraries (torch/lib, TheRock's _rocm_sdk_*/lib): searched first, so the
// worker opens the HIP runtime that torch itself loads. Anything the libraries print goes to
// stderr.
#include "core/io.hpp"
#include "core/status.hpp"
#include "devices/enum_worker.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <unistd.h>

namespace sdpa_doctor::devices::enum_worker {

nlohmann::json library_json(const Expected<loader::Opened>& opened, loader::Library library,
                            const loader::SearchContext& where) {
  if (!opened) {
    // Files of that name that exist and still did not open: broken, not missing.
    std::vector<std::string> found;
    for (const loader::SearchPlace& place : loader::search_places(library, where))
      for (const std::string& soname : loader::sonames(library)) {
        std::error_code ec;
        const auto path = std::filesystem::path(place.dir) / soname;
        if (!place.dir.empty() && std::filesystem::exists(path, ec)) found.push_back(path.string());
      }
    return {{"error", opened.error().message}, {"found", found}};
  }
  return {{"path", opened->path},
          {"soname", opened->soname},
          {"why", opened->why},
          {"tried", opened->tried}};
}

void say_calling(const loader::Opened& library) {
  // Unbuffered and before the call: a library that kills the process cannot lose this line.
  const std::string line =
      std::string(k_calling_mark) + library.path + "\t" + library.why + "\n";
  sdpa_doctor::write_all(STDERR_FILENO, line);
}

} // namespace sdpa_doctor::devices::enum_worker

int main(int argc, char** argv) {
  namespace worker = sdpa_doctor::devices::enum_worker;
  bool hip = false, smi = false, cuda = false, nvml = false;
  sdpa_doctor::loader::SearchContext where;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--hip") == 0) {
      hip = true;
    } else if (std::strcmp(argv[i], "--smi") == 0) {
      smi = true;
    } else if (std::strcmp(argv[i], "--cuda") == 0) {
      cuda = true;
    } else if (std::strcmp(argv[i], "--nvml") == 0) {
      nvml = true;
    } else if (std::strcmp(argv[i], "--torch-lib") == 0 && i + 1 < argc) {
      where.torch_lib_dirs.emplace_back(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: sdpa-doctor-enum-worker [--hip] [--smi] [--cuda] [--nvml] "
                           "[--torch-lib DIR]...\n");
      return sdpa_doctor::exit_code::usage;
    }
  }
  if (!hip && !smi && !cuda && !nvml) hip = smi = cuda = nvml = true;
  if (const char* rocm = std::getenv("ROCM_PATH")) where.rocm_path = rocm;

  // The runtimes may write to stdout; keep stdout for our one JSON object.
  std::fflush(stdout);
  const int result_fd = ::dup(STDOUT_FILENO);
  if (result_fd < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
    return sdpa_doctor::exit_code::internal;

  nlohmann::json out = {{"v", 1}};
  try {
    if (hip) out["hip"] = worker::query_hip(where);
    if (smi) out["smi"] = worker::query_smi(where);
    if (cuda) out["cuda"] = worker::query_cuda(where);
    if (nvml) out["nvml"] = worker::query_nvml(where);
  } catch (const std::exception& e) {
    out["error"] = e.what();
  }
  const std::string text =
      out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  return sdpa_doctor::write_all(result_fd, text) ? sdpa_doctor::exit_code::ok
                                                 : sdpa_doctor::exit_code::internal;
}
