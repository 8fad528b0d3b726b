#include "workers/fork_server.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <map>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace sdpa_doctor::workers {

namespace {

using json = nlohmann::json;

constexpr int k_passed_fds = 4;          // stdin, stdout, stderr, the results fd
constexpr size_t k_max_request = 1 << 20; // argv and environment: far below this

struct Child {
  int conn = -1;       // the spawned worker's connection: told how the child ended
  bool killed = false; // its worker went away and the child was killed: not polled again
};

int g_wake[2] = {-1, -1}; // written by SIGCHLD: a finished child is told at once

void on_child(int) {
  const int saved = errno;
  const char byte = 0;
  [[maybe_unused]] const ssize_t n = ::write(g_wake[1], &byte, 1);
  errno = saved;
}

bool address_of(const std::string& path, sockaddr_un& address) {
  address = {};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof address.sun_path) return false;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return true;
}

bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::send(fd, text.data() + done, text.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}

// One newline-terminated line from a stream socket; what was read past it stays in `buffer`.
std::optional<std::string> read_line(int fd, std::string& buffer) {
  size_t nl;
  while ((nl = buffer.find('\n')) == std::string::npos) {
    if (buffer.size() > k_max_request) return std::nullopt;
    char chunk[4096];
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    buffer.append(chunk, size_t(n));
  }
  std::string line = buffer.substr(0, nl);
  buffer.erase(0, nl + 1);
  return line;
}

// Threads of this process, -1 when /proc cannot say.
int threads_alive() {
  DIR* dir = ::opendir("/proc/self/task");
  if (!dir) return -1;
  int count = 0;
  while (const dirent* e = ::readdir(dir))
    if (e->d_name[0] != '.') ++count;
  ::closedir(dir);
  return count;
}

// The request's parts, checked: argv and env strings, a results fd above stderr.
struct Request {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;
  std::string cwd;
  int results_fd = -1;
  rlimit core{};
};

std::optional<Request> parse_request(const std::string& line) {
  const json j = json::parse(line, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  Request r;
  try {
    r.argv = j.at("argv").get<std::vector<std::string>>();
    for (const auto& [key, value] : j.at("env").items()) r.env.emplace_back(key, value.get<std::string>());
    r.cwd = j.at("cwd").get<std::string>();
    r.results_fd = j.at("results_fd").get<int>();
    const auto core = j.at("rlimit_core").get<std::vector<uint64_t>>();
    if (core.size() != 2) return std::nullopt;
    r.core = {rlim_t(core[0]), rlim_t(core[1])};
  } catch (const json::exception&) {
    return std::nullopt;
  }
  if (r.argv.empty() || r.results_fd < 3) return std::nullopt;
  return r;
}

// In the forked child: the worker's streams, limits, environment and directory, then its main.
[[noreturn]] void become_worker(const Request& request, const std::vector<int>& fds,
                                const ForkedMain& run) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  std::signal(SIGCHLD, SIG_DFL);
  std::signal(SIGPIPE, SIG_DFL);
  const int targets[k_passed_fds] = {0, 1, 2, request.results_fd};
  const int lowest = *std::max_element(std::begin(targets), std::end(targets)) + 1;
  int moved[k_passed_fds];
  for (int i = 0; i < k_passed_fds; ++i) moved[i] = ::fcntl(fds[size_t(i)], F_DUPFD, lowest);
  for (int fd : fds) ::close(fd); // no dup2 below may clobber a source still needed
  for (int i = 0; i < k_passed_fds; ++i) {
    ::dup2(moved[i], targets[i]);
    ::close(moved[i]);
  }
  ::setrlimit(RLIMIT_CORE, &request.core);
  ::clearenv();
  for (const auto& [key, value] : request.env) ::setenv(key.c_str(), value.c_str(), 1);
  if (::chdir(request.cwd.c_str()) != 0) {
    std::fprintf(stderr, "forked worker: cannot enter %s: %s\n", request.cwd.c_str(),
                 std::strerror(errno));
    std::_Exit(k_lost_server_exit);
  }
  std::vector<std::string> args = request.argv;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  end_worker(run(int(args.size()), argv.data()));
}

// Forks the child for one worker's request: its pid, or 0 when the request was bad.
pid_t start_child(int conn, int listener, const std::map<pid_t, Child>& children,
                  const ForkedMain& run) {
  timeval wait{10, 0}; // a worker sends its request at once
  ::setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  char data[65536];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * k_passed_fds)];
  iovec iov{data, sizeof data};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do n = ::recvmsg(conn, &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  std::vector<int> fds;
  if (n > 0)
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
        for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
          fds.push_back(fd);
        }
  const auto refuse = [&](const std::string& why) {
    std::fprintf(stderr, "fork server: bad request: %s\n", why.c_str());
    for (int fd : fds) ::close(fd);
    return pid_t{0};
  };
  if (n <= 0) return refuse("nothing received");
  if ((msg.msg_flags & MSG_CTRUNC) != 0 || fds.size() != k_passed_fds)
    return refuse(fmt::format("expected {} descriptors, got {}", k_passed_fds, fds.size()));
  std::string buffer(data, size_t(n));
  const auto line = read_line(conn, buffer);
  const auto request = line ? parse_request(*line) : std::nullopt;
  if (!request) return refuse("not one line of JSON with argv, env, cwd, results_fd, rlimit_core");
  wait = {0, 0};
  ::setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return refuse(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    ::close(listener);
    ::close(conn);
    ::close(g_wake[0]);
    ::close(g_wake[1]);
    for (const auto& [other, child] : children) ::close(child.conn);
    become_worker(*request, fds, run);
  }
  for (int fd : fds) ::close(fd);
  if (!write_all(conn, fmt::format("forked {}\n", pid))) ::kill(pid, SIGKILL);
  return pid;
}

// Tells each finished child's worker how the child ended.
void reap(std::map<pid_t, Child>& children) {
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    const auto it = children.find(pid);
    if (it == children.end()) continue;
    write_all(it->second.conn, WIFSIGNALED(status) ? fmt::format("signal {}\n", WTERMSIG(status))
                                                   : fmt::format("exit {}\n", WEXITSTATUS(status)));
    ::close(it->second.conn);
    children.erase(it);
  }
}

} // namespace

void end_worker(int code) {
  std::fflush(nullptr);
#ifdef __SANITIZE_ADDRESS__
  std::exit(code); // LeakSanitizer checks at a normal exit
#else
  std::_Exit(code);
#endif
}

int serve_forks(const std::string& socket_path, const ServerPreparation& prepare,
                const ForkedMain& run) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  sockaddr_un address;
  if (!address_of(socket_path, address)) {
    std::fprintf(stderr, "fork server: socket path too long: %s\n", socket_path.c_str());
    return 1;
  }
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener, 64) != 0) {
    std::fprintf(stderr, "fork server: cannot listen at %s: %s\n", socket_path.c_str(),
                 std::strerror(errno));
    return 1;
  }
  const auto refuse = [&](const std::string& why) {
    std::fprintf(stderr, "fork server: not serving: %s\n", why.c_str());
    ::close(listener);
    ::unlink(socket_path.c_str()); // the workers then run themselves
    return 1;
  };
  if (const std::string why = prepare(); !why.empty()) return refuse(why);
  if (const int threads = threads_alive(); threads != 1)
    return refuse(fmt::format("{} threads alive after loading", threads));
  if (::pipe2(g_wake, O_CLOEXEC | O_NONBLOCK) != 0)
    return refuse(fmt::format("pipe: {}", std::strerror(errno)));
  struct sigaction on_exit{};
  on_exit.sa_handler = on_child;
  on_exit.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  ::sigaction(SIGCHLD, &on_exit, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  std::map<pid_t, Child> children;
  for (;;) {
    std::vector<pollfd> polled{{listener, POLLIN, 0}, {g_wake[0], POLLIN, 0}};
    std::vector<pid_t> owners{0, 0};
    for (const auto& [pid, child] : children)
      if (!child.killed) {
        polled.push_back({child.conn, POLLIN, 0});
        owners.push_back(pid);
      }
    if (::poll(polled.data(), polled.size(), -1) < 0 && errno != EINTR) {
      std::fprintf(stderr, "fork server: poll: %s\n", std::strerror(errno));
      return 1;
    }
    if ((polled[0].revents & POLLIN) != 0)
      if (const int conn = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC); conn >= 0) {
        if (const pid_t pid = start_child(conn, listener, children, run); pid > 0)
          children[pid] = {conn, false};
        else ::close(conn);
      }
    if ((polled[1].revents & POLLIN) != 0) {
      char drain[256];
      while (::read(g_wake[0], drain, sizeof drain) > 0) {}
    }
    // A worker sends nothing after its request: readable means it went away (the runner killed
    // it at a deadline), and its child goes with it.
    for (size_t i = 2; i < polled.size(); ++i)
      if ((polled[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        ::kill(owners[i], SIGKILL);
        children[owners[i]].killed = true;
      }
    reap(children);
  }
}

std::optional<int> run_through_fork_server(const std::string& socket_path, int argc,
                                           const char* const* argv, int results_fd) {
  sockaddr_un address;
  if (!address_of(socket_path, address)) return std::nullopt;
  json request;
  request["argv"] = std::vector<std::string>(argv, argv + argc);
  json env = json::object();
  for (char** e = environ; *e; ++e) {
    const std::string_view entry = *e;
    const size_t eq = entry.find('=');
    if (eq != std::string_view::npos) env[std::string(entry.substr(0, eq))] = std::string(entry.substr(eq + 1));
  }
  request["env"] = std::move(env);
  char cwd[4096];
  if (!::getcwd(cwd, sizeof cwd)) return std::nullopt;
  request["cwd"] = cwd;
  request["results_fd"] = results_fd;
  rlimit core{};
  ::getrlimit(RLIMIT_CORE, &core);
  request["rlimit_core"] = {uint64_t(core.rlim_cur), uint64_t(core.rlim_max)};
  std::string line;
  try {
    line = request.dump() + "\n";
  } catch (const json::exception&) { // bytes that are not UTF-8 in the environment: as they are
    return std::nullopt;
  }
  const int conn = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (conn < 0) return std::nullopt;
  if (::connect(conn, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(conn);
    return std::nullopt; // no server (yet, or any more): nothing ran, so run here
  }
  const int fds[k_passed_fds] = {0, 1, 2, results_fd};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)] = {};
  iovec iov{line.data(), line.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof fds);
  std::memcpy(CMSG_DATA(c), fds, sizeof fds);
  ssize_t sent;
  do sent = ::sendmsg(conn, &msg, MSG_NOSIGNAL);
  while (sent < 0 && errno == EINTR);
  std::string buffer;
  const bool requested = sent > 0 && write_all(conn, line.substr(size_t(sent)));
  const auto forked = requested ? read_line(conn, buffer) : std::nullopt;
  if (!forked || forked->rfind("forked ", 0) != 0) {
    ::close(conn);
    return std::nullopt;
  }
  const auto ended = read_line(conn, buffer);
  ::close(conn);
  if (!ended) {
    std::fprintf(stderr, "the start-up server went away while its child ran\n");
    return k_lost_server_exit;
  }
  const size_t space = ended->find(' ');
  const std::string kind = ended->substr(0, space);
  const int value = space == std::string::npos ? -1 : std::atoi(ended->c_str() + space + 1);
  if (kind == "signal" && value > 0) { // die the way the child died: the runner reads the signal
    std::signal(value, SIG_DFL);
    ::raise(value);
    return 128 + value;
  }
  if (kind == "exit" && value >= 0) return value;
  std::fprintf(stderr, "the start-up server said '%s' of its child\n", ended->c_str());
  return k_lost_server_exit;
}

} // namespace sdpa_doctor::workers
