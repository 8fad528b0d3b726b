// run/torch_plugin: which LibTorch plugin the libtorch probe loads, so that it tests the same torch
// as the python probe. The one built with the doctor when that is the torch under test; else one
// built for that torch by an earlier check (the cache's "workers" folder); else built now, with
// one compiler call against that torch's headers and torch/lib, as PyTorch's C++ extensions are.
// No compiler, or a build that fails: one finding, and the libtorch cells say why they did not run.
// A cached plugin is verified before use (a regular ELF shared object for this machine whose
// content hash is the one recorded when it was built) and built again once when it is not.
// A plugin built here is kept in the cache's workers/ folder under a hash of that torch's path,
// version, build and libtorch_cpu size, the plugin's source and the compiler; the compiler runs in
// its own process group, killed with its children at --plugin-build-timeout or an interrupt.
// check::choose_torch_plugin holds a shared flock on the plugin while the check runs, so that no
// other check evicts it.
#pragma once

#include "core/cache.hpp"
#include "core/expected.hpp"
#include "core/model.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace sdpa_doctor::run {

// A torch install as the doctor tells one from another, read without importing it: its torch/lib
// (canonical), version and build (torch/version.py) and the size of its libtorch_cpu.so.
struct TorchIdentity {
  std::string lib_dir;
  std::string version;
  std::string git_version;
  int64_t libtorch_cpu_size = -1;
  bool operator==(const TorchIdentity&) const = default;
};

// The identity of the torch whose torch/lib is `lib_dir`; an error naming what is missing when it
// has no libtorch_cpu.so or no version.py (a regular file) naming its version.
Expected<TorchIdentity> torch_identity(const std::string& lib_dir);

// The identity a plugin's sidecar (sdpa-doctor-torch-plugin.json, written when it was built) names;
// nullopt for text that is not one.
std::optional<TorchIdentity> identity_from_sidecar(const std::string& json_text);

// What torch_facts.py printed: what a build against that torch needs.
struct TorchBuildFacts {
  std::string version;
  std::vector<std::string> include_dirs;
  std::string lib_dir;
  int abi = -1; // _GLIBCXX_USE_CXX11_ABI
};
// The facts torch_facts.py prints, one key=value a line (a trailing CR is dropped). An error, one
// line, says what in them was wrong: a NUL byte, more than k_max_torch_facts_bytes, a missing
// key, an include line naming no folder, an ABI that is neither 0 nor 1.
inline constexpr size_t k_max_torch_facts_bytes = 64 << 10;
Expected<TorchBuildFacts> parse_torch_facts(const std::string& text);

// The one compiler call that builds the plugin: C++20, optimised, position-independent, only the
// entry point exported, that torch's headers as system headers and its ABI, libtorch, torch_cpu
// and c10 from its torch/lib with an RPATH there.
std::vector<std::string> plugin_compile_command(const std::vector<std::string>& compiler,
                                                const TorchBuildFacts& facts,
                                                const std::string& source,
                                                const std::string& output);

// Why the plugin file at `path` must not be loaded: not a regular file, not an ELF shared object
// for this machine, or content other than what its `.sum` file recorded when it was built (or no
// such record). Empty when it may be loaded.
std::string plugin_file_problem(const std::string& path);

// Records the content hash of the plugin at `path` in `path`.sum; false when it cannot.
bool record_plugin_sum(const std::string& path);

struct TorchPlugin {
  std::string path;    // the plugin to load; empty when there is none
  std::string origin;  // "built with the doctor", "built earlier (cache)", "built now in 63 s"
  std::string why_not; // when path is empty: the reason of the libtorch cells
  std::optional<Finding> finding;
  cache::FileInUse in_use; // a cached plugin no other check evicts while this one holds it
};

struct PluginBuildOptions {
  std::string python;     // the interpreter whose torch it is (torch_facts.py runs with it)
  std::string cache_dir;  // where built plugins are kept; empty: scratch_dir, for this run only
  std::string scratch_dir;
  std::function<void(const std::string&)> progress; // one line at a time; none = silent
  std::chrono::milliseconds deadline{900'000};       // the compiler's, apart from any worker's
  // How long to wait for another check that holds the cache's lock before building privately.
  std::chrono::milliseconds lock_deadline{120'000};
  const std::atomic<bool>* interrupted = nullptr; // once set: no wait, the compiler killed
};

// The plugin for the torch whose torch/lib is `lib_dir`; empty `lib_dir` (no torch located): the
// one built with the doctor, if any.
TorchPlugin torch_plugin_for(const std::string& lib_dir, const PluginBuildOptions& options);

} // namespace sdpa_doctor::run
