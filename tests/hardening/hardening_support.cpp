#include "hardening/hardening_support.hpp"

#include "core/build_info.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace sdpa_hardening {

namespace fs = std::filesystem;

// The LibTorch worker, where its plugin was built with the doctor (else it has nothing to load
// but what a first-use build would make).
std::string torch_worker() {
  const std::string path = sdpa_test::build_path("sdpa-doctor-torch-worker");
  const std::string plugin = sdpa_test::build_path("sdpa-doctor-torch-plugin.so");
  return ::access(path.c_str(), X_OK) == 0 && ::access(plugin.c_str(), R_OK) == 0 ? path
                                                                                 : std::string();
}

std::string python_with_torch() {
  const std::string python = sdpa_doctor::build_info::k_python;
  if (python.empty() || ::access(python.c_str(), X_OK) != 0) return {};
  auto run = sdpa_test::run_binary({python, "-c", "import torch"}, {{}, {}, {}, 120});
  return run.exit_code == 0 ? python : std::string();
}

bool reset_vm_hwm() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return bool(clear);
}

std::vector<int> processes_with_cmdline(const std::string& needle) {
  std::vector<int> found;
  DIR* proc = ::opendir("/proc");
  if (!proc) return found;
  while (dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == ::getpid()) continue;
    const std::string dir = std::string("/proc/") + e->d_name;
    std::string cmdline = sdpa_test::read_file(dir + "/cmdline");
    if (cmdline.empty()) continue; // kernel threads and zombies have none
    std::string stat = sdpa_test::read_file(dir + "/stat");
    const auto paren = stat.rfind(')');
    if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z') continue;
    for (char& c : cmdline)
      if (c == '\0') c = ' ';
    if (cmdline.find(needle) != std::string::npos) found.push_back(int(pid));
  }
  ::closedir(proc);
  return found;
}

void make_sparse_file(const std::string& path, long long bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + path);
  const int rc = ::ftruncate(fd, bytes);
  ::close(fd);
  if (rc != 0) throw std::runtime_error("cannot size " + path);
}

void make_executable(const std::string& path, const std::string& content) {
  sdpa_test::write_file(path, content);
  fs::permissions(path, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read);
}

std::string crash_problem(const sdpa_test::RunResult& run) {
  if (run.signal != 0) return "killed by signal " + std::to_string(run.signal);
  for (const char* text : {"terminate called", "Aborted", "AddressSanitizer", "runtime error:",
                           "LeakSanitizer", "Segmentation fault", "internal error", "#0 0x",
                           "#1 0x", "[run_binary: killed after timeout]"})
    if (run.err.find(text) != std::string::npos || run.out.find(text) != std::string::npos)
      return std::string("output contains '") + text + "'";
  if (run.exit_code == 4) return "exit 4 (the doctor itself failed)";
  return {};
}

std::string usage_error_problem(const sdpa_test::RunResult& run) {
  if (auto crash = crash_problem(run); !crash.empty()) return crash;
  if (run.exit_code != 2) return "exit code " + std::to_string(run.exit_code) + ", expected 2";
  if (!run.out.empty()) return "stdout is not empty: " + run.out.substr(0, 200);
  std::vector<std::string> lines;
  std::istringstream in(run.err);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  if (lines.empty()) return "nothing on stderr";
  if (lines[0].rfind("sdpa-doctor: error: ", 0) != 0)
    return "stderr does not start with 'sdpa-doctor: error: ': " + lines[0];
  if (lines.size() > 2 || (lines.size() == 2 && lines[1].find("--help") == std::string::npos))
    return "more than one error line: " + run.err.substr(0, 400);
  for (char c : run.err)
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\n') || c == 0x7F)
      return "a control character reaches the terminal: " + run.err.substr(0, 400);
  // One line a reader can take in: a message and a path or two, not a dump of a number.
  if (lines[0].size() > 320) return "the error line is " + std::to_string(lines[0].size()) +
                                    " characters long: " + lines[0].substr(0, 160) + "...";
  return {};
}

void PrintTo(const Row& row, std::ostream* os) { *os << row.name; }

const std::vector<std::string> k_small_plan = {"--probe", "reference", "--variant", "ref-math",
                                               "--case", "dtype=fp32,b=1,h=1,l=8,d=8"};

std::vector<std::string> row_argv(const std::vector<std::string>& args,
                                  const std::string& fixture_dir, bool small_plan) {
  std::vector<std::string> argv = {sdpa_test::doctor()};
  for (const auto& a : args)
    argv.push_back(a.empty()     ? a
                   : a[0] == '@' ? fixture_dir + a.substr(1)
                   : a[0] == '%' ? sdpa_test::source_path("tests/report/golden") + a.substr(1)
                                 : a);
  if (small_plan && !args.empty() && args[0] == "check")
    argv.insert(argv.end(), k_small_plan.begin(), k_small_plan.end());
  return argv;
}

RowRun run_row(const std::vector<std::string>& argv,
               const std::map<std::string, std::string>& env) {
  RowRun out;
  sdpa_test::RunOptions options;
  options.timeout_s = 30;
  options.set_env = env;
  const auto start = std::chrono::steady_clock::now();
  out.run = sdpa_test::run_binary(argv, options);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& a : argv) out.shown += " '" + a + "'";
  return out;
}

} // namespace sdpa_hardening
