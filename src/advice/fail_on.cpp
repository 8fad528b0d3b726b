#include "advice/advice.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace sdpa_doctor::advice {

std::set<Status> default_fail_on() {
  std::set<Status> out;
  for (Status s : k_all_statuses) {
    if (is_failure_by_default(s)) out.insert(s);
  }
  return out;
}

Expected<std::set<Status>> parse_fail_on(std::string_view text) {
  std::set<Status> out;
  bool any = false;
  while (true) {
    const size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) {
      any = true;
      if (item == "default" || item == "all") {
        const auto d = default_fail_on();
        out.insert(d.begin(), d.end());
      } else if (item == "none") {
        // Explicitly nothing: the run only fails for usage or internal errors.
      } else if (auto s = status_from_string(item)) {
        out.insert(*s);
      } else {
        return make_error(fmt::format(
            "--fail-on: unknown status '{}' (use mismatch, nonfinite, error, crash, timeout, "
            "unsupported, skipped, all or none)",
            item));
      }
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  if (!any) return make_error("--fail-on: empty list (use 'none' to never fail on results)");
  return out;
}

bool any_failing(const std::vector<CaseResult>& results, const std::set<Status>& fail_on) {
  return std::any_of(results.begin(), results.end(),
                     [&](const CaseResult& r) { return fail_on.count(r.status) != 0; });
}

} // namespace sdpa_doctor::advice
