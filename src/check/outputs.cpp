#include "check/outputs.hpp"

#include "core/expected.hpp"
#include "core/io.hpp"
#include "core/text.hpp"
#include "report/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fcntl.h>
#include <unistd.h>

namespace sdpa_doctor::check {

namespace {

namespace fs = std::filesystem;

void check_writable(const std::string& path, const char* flag) {
  if (path.empty() || path == "-") return;
  fs::path p(path);
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (fs::is_directory(p, ec))
    throw Fatal{fmt::format("{} {}: is a directory", flag, path)};
  // A device or FIFO is written in place (never replaced by a rename): it must open for writing.
  if (const auto type = fs::status(p, ec).type();
      !ec && type != fs::file_type::regular && type != fs::file_type::not_found) {
    if (type == fs::file_type::fifo) return; // opening it would wait for its reader
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
      throw Fatal{fmt::format("{} {}: cannot open it for writing: {}", flag, path,
                              std::strerror(errno))};
    ::close(fd);
    return;
  }
  if (!fs::is_directory(dir, ec))
    throw Fatal{fmt::format("{} {}: directory '{}' does not exist", flag, path, dir.string())};
  // The report is written as a temporary file beside it, then renamed: try exactly that now.
  // access(W_OK) is not enough: root passes it for /proc and read-only mounts.
  std::string probe = (dir / ".sdpa-doctor-write-test-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0)
    throw Fatal{fmt::format("{} {}: directory '{}' is not writable: {}", flag, path, dir.string(),
                            std::strerror(errno))};
  ::close(fd);
  ::unlink(probe.c_str());
}

} // namespace

bool Outputs::report_on_stdout() const {
  return json_path == "-" || markdown_path == "-" || junit_path == "-";
}

void check_outputs_writable(const Outputs& outputs) {
  check_writable(outputs.json_path, "--json");
  check_writable(outputs.markdown_path, "--markdown");
  check_writable(outputs.junit_path, "--junit");
}

bool present_and_write(Report report, const Outputs& outputs, const std::string& journal) {
  if (outputs.redact) report = report::redact(std::move(report));
  if (!outputs.report_on_stdout()) {
    report::ConsoleOptions co;
    co.color = outputs.color;
    co.unicode = utf8_locale();
    if (const int columns = terminal_columns(STDOUT_FILENO); columns > 0)
      co.width = std::min(columns, co.width); // a narrower terminal: wrap to it
    // Never throws: a closed stdout still gets the reports written, then exits 4.
    print_to_stdout(report::render_console(report, co));
    if (!journal.empty()) print_to_stdout(fmt::format("journal: {}\n", journal));
  }
  struct Output {
    const std::string& path;
    std::string (*render)(const Report&);
  };
  const Output writes[] = {{outputs.json_path, report::render_json},
                           {outputs.markdown_path, report::render_markdown},
                           {outputs.junit_path, report::render_junit}};
  bool all_written = true;
  for (const auto& out : writes) {
    if (out.path.empty()) continue;
    if (auto written = report::write_atomically(out.path, out.render(report)); !written) {
      fmt::print(stderr, "sdpa-doctor: error: {}\n", escape_to_one_line(written.error().message));
      all_written = false;
    }
  }
  return all_written;
}

} // namespace sdpa_doctor::check
