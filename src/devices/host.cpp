#include "devices/devices.hpp"

#include "core/io.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <sstream>
#include <sys/utsname.h>
#include <unistd.h>

namespace sdpa_doctor::devices {

std::map<std::string, std::string> host_facts() {
  std::map<std::string, std::string> host;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0) host["hostname"] = name;
  if (const char* user = std::getenv("USER"); user && *user) host["user"] = user;
  struct utsname u {};
  if (uname(&u) == 0) {
    host["kernel"] = fmt::format("{} {}", u.sysname, u.release);
    host["machine"] = u.machine;
  }
  // A container's /etc/os-release is whatever its image put there: regular and small, or unread.
  const auto text = read_regular_file("/etc/os-release", "/etc/os-release", int64_t{1} << 20);
  std::istringstream os_release(text ? *text : std::string());
  std::string line;
  while (std::getline(os_release, line)) {
    if (line.rfind("PRETTY_NAME=", 0) == 0) {
      std::string v = line.substr(12);
      if (v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
      host["os"] = v;
    }
  }
  return host;
}

} // namespace sdpa_doctor::devices
