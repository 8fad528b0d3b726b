#include "worker_process.hpp"

#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <poll.h>
#include <sstream>
#include <stdexcept>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char** environ;

namespace sdpa_test {

nlohmann::json WorkerRun::result(const std::string& case_id) const {
  for (const auto& e : events)
    if (e.value("event", "") == "result" && e.value("case", "") == case_id) return e;
  return nullptr;
}

std::vector<nlohmann::json> WorkerRun::results() const {
  std::vector<nlohmann::json> found;
  for (const auto& e : events)
    if (e.value("event", "") == "result") found.push_back(e);
  return found;
}

namespace {
double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}
} // namespace

WorkerRun run_worker_process(const std::vector<std::string>& argv,
                             const std::map<std::string, std::string>& set_env,
                             const std::vector<std::string>& unset_env, int timeout_s) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& name : unset_env) env.erase(name);
  for (const auto& [k, v] : set_env) env[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  int pipes[3][2];
  for (auto& p : pipes)
    if (pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    setpgid(0, 0);
    const int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    dup2(pipes[0][1], 1);
    dup2(pipes[1][1], 2);
    dup2(pipes[2][1], 3); // dup2 clears FD_CLOEXEC on the copy
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  for (auto& p : pipes) close(p[1]);
  WorkerRun run;
  std::string results;
  std::string* sinks[3] = {&run.out, &run.err, &results};
  pollfd fds[3] = {{pipes[0][0], POLLIN, 0}, {pipes[1][0], POLLIN, 0}, {pipes[2][0], POLLIN, 0}};
  int open_count = 3;
  const double deadline = now_s() + timeout_s;
  while (open_count > 0) {
    const int remaining_ms = int((deadline - now_s()) * 1000);
    if (remaining_ms <= 0) {
      kill(-pid, SIGKILL);
      run.timed_out = true;
      break;
    }
    const int n = poll(fds, 3, remaining_ms);
    if (n < 0 && errno == EINTR) continue;
    for (int i = 0; i < 3; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      const ssize_t r = read(fds[i].fd, buf, sizeof buf);
      if (r > 0) {
        sinks[i]->append(buf, size_t(r));
      } else {
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
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) run.signal = WTERMSIG(status);
  std::istringstream lines(results);
  std::string line;
  while (std::getline(lines, line)) {
    try {
      run.events.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception&) {
      run.broken.push_back(line);
    }
  }
  return run;
}

} // namespace sdpa_test
