// `--known-issues FILE` is user data with regexes in it: any text must load or give one error line.
#include "advice/advice.hpp"

#include "fuzz_check.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

using namespace sdpa_doctor;
using sdpa_fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  auto issues = advice::parse_known_issues(input, "fuzz.json");
  if (!issues) {
    check(!issues.error().message.empty());
    // The parser's own exception text never leaks; the input's text may be quoted back.
    if (input.find("json.exception") == std::string_view::npos)
      check(issues.error().message.find("json.exception") == std::string::npos);
    // Messages quote keys and values as written, so only input without newlines or escapes
    // (which can decode to newlines) promises a one-line message.
    if (input.find_first_of("\n\\") == std::string_view::npos)
      check(issues.error().message.find('\n') == std::string::npos);
    return 0;
  }
  // A failed case whose text is the input itself and a line longer than a searched line: what a
  // `stderr` regex searches after a run.
  CaseResult failed;
  failed.status = Status::crash;
  failed.reason = "worker died by SIGSEGV while running the case";
  failed.stderr_tail = std::string(input) + "\n" + std::string(3000, 'a');
  for (const auto& issue : issues->issues) {
    check(!issue.id.empty());
    // What `known-issues` does with every entry before anything ran.
    (void)advice::issue_applies_to(issue, "gfx1201", "2.7.0", "0.9b");
    (void)advice::issue_applies_to(issue, "", "", "");
    (void)advice::issue_matches(issue, failed, advice::CaseFacts{"gfx1201", "2.7.0", "", ""});
  }
  (void)advice::merge_known_issues({*issues, *issues});
  return 0;
}
