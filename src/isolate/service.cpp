// isolate/service: a helper process for the length of a run (see isolate.hpp, Service).
#include "isolate/isolate.hpp"

#include "core/paths.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sdpa_doctor::isolate {

Expected<std::unique_ptr<Service>> Service::start(const Command& cmd, const std::string& log_path) {
  if (cmd.argv.empty()) return make_error("empty command");
  std::string path = cmd.argv[0];
  if (path.find('/') == std::string::npos) {
    auto found = find_on_path(path);
    if (!found) return make_error(fmt::format("cannot execute '{}': not found in PATH", path));
    path = found->string();
  }
  // Built before fork: the child must not allocate.
  const std::vector<std::string> env = child_environment(cmd, environ);
  std::vector<char*> argv, envp;
  for (const auto& a : cmd.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return make_error(fmt::format("cannot open '{}': {}", log_path, std::strerror(errno)));
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log);
    if (devnull >= 0) ::close(devnull);
    return make_error(fmt::format("fork failed: {}", std::strerror(errno)));
  }
  if (pid == 0) { // async-signal-safe calls only from here on
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(exit_code::exec_failed);
    sigset_t empty;
    sigemptyset(&empty);
    ::sigprocmask(SIG_SETMASK, &empty, nullptr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGPIPE, &dfl, nullptr); // the doctor ignores it; exec keeps an ignored signal
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::execve(path.c_str(), argv.data(), envp.data());
    ::_exit(exit_code::exec_failed);
  }
  ::setpgid(pid, pid); // both sides, so a kill right after start already reaches the group
  ::close(log);
  if (devnull >= 0) ::close(devnull);
  return std::unique_ptr<Service>(new Service(pid));
}

bool Service::running() {
  if (m_reaped) return false;
  int status = 0;
  if (::waitpid(m_pid, &status, WNOHANG) == m_pid) m_reaped = true;
  return !m_reaped;
}

Service::~Service() {
  ::kill(-m_pid, SIGKILL); // the server and every child it forked
  if (!m_reaped) {
    int status = 0;
    while (::waitpid(m_pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

} // namespace sdpa_doctor::isolate
