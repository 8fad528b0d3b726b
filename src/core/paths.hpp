// core/paths: where the doctor's own files are, relative to its executable, so the same binary
// works from the build tree, an install prefix or a copied prefix. Depends on the standard library.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace sdpa_doctor {

// Directory of the running executable (/proc/self/exe), empty if it cannot be read.
std::filesystem::path executable_dir();

// The data directory: $SDPA_DOCTOR_DATA_DIR, else <exe>/share/sdpa-doctor (build tree), else
// <exe>/../share/sdpa-doctor (install prefix). nullopt when none holds known_issues.json.
std::optional<std::filesystem::path> data_dir();

// A worker executable beside the doctor (e.g. "sdpa-doctor-torch-worker"), nullopt if absent.
std::optional<std::filesystem::path> find_worker(const std::string& name);

// The LibTorch plugin built with this doctor (sdpa-doctor-torch-plugin.so beside it in the build
// tree, in ../lib/sdpa-doctor of an install prefix), nullopt when it was built without LibTorch.
inline constexpr const char* k_torch_plugin_file = "sdpa-doctor-torch-plugin.so";
std::optional<std::filesystem::path> built_in_torch_plugin();

// The first executable `name` in the directories of $PATH, as `sh` would find it; nullopt if none.
std::optional<std::filesystem::path> find_on_path(const std::string& name);

// Where temporary directories go: $TMPDIR when it names a directory this process can write,
// else /tmp. (std::filesystem::temp_directory_path gives an empty path for a missing $TMPDIR.)
std::string temp_directory();

} // namespace sdpa_doctor
