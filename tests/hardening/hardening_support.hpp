// Shared by the hardening tests: the doctor's workers in this build, process and resource
// observations from /proc, and the shape of a usage error.
#pragma once

#include "support/run_binary.hpp"

#include <functional>
#include <map>
#include <ostream>
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

// ---- the bad-input tables (bad_input_*_test.cpp) ----

// One row of a table of command lines that must each be a clean usage error.
struct Row {
  const char* name;
  // After the binary; "@" at the start is the fixture directory, "%" the golden reports (only
  // read).
  std::vector<std::string> argv;
  bool small_plan = true; // append k_small_plan (for `check` rows)
  std::map<std::string, std::string> env = {}; // set for this row only
};
// gtest names a failing row by this instead of its bytes.
void PrintTo(const Row& row, std::ostream* os);

// A folder of the files a table's rows point at, written by `fill` when it is made (once per
// process: hold it in a function-local static) and removed at exit.
class FixtureDir {
public:
  explicit FixtureDir(const std::function<void(const sdpa_test::TempDir&)>& fill) { fill(m_dir); }
  const std::string& path() const { return m_dir.path(); }

private:
  sdpa_test::TempDir m_dir;
};

// The tiny plan every `check` row gets, so an input that is wrongly accepted shows up as a wrong
// exit code in seconds instead of a full run.
extern const std::vector<std::string> k_small_plan;

// The doctor's argv for one row: `args` after the binary, an argument starting with "@" taken
// inside `fixture_dir`, one starting with "%" among the golden reports, and k_small_plan last
// for a `check` row when `small_plan` (flags after it would be taken as its values).
std::vector<std::string> row_argv(const std::vector<std::string>& args,
                                  const std::string& fixture_dir, bool small_plan = true);

// One row through the binary, with a 30 s timeout (a hang is a failed row, not a stuck suite).
struct RowRun {
  sdpa_test::RunResult run;
  double seconds = 0;  // how long it took
  std::string shown;   // the argv, each argument quoted, for a failure message
};
RowRun run_row(const std::vector<std::string>& argv,
               const std::map<std::string, std::string>& env = {});

} // namespace sdpa_hardening
