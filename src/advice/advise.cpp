#include "advice/advice.hpp"
#include "advice/result_index.hpp"

#include <algorithm>

namespace sdpa_doctor::advice {

// One index of the results, then the rules over it, then the recommendation per device.
AdviceResult advise(const Report& report, const KnownIssues& issues, const AdviceOptions& options) {
  AdviceResult out;
  out.known_issues = match_known_issues(report, issues);
  const detail::ResultIndex index = detail::build_result_index(report, options);
  detail::variant_findings(index, out.findings);
  gfx_findings(report, out.findings);
  poisoned_findings(report, out.findings);
  mapped_runtime_findings(report, out.findings);
  for (const detail::DeviceIndex& device : index.devices) {
    detail::device_findings(device, out.findings);
    detail::recommend(report, device, options, out);
  }
  // Compiled mode is a target of its own: said and advised only where a compiled cell failed.
  for (const detail::DeviceIndex& compiled : index.compiled) {
    if (!detail::any_failed(compiled)) continue;
    const auto eager = std::find_if(index.devices.begin(), index.devices.end(),
                                    [&](const auto& d) { return d.device == compiled.device; });
    if (eager != index.devices.end()) detail::compiled_findings(*eager, compiled, out.findings);
    detail::recommend_compiled(report, compiled, options, out);
  }
  return out;
}

} // namespace sdpa_doctor::advice
