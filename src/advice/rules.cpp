// The findings advice draws from the result index: per-variant failures and skips, and the
// cross-variant rules on one device. Each rule names what it detects and proves it by case ids.
#include "advice/result_index.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>

namespace sdpa_doctor::advice::detail {

namespace {

void add_unique(std::vector<std::string>& ids, const std::string& id) {
  if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
}

Variant without_flag(Variant v, std::string_view flag) {
  v.flags.erase(std::remove(v.flags.begin(), v.flags.end(), flag), v.flags.end());
  return v;
}

bool passed(const CaseResult* r) { return r && r->status == Status::pass; }

// "1 case", "3 cases".
std::string case_count(size_t n) { return fmt::format("{} case{}", n, n == 1 ? "" : "s"); }

// One finding per failing status of the group, worst first.
void failure_findings(const VariantGroup& g, std::vector<Finding>& out) {
  static const std::pair<Status, const char*> k_order[] = {
      {Status::crash, "crashed"},     {Status::timeout, "timed out"},
      {Status::nonfinite, "returned NaN/Inf"}, {Status::mismatch, "returned wrong values"},
      {Status::error, "raised an error"}};
  for (const auto& [status, verb] : k_order) {
    auto it = g.by_status.find(status);
    if (it == g.by_status.end()) continue;
    const CaseResult& first = *it->second.front();
    std::string detail;
    if (first.process_end && !first.process_end->signal_name.empty())
      detail = fmt::format(" ({})", first.process_end->signal_name);
    else if (!first.reason.empty())
      detail = fmt::format(": {}", first.reason);
    std::vector<std::string> ids;
    for (const CaseResult* r : it->second) ids.push_back(r->case_id);
    out.push_back(make_finding(
        fmt::format("variant-{}", to_string(status)), Severity::problem, g.device,
        fmt::format("{} ({}) {} on {} in {} of {}{}", variant_row(g.variant, g.mode),
                    to_string(g.probe), verb, g.device, it->second.size(), case_count(g.total),
                    detail),
        g.probe != Probe::reference
            ? fmt::format("avoid {} on {} (see the recommendation)", variant_row(g.variant, g.mode),
                          g.device)
        : first.reason.rfind(k_reference_compile_failure, 0) == 0
            ? "a defect of sdpa-doctor's own kernel source or of the run-time compiler, not of "
              "torch or the card: report it with the compiler log (the case's warnings)"
            : "the doctor's own reference kernel failed: check the device and driver",
        std::move(ids)));
  }
}

void skipped_finding(const VariantGroup& g, std::vector<Finding>& out) {
  auto sk = g.by_status.find(Status::skipped);
  if (sk == g.by_status.end()) return;
  const std::string& reason = sk->second.front()->reason;
  std::vector<std::string> ids;
  for (const CaseResult* r : sk->second) ids.push_back(r->case_id);
  out.push_back(
      make_finding("cases-skipped", Severity::warning, g.device,
                   fmt::format("{} ({}) on {}: {} of {} not run: {}", variant_row(g.variant, g.mode),
                               to_string(g.probe),
                               g.device, sk->second.size(), case_count(g.total),
                               reason.empty() ? "no reason recorded" : reason),
                   {}, std::move(ids)));
}

// CK failed where the same backend without CK (or with AOTriton preferred) passed.
std::vector<std::string> rule_ck_fails_where_aotriton_passes(const DeviceIndex& d) {
  std::vector<std::string> ids;
  for (const auto& [name, cases] : d.worst) {
    auto v = parse_variant(name);
    if (!v || !v->has_flag("ck")) continue;
    const Variant other = without_flag(*v, "ck");
    Variant aot = other;
    aot.flags.push_back("aotriton");
    std::sort(aot.flags.begin(), aot.flags.end());
    const std::string alternatives[] = {other.name(), aot.name()};
    for (const auto& [id, r] : cases) {
      if (!is_failure_by_default(r->status)) continue;
      for (const std::string& alt : alternatives) {
        if (passed(d.result(alt, id))) {
          add_unique(ids, id);
          break;
        }
      }
    }
  }
  return ids;
}

// The experimental gate: the same backend refused without the flag and passed with it.
std::vector<std::string> rule_experimental_gate(const DeviceIndex& d) {
  std::vector<std::string> ids;
  for (const auto& [name, cases] : d.worst) {
    auto v = parse_variant(name);
    if (!v || !v->has_flag("experimental")) continue;
    const std::string gated = without_flag(*v, "experimental").name();
    for (const auto& [id, r] : cases) {
      const CaseResult* g = d.result(gated, id);
      if (r->status == Status::pass && g && g->status == Status::unsupported) add_unique(ids, id);
    }
  }
  return ids;
}

// Our reference kernels pass where torch's fused kernels fail: the backend is at fault.
std::vector<std::string> rule_reference_passes_where_fused_fails(const DeviceIndex& d) {
  auto reference_passed = [&](const std::string& id) {
    return std::any_of(d.reference.begin(), d.reference.end(), [&](const auto& ref) {
      auto r = ref.second.find(id);
      return r != ref.second.end() && passed(r->second);
    });
  };
  std::vector<std::string> ids;
  for (const auto& [name, cases] : d.worst) {
    const std::string backend = name.substr(0, name.find('['));
    if (backend != "flash" && backend != "mem_efficient" && backend != "default") continue;
    for (const auto& [id, r] : cases) {
      if (is_failure_by_default(r->status) && reference_passed(id)) add_unique(ids, id);
    }
  }
  return ids;
}

// Silent fallback: the default dispatch ran math on a GPU.
std::vector<std::string> rule_default_falls_back_to_math(const DeviceIndex& d) {
  std::vector<std::string> ids;
  if (!d.is_gpu()) return ids;
  for (const auto& [name, cases] : d.worst) {
    if (name.rfind("default", 0) != 0) continue;
    for (const auto& [id, r] : cases) {
      if (r->status == Status::pass && r->backend_chosen == "math") add_unique(ids, id);
    }
  }
  return ids;
}

// Backward cases that fail where their forward passed (said by the worker per direction, or by
// the forward twin of the case in the same variant): training breaks where inference works.
std::vector<std::string> rule_fails_only_in_backward(const DeviceIndex& d) {
  std::vector<std::string> ids;
  for (const ResultsByVariant* results : {&d.worst, &d.reference})
    for (const auto& [name, cases] : *results)
      for (const auto& [id, r] : cases) {
        if (!r->kase.backward || !is_failure_by_default(r->status)) continue;
        const bool forward_passed =
            r->forward_status ? *r->forward_status == Status::pass
                              : passed(d.result(name, r->kase.forward_only().id()));
        if (forward_passed) add_unique(ids, id);
      }
  return ids;
}

// Cells whose later call gave another output than their first: a race or a buffer read before
// it is written, which a model meets on any step, not only the first.
std::vector<std::string> rule_later_call_differs(const DeviceIndex& d) {
  std::vector<std::string> ids;
  for (const ResultsByVariant* results : {&d.worst, &d.reference})
    for (const auto& [name, cases] : *results)
      for (const auto& [id, r] : cases)
        if (r->differing_call > 0) add_unique(ids, id);
  return ids;
}

// A cross-variant rule: what it detects (the proving case ids, empty when it does not hold)
// and the finding it makes. In `message`, {0} is the device and {1} the number of cases ("3
// cases").
struct DeviceRule {
  std::vector<std::string> (*detect)(const DeviceIndex&);
  const char* id;
  Severity severity;
  const char* message;
  const char* remedy;
};

// In report order.
const DeviceRule k_device_rules[] = {
    {rule_ck_fails_where_aotriton_passes, "disable-ck-flash", Severity::problem,
     "the CK attention kernels fail on {0} where AOTriton passes the same cases",
     "do not set TORCH_ROCM_FA_PREFER_CK=1 or preferred_rocm_fa_library(\"ck\") on this "
     "device; use AOTriton (the default)"},
    {rule_experimental_gate, "enable-aotriton-experimental", Severity::warning,
     "AOTriton refuses {0} as experimental unless TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1, and "
     "passes with it",
     "export TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 before starting Python (at your own risk: "
     "the arch is experimental in this AOTriton)"},
    {rule_reference_passes_where_fused_fails, "backend-fault-not-device", Severity::warning,
     "the doctor's reference kernels pass on {0} where torch's fused kernels fail: the fault is "
     "in the backend, not the driver or the card",
     "report it to the backend (the Markdown report carries a repro per case)"},
    {rule_fails_only_in_backward, "fails-only-in-backward", Severity::problem,
     "{1} fail on {0} only in their backward: the forward of the same cases passes, so "
     "training breaks where inference works",
     "train under the training recommendation's flags; inference can keep the inference ones"},
    {rule_later_call_differs, "nondeterministic", Severity::problem,
     "{1} on {0} returned on a later call an output that differs from the first call's (the "
     "inputs were the same): a race or a buffer read before it is written in the backend, "
     "which a model meets on any step",
     "use the recommended configuration for these shapes and report it to the backend: each "
     "cell's result names the call that differed (differing_call)"},
    {rule_default_falls_back_to_math, "default-falls-back-to-math", Severity::warning,
     "the default dispatch on {0} chose math for {1}: no fused kernel accepted them, "
     "memory grows with L^2",
     "see the recommendation for a fused configuration that passed, if any"},
};

} // namespace

Finding make_finding(std::string id, Severity severity, std::string device, std::string message,
                     std::string remedy, std::vector<std::string> case_ids) {
  Finding f;
  f.id = std::move(id);
  f.severity = severity;
  f.device = std::move(device);
  f.message = std::move(message);
  f.remedy = std::move(remedy);
  f.case_ids = std::move(case_ids);
  return f;
}

void variant_findings(const ResultIndex& index, std::vector<Finding>& out) {
  for (const VariantGroup& g : index.groups) {
    failure_findings(g, out);
    skipped_finding(g, out);
  }
}

void device_findings(const DeviceIndex& device, std::vector<Finding>& out) {
  for (const DeviceRule& rule : k_device_rules) {
    std::vector<std::string> ids = rule.detect(device);
    if (ids.empty()) continue;
    // Formatted before the ids are moved into the finding: argument order is unspecified.
    std::string message =
        fmt::format(fmt::runtime(rule.message), device.device, case_count(ids.size()));
    out.push_back(make_finding(rule.id, rule.severity, device.device, std::move(message),
                               rule.remedy, std::move(ids)));
  }
}

void compiled_findings(const DeviceIndex& eager, const DeviceIndex& compiled,
                       std::vector<Finding>& out) {
  std::vector<std::string> only_compiled, ids;
  const CaseResult* first = nullptr;
  for (const auto& [variant, cases] : compiled.worst)
    for (const auto& [id, r] : cases) {
      if (!is_failure_by_default(r->status)) continue;
      if (!passed(eager.result(variant, id))) continue; // eager fails too: not compiled's own
      add_unique(only_compiled, variant_row(variant, Mode::compiled));
      add_unique(ids, id);
      if (!first) first = r;
    }
  if (!first) return;
  std::string message =
      fmt::format("on {} only compiled calls fail: {} failed {} under torch.compile whose eager "
                  "calls pass (first {}: {}: {})",
                  compiled.device, fmt::join(only_compiled, ", "), case_count(ids.size()),
                  first->case_id, to_string(first->status), first->reason);
  out.push_back(make_finding(
      "compiled-only-failure", Severity::problem, compiled.device, std::move(message),
      "eager attention is unaffected; inside compiled code use the configuration recommended "
      "for compiled attention below, or keep SDPA out of the compiled region",
      std::move(ids)));
}

} // namespace sdpa_doctor::advice::detail
