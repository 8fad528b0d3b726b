#include "core/paths.hpp"

#include <cstdlib>
#include <system_error>
#include <unistd.h>

namespace sdpa_doctor {

namespace fs = std::filesystem;

fs::path executable_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return exe.parent_path();
}

std::optional<fs::path> data_dir() {
  std::error_code ec;
  if (const char* env = std::getenv("SDPA_DOCTOR_DATA_DIR"); env && *env) {
    if (fs::is_directory(env, ec)) return fs::path(env);
  }
  const fs::path exe = executable_dir();
  if (exe.empty()) return std::nullopt;
  for (const fs::path& candidate :
       {exe / "share" / "sdpa-doctor", exe.parent_path() / "share" / "sdpa-doctor"}) {
    if (fs::exists(candidate / "known_issues.json", ec)) return candidate;
  }
  return std::nullopt;
}

std::optional<fs::path> find_worker(const std::string& name) {
  const fs::path exe = executable_dir();
  if (exe.empty()) return std::nullopt;
  const fs::path candidate = exe / name;
  if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  return std::nullopt;
}

std::optional<fs::path> built_in_torch_plugin() {
  const fs::path exe = executable_dir();
  if (exe.empty()) return std::nullopt;
  for (const fs::path& candidate :
       {exe / k_torch_plugin_file, exe.parent_path() / "lib" / "sdpa-doctor" / k_torch_plugin_file})
    if (::access(candidate.c_str(), R_OK) == 0) return candidate;
  return std::nullopt;
}

std::optional<fs::path> find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (!path) return std::nullopt;
  std::string_view rest = path;
  while (!rest.empty()) {
    const size_t colon = rest.find(':');
    fs::path candidate = fs::path(std::string(rest.substr(0, colon))) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return std::nullopt;
}

std::string temp_directory() {
  std::error_code ec;
  if (const char* env = std::getenv("TMPDIR"); env && *env == '/' && fs::is_directory(env, ec) &&
                                               ::access(env, W_OK | X_OK) == 0)
    return env;
  return "/tmp";
}

} // namespace sdpa_doctor
