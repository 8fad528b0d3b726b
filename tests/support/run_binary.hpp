// Test support: run a real executable with an argv (never a shell), capture its output and exit.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace sdpa_test {

struct RunResult {
  int exit_code = -1;   // -1 when killed by a signal
  int signal = 0;
  bool timed_out = false;
  std::string out;
  std::string err;
  std::string results; // what it wrote on fd 3, with RunOptions::results_fd
};

struct RunOptions {
  std::map<std::string, std::string> set_env;   // added to (or replacing in) the environment
  std::vector<std::string> unset_env;
  std::string cwd;
  int timeout_s = 120;
  bool results_fd = false; // a third pipe on fd 3, as the runner gives a worker for its results
};

RunResult run_binary(const std::vector<std::string>& argv, const RunOptions& options = {});

// Path of the doctor built in this tree, and of a file in the source tree.
std::string doctor();
// Whether `python` is an interpreter that can `import torch` (asked once per interpreter).
bool imports_torch(const std::string& python);
std::string source_path(const std::string& relative);
std::string build_path(const std::string& relative);

// A fresh temporary directory, removed by the destructor.
class TempDir {
public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return m_path; }
  std::string file(const std::string& name) const { return m_path + "/" + name; }

private:
  std::string m_path;
};

std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& content);

// Number of lines in `text`, and whether every line is at most `max` characters.
int line_count(const std::string& text);

// Open file descriptors of this process.
int count_fds();
// Peak resident set (VmHWM) of this process, KiB.
long vm_hwm_kib();

} // namespace sdpa_test
