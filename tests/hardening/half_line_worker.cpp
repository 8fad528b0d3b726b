// A protocol-v1 worker that dies in the middle of a line: per case line, "fault" is
//   ok          a full result line (pass)
//   half-abort  half a result line, then abort()
//   half-kill   half a result line, then SIGKILL to itself
//   half-exit   half a result line, then _exit(0) (no newline, no bye)
// Usage: hardening_half_line_worker --results-fd N --cases FILE
#include <nlohmann/json.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <unistd.h>

namespace {

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n <= 0) return;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

} // namespace

int main(int argc, char** argv) {
  int fd = -1;
  std::string cases_path;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--results-fd") == 0) fd = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--cases") == 0) cases_path = argv[i + 1];
  }
  std::ifstream cases(cases_path);
  if (fd < 0 || !cases) return 2;
  write_all(fd, R"({"v":1,"event":"hello","worker":"half-line","device":"cpu","variant":"x"})"
                "\n");
  std::string line;
  while (std::getline(cases, line)) {
    if (line.empty()) continue;
    const auto c = nlohmann::json::parse(line, nullptr, false);
    if (!c.is_object() || !c.contains("id")) return 2;
    const std::string id = c["id"].get<std::string>();
    const std::string fault = c.value("fault", std::string("ok"));
    write_all(fd, nlohmann::json{{"v", 1}, {"event", "begin"}, {"case", id}}.dump() + "\n");
    const std::string result =
        nlohmann::json{{"v", 1}, {"event", "result"}, {"case", id}, {"status", "pass"}}.dump();
    if (fault == "ok") {
      write_all(fd, result + "\n");
      continue;
    }
    write_all(fd, std::string_view(result).substr(0, result.size() / 2));
    std::fputs("half-line worker: dying mid-line\n", stderr);
    if (fault == "half-abort") std::abort();
    if (fault == "half-kill") ::raise(SIGKILL);
    ::_exit(0);
  }
  write_all(fd, "{\"v\":1,\"event\":\"bye\"}\n");
  return 0;
}
