// isolate/proc_scan: what /proc says of live processes, the members of a process group and the
// children of a process (isolate.hpp, process diagnostics), for self-test and the tests to prove
// that nothing a check started outlives it.
#include "isolate/isolate.hpp"

#include <dirent.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace sdpa_doctor::isolate {

namespace {

struct StatLine {
  int pid = 0;
  int ppid = 0;
  int pgid = 0;
  char state = 0;
};

// /proc/<pid>/stat: "pid (comm) state ppid pgrp ..."; comm may hold spaces and parentheses.
bool read_stat(int pid, StatLine& out) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(file, text)) return false;
  auto close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(text.substr(close + 1));
  rest >> out.state >> out.ppid >> out.pgid;
  out.pid = pid;
  return static_cast<bool>(rest);
}

template <typename Keep> std::vector<int> scan(Keep keep) {
  std::vector<int> pids;
  DIR* dir = ::opendir("/proc");
  if (!dir) return pids;
  while (dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    long pid = std::strtol(entry->d_name, &end, 10);
    if (!end || *end != 0 || pid <= 0) continue;
    StatLine stat;
    if (read_stat(static_cast<int>(pid), stat) && keep(stat)) pids.push_back(stat.pid);
  }
  ::closedir(dir);
  return pids;
}

} // namespace

std::vector<int> processes_in_group(int pgid) {
  // A killed orphan stays a zombie until init reaps it, which can take a while; it holds nothing.
  return scan([pgid](const StatLine& s) { return s.pgid == pgid && s.state != 'Z' && s.state != 'X'; });
}

std::vector<int> children_of(int pid) {
  return scan([pid](const StatLine& s) { return s.ppid == pid; });
}

} // namespace sdpa_doctor::isolate
