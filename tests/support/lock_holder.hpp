// Test support: another live process that holds a flock, as another check holding a cache's lock
// is. The child is named `name` (its /proc comm), takes the lock, says so, and sleeps until the
// holder object kills it.
#pragma once

#include <string>
#include <sys/types.h>

namespace sdpa_test {

class LockHolder {
public:
  // An exclusive (or, with `shared`, a shared) flock on `file`, created if missing.
  LockHolder(const std::string& file, const std::string& name, bool shared = false);
  ~LockHolder(); // SIGKILL and reap: the kernel drops the lock
  LockHolder(const LockHolder&) = delete;
  LockHolder& operator=(const LockHolder&) = delete;
  pid_t pid() const { return m_pid; }
  bool holding() const { return m_holding; }

private:
  pid_t m_pid = -1;
  bool m_holding = false;
};

} // namespace sdpa_test
