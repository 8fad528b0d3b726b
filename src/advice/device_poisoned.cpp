// device-poisoned: a case after which the worker's canary (a tiny known op) failed left the GPU
// in a bad state, e.g. a deferred asynchronous error (pytorch/pytorch#194498). Pure over results.
#include "advice/advice.hpp"

#include <fmt/format.h>

namespace sdpa_doctor::advice {

void poisoned_findings(const Report& report, std::vector<Finding>& out) {
  for (const CaseResult& r : report.results) {
    if (r.canary.rfind("failed", 0) != 0) continue;
    Finding f;
    f.id = "device-poisoned";
    f.severity = Severity::problem;
    f.device = r.device;
    f.case_ids = {r.case_id};
    f.message = fmt::format("{} {} {}: {} poisoned the device: the canary right after it "
                            "({}) failed, so its own verdict cannot be trusted; the remaining "
                            "cases ran in a fresh worker",
                            r.device, to_string(r.probe), r.variant, r.case_id, r.canary);
    f.remedy = fmt::format("treat {} as broken for this case on this GPU even where it reported "
                           "success; AMD_SERIALIZE_KERNEL=3 (CUDA_LAUNCH_BLOCKING=1 on NVIDIA) "
                           "makes the error surface at the kernel that caused it",
                           r.variant);
    out.push_back(std::move(f));
  }
}

} // namespace sdpa_doctor::advice
