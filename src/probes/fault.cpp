#include "probes/probes.hpp"

#include <fmt/format.h>

#include <csignal>
#include <cstdlib>
#include <limits>
#include <unistd.h>

namespace sdpa_doctor::probes {

bool FaultSpec::matches(std::string_view variant_name, std::string_view id) const {
  if (action == FaultAction::none) return false;
  return (variant == "*" || variant == variant_name) && (case_id == "*" || case_id == id);
}

Expected<FaultSpec> parse_fault_spec(std::string_view text) {
  FaultSpec spec;
  bool have_action = false;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      return make_error(fmt::format("SDPA_DOCTOR_TEST_FAULT: '{}' is not key=value", item));
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "variant") spec.variant = std::string(value);
    else if (key == "case") spec.case_id = std::string(value);
    else if (key == "action") {
      static constexpr std::pair<std::string_view, FaultAction> k_actions[] = {
          {"abort", FaultAction::abort}, {"segv", FaultAction::segv},
          {"hang", FaultAction::hang},   {"nan", FaultAction::nan},
          {"perturb", FaultAction::perturb}, {"exit3", FaultAction::exit3},
          {"poison", FaultAction::poison}};
      have_action = false;
      for (auto [name, action] : k_actions)
        if (value == name) {
          spec.action = action;
          have_action = true;
        }
      if (!have_action)
        return make_error(fmt::format("SDPA_DOCTOR_TEST_FAULT: unknown action '{}' (abort, "
                                      "segv, hang, nan, perturb, exit3, poison)",
                                      value));
    } else {
      return make_error(fmt::format("SDPA_DOCTOR_TEST_FAULT: unknown key '{}' (variant, case, "
                                    "action)",
                                    key));
    }
  }
  if (!have_action) return make_error("SDPA_DOCTOR_TEST_FAULT needs action=...");
  return spec;
}

Expected<FaultSpec> fault_from_environment() {
  const char* text = std::getenv("SDPA_DOCTOR_TEST_FAULT");
  if (!text || !*text) return FaultSpec{};
  return parse_fault_spec(text);
}

// The faults are the point: UBSan must not turn the null write into a report of its own.
__attribute__((no_sanitize("undefined"))) void trigger_process_fault(FaultAction action) {
  switch (action) {
  case FaultAction::abort: std::abort();
  case FaultAction::segv: {
    // A real invalid access, not raise(): the runner must see what a kernel fault looks like.
    volatile int* volatile bad = nullptr;
    *bad = 1;
    std::signal(SIGSEGV, SIG_DFL);
    std::raise(SIGSEGV);
    std::abort();
  }
  case FaultAction::hang:
    for (;;) ::pause();
  case FaultAction::exit3: ::_exit(3);
  case FaultAction::none:
  case FaultAction::nan:
  case FaultAction::perturb:
  case FaultAction::poison: return;
  }
}

void corrupt_output(FaultAction action, std::vector<float>& output) {
  if (output.empty()) return;
  const size_t at = output.size() / 2;
  if (action == FaultAction::nan) output[at] = std::numeric_limits<float>::quiet_NaN();
  if (action == FaultAction::perturb) output[at] += 0.5f;
}

} // namespace sdpa_doctor::probes
