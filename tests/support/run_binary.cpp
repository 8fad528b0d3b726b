#include "support/run_binary.hpp"

#include <map>

#include <cerrno>
#include <dirent.h>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <poll.h>
#include <sstream>
#include <stdexcept>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char** environ;

namespace sdpa_test {

namespace {
double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}
} // namespace

RunResult run_binary(const std::vector<std::string>& argv, const RunOptions& options) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& name : options.unset_env) env.erase(name);
  for (const auto& [k, v] : options.set_env) env[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  const int streams = options.results_fd ? 3 : 2;
  int pipes[3][2];
  for (int i = 0; i < streams; ++i)
    if (pipe2(pipes[i], O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    setpgid(0, 0);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    for (int i = 0; i < streams; ++i) dup2(pipes[i][1], i + 1); // the copy loses FD_CLOEXEC
    if (!options.cwd.empty() && chdir(options.cwd.c_str()) != 0) _exit(126);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  for (int i = 0; i < streams; ++i) close(pipes[i][1]);
  RunResult result;
  pollfd fds[3] = {{pipes[0][0], POLLIN, 0}, {pipes[1][0], POLLIN, 0}, {-1, POLLIN, 0}};
  if (options.results_fd) fds[2].fd = pipes[2][0];
  std::string* sinks[3] = {&result.out, &result.err, &result.results};
  int open_count = streams;
  const double deadline = now_s() + options.timeout_s;
  while (open_count > 0) {
    int remaining_ms = int((deadline - now_s()) * 1000);
    if (remaining_ms <= 0) {
      kill(-pid, SIGKILL);
      result.timed_out = true;
      break;
    }
    int n = poll(fds, nfds_t(streams), remaining_ms);
    if (n < 0 && errno == EINTR) continue;
    for (int i = 0; i < streams; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      ssize_t r = read(fds[i].fd, buf, sizeof buf);
      if (r > 0) sinks[i]->append(buf, size_t(r));
      else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_count;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  int status = 0;
  waitpid(pid, &status, 0);
  if (result.timed_out) result.err += "\n[run_binary: killed after timeout]\n";
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

std::string doctor() { return SDPA_DOCTOR_BINARY; }
std::string source_path(const std::string& relative) {
  return std::string(SDPA_DOCTOR_SOURCE_DIR) + "/" + relative;
}
std::string build_path(const std::string& relative) {
  return std::string(SDPA_DOCTOR_BUILD_DIR) + "/" + relative;
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "sdpa-test-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  m_path = tmpl;
}
TempDir::~TempDir() {
  std::error_code ec;
  // Restore permissions a test may have removed, then delete.
  for (auto it = std::filesystem::recursive_directory_iterator(
           m_path, std::filesystem::directory_options::skip_permission_denied, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    std::filesystem::permissions(it->path(), std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
  }
  std::filesystem::remove_all(m_path, ec);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
void write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
}

int line_count(const std::string& text) {
  int n = 0;
  for (char c : text) n += c == '\n';
  if (!text.empty() && text.back() != '\n') ++n;
  return n;
}

int count_fds() {
  int n = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return -1;
  while (dirent* e = ::readdir(dir)) n += e->d_name[0] != '.';
  ::closedir(dir);
  return n - 1; // the directory stream itself
}

long vm_hwm_kib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  long value = 0;
  while (status >> key)
    if (key == "VmHWM:" && (status >> value)) return value;
  return 0;
}

bool imports_torch(const std::string& python) {
  static std::map<std::string, bool> asked;
  const auto known = asked.find(python);
  if (known != asked.end()) return known->second;
  const bool yes = !python.empty() && ::access(python.c_str(), X_OK) == 0 &&
                   run_binary({python, "-c", "import torch"}).exit_code == 0;
  asked.emplace(python, yes);
  return yes;
}

} // namespace sdpa_test
