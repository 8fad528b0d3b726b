#include "support/lock_holder.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace sdpa_test {

LockHolder::LockHolder(const std::string& file, const std::string& name, bool shared) {
  int ready[2];
  if (::pipe(ready) != 0) return;
  m_pid = ::fork();
  if (m_pid == 0) {
    // Only async-signal-safe calls from here: the test process may have threads.
    ::prctl(PR_SET_NAME, name.c_str());
    const int fd = ::open(file.c_str(), O_RDWR | O_CREAT, 0644);
    const char ok = fd >= 0 && ::flock(fd, shared ? LOCK_SH : LOCK_EX) == 0 ? '1' : '0';
    (void)::write(ready[1], &ok, 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char ok = '0';
  if (m_pid > 0 && ::read(ready[0], &ok, 1) == 1) m_holding = ok == '1';
  ::close(ready[0]);
}

LockHolder::~LockHolder() {
  if (m_pid <= 0) return;
  ::kill(m_pid, SIGKILL);
  int status = 0;
  ::waitpid(m_pid, &status, 0);
}

} // namespace sdpa_test
