// device-poisoned: a case after which the worker's canary (a tiny known op) failed left the GPU
// in a bad state, e.g. a deferred asynchronous error (pytorch/pytorch#194498). One finding per
// worker (device, probe, variant) naming all its poisoning cases, so its remedy is said once
// however many cases poisoned the device. Pure over results.
#include "advice/advice.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace sdpa_doctor::advice {

namespace {

// Names in the message: the rest are in case_ids.
constexpr size_t k_named_cases = 3;

std::string named_cases(const std::vector<const CaseResult*>& cases) {
  std::vector<std::string> ids;
  for (size_t i = 0; i < cases.size() && i < k_named_cases; ++i) ids.push_back(cases[i]->case_id);
  const size_t rest = cases.size() - ids.size();
  return fmt::format("{}{}", fmt::join(ids, ", "),
                     rest == 0 ? std::string() : fmt::format(" and {} more", rest));
}

} // namespace

void poisoned_findings(const Report& report, std::vector<Finding>& out) {
  std::vector<std::vector<const CaseResult*>> groups; // report order of each first case
  for (const CaseResult& r : report.results) {
    if (r.canary.rfind("failed", 0) != 0) continue;
    auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& cases) {
      const CaseResult& o = *cases.front();
      return o.device == r.device && o.probe == r.probe && o.variant == r.variant &&
             o.mode == r.mode;
    });
    if (g != groups.end())
      g->push_back(&r);
    else
      groups.push_back({&r});
  }
  for (const auto& cases : groups) {
    const CaseResult& first = *cases.front();
    const bool one = cases.size() == 1;
    Finding f;
    f.id = "device-poisoned";
    f.severity = Severity::problem;
    f.device = first.device;
    for (const CaseResult* r : cases) f.case_ids.push_back(r->case_id);
    // Opens with "DEVICE PROBE VARIANT: ", which the report's causes match its cells by.
    f.message =
        one ? fmt::format("{} {} {}: {} poisoned the device: the canary right after it ({}) "
                          "failed, so its own verdict cannot be trusted; the remaining cases ran "
                          "in a fresh worker",
                          first.device, to_string(first.probe), first.variant, first.case_id,
                          first.canary)
            : fmt::format("{} {} {}: {} cases poisoned the device ({}): the canary right after "
                          "each failed (after {}: {}), so their own verdicts cannot be trusted; "
                          "the cases after each ran in a fresh worker",
                          first.device, to_string(first.probe), first.variant, cases.size(),
                          named_cases(cases), first.case_id, first.canary);
    f.remedy = fmt::format("treat {} as broken for {} on this GPU even where it reported "
                           "success; AMD_SERIALIZE_KERNEL=3 (CUDA_LAUNCH_BLOCKING=1 on NVIDIA) "
                           "makes the error surface at the kernel that caused it",
                           first.variant, one ? "this case" : "these cases");
    out.push_back(std::move(f));
  }
}

} // namespace sdpa_doctor::advice
