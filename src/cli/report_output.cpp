// Output helpers of the commands that read reports back (diff, merge).
#include "cli/commands.hpp"
#include "core/expected.hpp"
#include "core/status.hpp"
#include "report/report.hpp"

#include <fmt/format.h>

#include <clocale>
#include <cstring>
#include <langinfo.h>

namespace sdpa_doctor::cli {

bool console_is_utf8() {
  // Ask the C library what the user's locale encodes, then put the process locale back.
  const char* current = std::setlocale(LC_CTYPE, nullptr);
  const std::string saved = current ? current : "C";
  bool utf8 = false;
  if (std::setlocale(LC_CTYPE, "")) {
    const char* codeset = nl_langinfo(CODESET);
    utf8 = codeset && (std::strcmp(codeset, "UTF-8") == 0 || std::strcmp(codeset, "utf8") == 0);
  }
  std::setlocale(LC_CTYPE, saved.c_str());
  return utf8;
}

void reject_junit(const GlobalOptions& global, const std::string& command) {
  if (!global.junit_path.empty())
    throw Fatal{fmt::format("{} writes no JUnit (use --json or --markdown)", command)};
}

void print_and_write(const GlobalOptions& global, const std::function<std::string(bool)>& console,
                     const std::function<std::string()>& json,
                     const std::function<std::string()>& markdown) {
  // JSON on stdout replaces the console table there.
  if (global.json_path != "-") fmt::print("{}", console(console_is_utf8()));
  for (const auto& [path, render] :
       {std::pair{global.json_path, json}, std::pair{global.markdown_path, markdown}}) {
    if (path.empty()) continue;
    auto written = report::write_atomically(path, render());
    if (!written) throw Fatal{written.error().message, exit_code::internal};
  }
}

} // namespace sdpa_doctor::cli
