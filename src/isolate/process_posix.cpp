#include "isolate/process.hpp"
#include "core/io.hpp"

#include "isolate/isolate.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>

namespace sdpa_doctor::isolate::detail {

// ---- TailBuffer / LogSink ------------------------------------------------------------------

void TailBuffer::append(std::string_view data) {
  m_total += data.size();
  if (data.size() >= m_capacity) {
    m_data.assign(data.substr(data.size() - m_capacity));
    return;
  }
  m_data.append(data);
  if (m_data.size() > 2 * m_capacity) m_data.erase(0, m_data.size() - m_capacity);
}

std::string TailBuffer::str() const {
  if (m_data.size() <= m_capacity) return m_data;
  return m_data.substr(m_data.size() - m_capacity);
}

std::string TailBuffer::since(std::size_t offset) const {
  const std::size_t first_kept = m_total - m_data.size();
  const std::size_t start = std::max(offset, first_kept) - first_kept;
  if (start >= m_data.size()) return {};
  return m_data.substr(start);
}

LogSink::LogSink(const std::string& path, std::size_t cap)
    : m_head_cap(cap / 2), m_tail_cap(cap - cap / 2) {
  m_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

LogSink::~LogSink() {
  if (m_fd < 0) return;
  if (m_past_head > 0) {
    const std::size_t kept = std::min(m_past_head, m_tail_cap);
    if (m_past_head > kept)
      write_all(m_fd, fmt::format("\n[sdpa-doctor: {} bytes cut here ({}); the last {} follow]\n",
                                  m_past_head - kept, format_bytes(int64_t(m_past_head - kept)),
                                  format_bytes(int64_t(kept))));
    // The ring, oldest byte first.
    write_all(m_fd, std::string_view(m_tail).substr(m_tail_next));
    write_all(m_fd, std::string_view(m_tail).substr(0, m_tail_next));
  }
  ::close(m_fd);
}

void LogSink::write(std::string_view data) {
  if (m_fd < 0) return;
  if (m_head < m_head_cap) {
    const std::string_view head = data.substr(0, m_head_cap - m_head);
    write_all(m_fd, head);
    m_head += head.size();
    data.remove_prefix(head.size());
  }
  if (data.empty()) return;
  m_past_head += data.size();
  if (data.size() >= m_tail_cap) { // only its end can be kept
    m_tail.assign(data.substr(data.size() - m_tail_cap));
    m_tail_next = 0;
    return;
  }
  const std::size_t room = m_tail_cap - m_tail.size();
  if (room > 0) { // still filling
    const std::string_view fits = data.substr(0, room);
    m_tail.append(fits);
    data.remove_prefix(fits.size());
  }
  while (!data.empty()) { // full: overwrite the oldest bytes
    const std::size_t n = std::min(data.size(), m_tail_cap - m_tail_next);
    m_tail.replace(m_tail_next, n, data.substr(0, n));
    m_tail_next = (m_tail_next + n) % m_tail_cap;
    data.remove_prefix(n);
  }
}

void LogSink::note(std::string_view line) { write(fmt::format("\n[sdpa-doctor: {}]\n", line)); }

// ---- spawning ------------------------------------------------------------------------------

namespace {

using Clock = std::chrono::steady_clock;

struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  void reset(int f = -1) {
    if (fd >= 0) ::close(fd);
    fd = f;
  }
  int release() { return std::exchange(fd, -1); }
};

bool make_pipe(Fd& read_end, Fd& write_end) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return false;
  read_end.reset(p[0]);
  write_end.reset(p[1]);
  return true;
}

std::string resolve_program(const std::string& name, const std::vector<std::string>& env) {
  if (name.find('/') != std::string::npos) return name;
  std::string path;
  for (const auto& kv : env)
    if (kv.rfind("PATH=", 0) == 0) path = kv.substr(5);
  if (path.empty())
    if (const char* p = std::getenv("PATH")) path = p;
  if (path.empty()) path = "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return {};
}

// Everything below runs in the forked child before execve: async-signal-safe calls only, no
// allocation (the parent may have other threads holding malloc's locks).
[[noreturn]] void child_exec(const char* path, char* const* argv, char* const* envp, pid_t parent,
                             const int (&sources)[4], int results_target, int error_fd,
                             bool keep_core_dumps, int max_fd) {
  auto fail = [error_fd](int stage) {
    int payload[2] = {stage, errno};
    ssize_t ignored = ::write(error_fd, payload, sizeof payload);
    (void)ignored;
    ::_exit(exit_code::exec_failed);
  };
  if (::setpgid(0, 0) != 0) fail(1);
  // The doctor may be SIGKILLed itself; the worker must not outlive it and keep the GPU busy.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(2);
  if (::getppid() != parent) ::_exit(exit_code::exec_failed);

  sigset_t empty;
  sigemptyset(&empty);
  ::sigprocmask(SIG_SETMASK, &empty, nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) {
    if (s == SIGKILL || s == SIGSTOP) continue;
    ::sigaction(s, &dfl, nullptr);
  }
  if (!keep_core_dumps) {
    struct rlimit none {0, 0};
    ::setrlimit(RLIMIT_CORE, &none);
  }

  // Move every source above every target first, so no dup2 clobbers a source still needed.
  const int top = std::max(3, results_target + 1);
  int moved[4] = {-1, -1, -1, -1};
  for (int i = 0; i < 4; ++i) {
    if (sources[i] < 0) continue;
    moved[i] = ::fcntl(sources[i], F_DUPFD_CLOEXEC, top);
    if (moved[i] < 0) fail(3);
  }
  const int targets[4] = {0, 1, 2, results_target};
  for (int i = 0; i < 4; ++i) {
    if (moved[i] < 0) continue;
    if (::dup2(moved[i], targets[i]) < 0) fail(4);
  }
  // Nothing else crosses exec: the error pipe still closes itself on a successful exec.
  if (::syscall(SYS_close_range, static_cast<unsigned>(top), ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    for (int fd = top; fd < max_fd; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  ::execve(path, argv, envp);
  fail(5);
  ::_exit(exit_code::exec_failed);
}

} // namespace

Expected<std::unique_ptr<Child>> Child::spawn(const SpawnSpec& spec) {
  if (spec.argv.empty()) return make_error("empty command");
  if (spec.results_fd >= 0 && spec.results_fd < 3)
    return make_error(fmt::format("results fd {} would replace a standard stream", spec.results_fd));
  const std::string path = resolve_program(spec.argv[0], spec.env);
  if (path.empty()) return make_error(fmt::format("cannot execute '{}': not found in PATH",
                                                  spec.argv[0]));

  // Built before fork: the child must not allocate.
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  Fd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (devnull.fd < 0) return make_error(fmt::format("cannot open /dev/null: {}", std::strerror(errno)));
  Fd out_r, out_w, err_r, err_w, res_r, res_w, exec_r, exec_w;
  if (!make_pipe(out_r, out_w) || !make_pipe(err_r, err_w) || !make_pipe(exec_r, exec_w) ||
      (spec.results_fd >= 0 && !make_pipe(res_r, res_w)))
    return make_error(fmt::format("cannot create pipes: {}", std::strerror(errno)));

  long open_max = ::sysconf(_SC_OPEN_MAX);
  const int max_fd = static_cast<int>(std::clamp(open_max, 256L, 65536L));
  const int sources[4] = {devnull.fd, out_w.fd, err_w.fd, res_w.fd};
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) return make_error(fmt::format("fork failed: {}", std::strerror(errno)));
  if (pid == 0)
    child_exec(path.c_str(), argv.data(), envp.data(), parent, sources, spec.results_fd,
               exec_w.fd, spec.keep_core_dumps, max_fd);

  // Both sides set the group so a signal sent right after spawn() already reaches it.
  ::setpgid(pid, pid);
  devnull.reset();
  out_w.reset();
  err_w.reset();
  res_w.reset();
  exec_w.reset();

  int payload[2] = {0, 0};
  ssize_t got;
  do {
    got = ::read(exec_r.fd, payload, sizeof payload);
  } while (got < 0 && errno == EINTR);
  if (got > 0) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    const char* stage = payload[0] == 5 ? "exec" : "child setup";
    return make_error(fmt::format("cannot execute '{}': {} failed: {}", spec.argv[0], stage,
                                  std::strerror(payload[1])));
  }

  std::unique_ptr<Child> child(new Child());
  child->m_pid = pid;
  child->m_fds[0] = out_r.release();
  child->m_fds[1] = err_r.release();
  child->m_fds[2] = res_r.release();
  for (int fd : child->m_fds)
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
#ifdef SYS_pidfd_open
  child->m_pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (child->m_pidfd >= 0) ::fcntl(child->m_pidfd, F_SETFD, FD_CLOEXEC);
#endif
  return child;
}

Child::~Child() {
  if (!m_reaped && m_pid > 0) {
    ::kill(-m_pid, SIGKILL);
    int status = 0;
    // Bounded: a child stuck in the kernel is left to init rather than hanging the doctor.
    for (int i = 0; i < 200; ++i) {
      pid_t r = ::waitpid(m_pid, &status, WNOHANG);
      if (r == m_pid || (r < 0 && errno != EINTR)) break;
      ::usleep(10'000);
    }
  }
  close_all();
}

void Child::close_all() {
  for (int& fd : m_fds) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  if (m_pidfd >= 0) ::close(m_pidfd);
  m_pidfd = -1;
}

void Child::signal_group(int signal_number) {
  if (m_reaped) return;
  m_signalled = true;
  ::kill(-m_pid, signal_number);
}

bool Child::exited() {
  if (m_exited) return true;
  siginfo_t info{};
  info.si_pid = 0;
  // WNOWAIT: the zombie keeps the process group id reserved until finish() kills the rest.
  if (::waitid(P_PID, static_cast<id_t>(m_pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
      info.si_pid == m_pid)
    m_exited = true;
  return m_exited;
}

void Child::pump(std::chrono::milliseconds timeout, const Sink& sink) {
  std::array<pollfd, 4> fds{};
  std::array<int, 4> which{};
  nfds_t n = 0;
  for (int i = 0; i < 3; ++i) {
    if (m_fds[i] < 0) continue;
    fds[n] = {m_fds[i], POLLIN, 0};
    which[n++] = i;
  }
  const bool watch_exit = m_pidfd >= 0 && !m_exited;
  if (watch_exit) {
    fds[n] = {m_pidfd, POLLIN, 0};
    which[n++] = 3;
  }
  int wait_ms = static_cast<int>(std::clamp<long long>(timeout.count(), 0, INT_MAX));
  // Without a pidfd the exit is only noticed by polling waitid.
  if (m_pidfd < 0 && !m_exited) wait_ms = std::min(wait_ms, 10);
  if (n == 0) {
    if (wait_ms > 0) ::usleep(static_cast<useconds_t>(std::min(wait_ms, 10)) * 1000);
    exited();
    return;
  }
  int ready = ::poll(fds.data(), n, wait_ms);
  if (ready <= 0) {
    if (m_pidfd < 0) exited();
    return;
  }
  char buffer[65536];
  for (nfds_t k = 0; k < n; ++k) {
    if (fds[k].revents == 0) continue;
    if (which[k] == 3) {
      exited();
      continue;
    }
    int& fd = m_fds[which[k]];
    // A bounded number of reads per pump keeps one flooding stream from starving the others.
    for (int reads = 0; reads < 16 && fd >= 0; ++reads) {
      ssize_t got = ::read(fd, buffer, sizeof buffer);
      if (got > 0) {
        sink(static_cast<Stream>(which[k]), std::string_view(buffer, static_cast<std::size_t>(got)));
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      ::close(fd); // EOF or a read error: the stream is over
      fd = -1;
    }
  }
}

bool Child::terminate(std::chrono::milliseconds grace, std::chrono::milliseconds kill_wait,
                      const Sink& sink) {
  auto wait_exit = [&](std::chrono::milliseconds limit) {
    const auto until = Clock::now() + limit;
    while (!exited()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (left.count() <= 0) return false;
      pump(std::min(left, std::chrono::milliseconds(50)), sink);
    }
    return true;
  };
  if (exited()) return true;
  signal_group(SIGTERM);
  if (wait_exit(grace)) return true;
  signal_group(SIGKILL);
  return wait_exit(kill_wait);
}

ProcessEnd Child::finish(std::chrono::milliseconds drain, const Sink& sink) {
  // Grandchildren that kept the pipes open would otherwise hold us until they exit.
  ::kill(-m_pid, SIGKILL);
  const auto until = Clock::now() + drain;
  while (stream_open(Stream::out) || stream_open(Stream::err) || stream_open(Stream::results)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) break;
    pump(std::min(left, std::chrono::milliseconds(50)), sink);
  }
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(m_pid, &status, 0);
  } while (r < 0 && errno == EINTR);
  m_reaped = true;
  close_all();
  ProcessEnd end = decode_wait_status(status);
  end.killed_by_doctor = m_signalled;
  return end;
}

} // namespace sdpa_doctor::isolate::detail
