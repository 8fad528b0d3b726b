// The run directory: the one named or a new temporary one, held by one run at a time.
#include "run/run.hpp"

#include "core/io.hpp"
#include "core/paths.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/file.h>
#include <unistd.h>
#include <utility>

namespace sdpa_doctor::run {

namespace fs = std::filesystem;

namespace {

// Who holds a lock, from what its holder wrote into the file.
std::string holder_of(int fd) {
  std::string text(4096, '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? size_t(n) : 0);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("pid")) return "it has not said which yet";
  // Data from a file anyone may have written: any type is shown, none is trusted.
  const auto field = [&j](const char* key) {
    const auto it = j.find(key);
    if (it == j.end()) return std::string("?");
    return it->is_string() ? it->get<std::string>() : it->dump();
  };
  return fmt::format("pid {} on {}, started {}", field("pid"), field("host"), field("started"));
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

// A write the machine failed (a full disk, a quota, an I/O error), or one the directory refuses
// (permissions, a read-only file system).
RunDirClaim::Refusal refusal_for(int error_number) {
  switch (error_number) {
  case ENOSPC:
  case EDQUOT:
  case EFBIG:
  case EIO: return RunDirClaim::Refusal::disk_failed;
  default: return RunDirClaim::Refusal::not_writable;
  }
}

} // namespace

Expected<std::string> make_run_dir(const std::string& requested) {
  std::error_code ec;
  if (!requested.empty()) {
    fs::create_directories(requested, ec);
    if (ec || !fs::is_directory(requested))
      return make_error(fmt::format("--run-dir {}: cannot create it: {}", requested, ec.message()));
    return requested;
  }
  std::string tmpl = (fs::path(temp_directory()) / "sdpa-doctor-XXXXXX").string();
  if (!::mkdtemp(tmpl.data()))
    return make_error(fmt::format("cannot create a run directory in {}: {}", temp_directory(),
                                  std::strerror(errno)));
  return tmpl;
}

RunDirLock::~RunDirLock() {
  if (m_fd >= 0) ::close(m_fd); // and with it the lock
}

RunDirLock::RunDirLock(RunDirLock&& other) noexcept : m_fd(std::exchange(other.m_fd, -1)) {}

RunDirLock& RunDirLock::operator=(RunDirLock&& other) noexcept {
  if (this != &other) {
    if (m_fd >= 0) ::close(m_fd);
    m_fd = std::exchange(other.m_fd, -1);
  }
  return *this;
}

RunDirClaim claim_run_dir(const std::string& dir) {
  RunDirClaim claim;
  const std::string path = (fs::path(dir) / k_run_lock_name).string();
  // Not truncated on open: until the lock is ours, the file names the run that holds it.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;
    claim.refusal = refusal_for(e);
    claim.problem = "cannot write in the run directory: " + describe_write_failure(path, e);
    return claim;
  }
  RunDirLock lock(fd);
  // flock, not a pid file: the kernel drops it with the last descriptor, so a run killed by
  // SIGKILL or the OOM killer leaves nothing stale. O_CLOEXEC keeps it out of the workers.
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    claim.refusal = e == EWOULDBLOCK ? RunDirClaim::Refusal::in_use : refusal_for(e);
    claim.problem = e == EWOULDBLOCK
                        ? fmt::format("run directory {} is in use by another sdpa-doctor run "
                                      "({}); wait for it to end or pick another --run-dir",
                                      dir, holder_of(fd))
                        : fmt::format("cannot lock {}: {}", path, std::strerror(e));
    return claim;
  }
  // Also the first write of the run: a directory on a full disk stops the check here, before
  // anything ran.
  const nlohmann::json holder{{"pid", ::getpid()}, {"host", host_name()}, {"started", utc_now()}};
  const std::string line =
      holder.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (::ftruncate(fd, 0) != 0 || !write_own_file(fd, line, path)) {
    const int e = errno;
    claim.refusal = refusal_for(e);
    claim.problem = "cannot write in the run directory: " + describe_write_failure(path, e);
    return claim;
  }
  claim.lock = std::move(lock);
  return claim;
}

} // namespace sdpa_doctor::run
