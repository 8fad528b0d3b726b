// Shared by the hardening tests: the doctor's workers in this build, process and resource
// observations from /proc, and the shape of a usage error.
#pragma once

#include "support/run_binary.hpp"

#include <string>
#include <vector>

namespace sdpa_hardening {

// The torch worker beside the doctor, or empty when this build has no LibTorch.
std::string torch_worker();
// A python that imports torch (the one the build was configured with), or empty.
std::string python_with_torch();

// Resets VmHWM to the current RSS (clear_refs 5); false where the kernel does not allow it.
bool reset_vm_hwm();

// Pids of live processes (not zombies, not this one) whose command line contains `needle`.
std::vector<int> processes_with_cmdline(const std::string& needle);

// A file of `bytes` that takes no disk space (ftruncate).
void make_sparse_file(const std::string& path, long long bytes);
void make_executable(const std::string& path, const std::string& content);

// Empty when `run` is a clean usage error: exit 2, nothing on stdout, one line on stderr starting
// `sdpa-doctor: error:` (plus CLI11's usage hint), no crash text. Else what is wrong.
std::string usage_error_problem(const sdpa_test::RunResult& run);
// Empty when `run` shows no sign of a crash of the doctor (signal, sanitizer, terminate, trace).
std::string crash_problem(const sdpa_test::RunResult& run);

} // namespace sdpa_hardening
