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

} // namespace sdpa_doctor
