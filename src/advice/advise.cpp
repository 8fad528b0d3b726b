#include "advice/advice.hpp"
#include "advice/result_index.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>

namespace sdpa_doctor::advice {

std::string format_bytes(int64_t bytes) {
  static constexpr const char* k_units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = double(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  return std::fabs(v) < 10 ? fmt::format("{:.1f} {}", v, k_units[u])
                           : fmt::format("{:.0f} {}", v, k_units[u]);
}

AdviceResult advise(const Report& report, const KnownIssues& issues, const AdviceOptions& options) {
  AdviceResult out;
  out.known_issues = match_known_issues(report, issues);
  const detail::ResultIndex index = detail::build_result_index(report, options);
  detail::variant_findings(index, out.findings);
  for (const detail::DeviceIndex& device : index.devices) {
    detail::device_findings(device, out.findings);
    detail::recommend(device, options, out);
  }
  return out;
}

} // namespace sdpa_doctor::advice
