// isolate/process: one spawned child process with captured stdout, stderr and an optional results
// pipe; internal to isolate (callers use isolate.hpp). POSIX/Linux only.
#pragma once

#include "core/expected.hpp"
#include "core/model.hpp"

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sdpa_doctor::isolate::detail {

// How long finish() drains the pipes of a child that has exited: what its grandchildren still
// write after that is theirs, not its.
inline constexpr std::chrono::milliseconds k_drain{1'000};

// Keeps the last `capacity` bytes of a stream in memory, however much was written.
class TailBuffer {
public:
  explicit TailBuffer(std::size_t capacity) : m_capacity(capacity) {}
  void append(std::string_view data);
  std::string str() const;                  // the last `capacity` bytes
  std::string since(std::size_t offset) const; // kept bytes at stream offsets >= offset
  std::size_t total() const { return m_total; } // bytes ever appended
  std::size_t kept() const { return m_data.size(); }

private:
  std::size_t m_capacity;
  std::string m_data; // at most 2 * capacity, so trimming is amortised
  std::size_t m_total = 0;
};

// Appends a stream to a file, keeping at most about `cap` bytes of it: the first half as it comes,
// the last half in memory until the sink closes, then written after a line saying how many bytes
// were cut between them. Failures to write are not fatal to a run.
class LogSink {
public:
  LogSink() = default;
  LogSink(const std::string& path, std::size_t cap);
  ~LogSink(); // writes the kept tail
  LogSink(const LogSink&) = delete;
  LogSink& operator=(const LogSink&) = delete;
  void write(std::string_view data);
  void note(std::string_view line); // a marker line of our own, e.g. "attempt 1: pid 42"

private:
  int m_fd = -1;
  std::size_t m_head_cap = 0;
  std::size_t m_head = 0;   // bytes written to the file so far
  std::string m_tail;       // a ring of the last bytes past the head, m_tail_cap at most
  std::size_t m_tail_cap = 0;
  std::size_t m_tail_next = 0; // where the ring writes next once it is full
  std::size_t m_past_head = 0; // bytes given after the head was full
};

struct SpawnSpec {
  std::vector<std::string> argv;
  std::vector<std::string> env; // KEY=VALUE, the child's whole environment
  int results_fd = -1;          // >= 3: the write end of a results pipe appears there
  bool keep_core_dumps = false;
};

enum class Stream { out = 0, err = 1, results = 2 };

using Sink = std::function<void(Stream, std::string_view)>;

// A running child in its own process group. The destructor kills the group and reaps the child
// if the owner has not, so no path leaves a zombie behind.
class Child {
public:
  static Expected<std::unique_ptr<Child>> spawn(const SpawnSpec& spec);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return m_pid; } // also the process group id

  // Waits up to `timeout` for output or the child's exit and hands what was read to `sink`.
  void pump(std::chrono::milliseconds timeout, const Sink& sink);
  // The child has exited (it may not be reaped yet). Never blocks.
  bool exited();
  bool stream_open(Stream s) const { return m_fds[static_cast<int>(s)] >= 0; }
  void signal_group(int signal_number);

  // SIGTERM to the group, `grace` to exit, SIGKILL, `kill_wait` to exit. Output read meanwhile
  // goes to `sink`. false: the child survived SIGKILL (stuck in the kernel).
  bool terminate(std::chrono::milliseconds grace, std::chrono::milliseconds kill_wait,
                 const Sink& sink);

  // After exited(): kills what is left of the group (grandchildren holding the pipes), drains
  // the pipes for at most `drain`, reaps the child and decodes its status.
  ProcessEnd finish(std::chrono::milliseconds drain, const Sink& sink);

  bool killed_by_doctor() const { return m_signalled; }

private:
  Child() = default;
  void close_all();

  pid_t m_pid = -1;
  int m_pidfd = -1;
  int m_fds[3] = {-1, -1, -1};
  bool m_exited = false;
  bool m_reaped = false;
  bool m_signalled = false;
};

} // namespace sdpa_doctor::isolate::detail
