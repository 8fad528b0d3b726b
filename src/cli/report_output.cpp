// Output helpers of the commands that read reports back (diff, merge).
#include "cli/commands.hpp"
#include "core/text.hpp"
#include "core/expected.hpp"
#include "core/io.hpp"
#include "core/status.hpp"
#include "report/report.hpp"

#include <fmt/format.h>


namespace sdpa_doctor::cli {

void reject_junit(const GlobalOptions& global, const std::string& command) {
  if (!global.junit_path.empty())
    throw Fatal{fmt::format("{} writes no JUnit (use --json or --markdown)", command)};
}

void print_and_write(const GlobalOptions& global, const std::function<std::string(bool)>& console,
                     const std::function<std::string()>& json,
                     const std::function<std::string()>& markdown) {
  // A report on stdout replaces the console table there.
  // Never throws: a closed stdout still gets the files written, then exits 4.
  if (!global.report_on_stdout()) print_to_stdout(console(utf8_locale()));
  for (const auto& [path, render] :
       {std::pair{global.json_path, json}, std::pair{global.markdown_path, markdown}}) {
    if (path.empty()) continue;
    auto written = report::write_atomically(path, render());
    if (!written) throw Fatal{written.error().message, exit_code::internal};
  }
}

} // namespace sdpa_doctor::cli
