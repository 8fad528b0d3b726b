#include "workers/planted_fault.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <fcntl.h>
#include <cstdlib>
#include <limits>
#include <optional>
#include <unistd.h>

namespace sdpa_doctor::workers {

bool PlantedFault::matches(std::string_view variant_name, std::string_view id) const {
  if (action == FaultAction::none) return false;
  return (variant == "*" || variant == variant_name) && (case_id == "*" || case_id == id);
}

bool PlantedFault::matches(std::string_view variant_name, std::string_view id, const Case& c) const {
  if (!matches(variant_name, id)) return false;
  if (stage == Stage::backward && !c.backward) return false;
  for (const FaultCondition& w : when)
    if (!w.holds(c)) return false;
  return true;
}

namespace {

std::optional<int64_t> condition_value(std::string_view name, const Case& c) {
  if (name == "b") return c.b;
  if (name == "hq") return c.hq;
  if (name == "hkv") return c.hkv;
  if (name == "lq") return c.lq;
  if (name == "lkv") return c.lkv;
  if (name == "d") return c.d;
  if (name == "causal") return c.causal ? 1 : 0;
  if (name == "bottom_right") return c.causal && c.causal_bottom_right ? 1 : 0;
  if (name == "gqa") return c.hq != c.hkv ? 1 : 0;
  if (name == "mask") return static_cast<int64_t>(c.mask);
  const auto [q, k, v] = c.qkv_layouts();
  if (name == "transposed")
    return q == Layout::transposed && k == q && v == q ? 1 : 0;
  if (name == "q_layout") return static_cast<int64_t>(q);
  if (name == "k_layout") return static_cast<int64_t>(k);
  if (name == "v_layout") return static_cast<int64_t>(v);
  if (name == "mask_layout") return static_cast<int64_t>(c.mask_layout);
  if (name == "mask_dtype") return c.mask != Mask::none && c.mask_value_dtype() != c.dtype ? 1 : 0;
  if (name == "mask_shape") return static_cast<int64_t>(c.mask_shape);
  if (name == "window") return c.window;
  if (name == "large") return c.large ? 1 : 0;
  if (name == "bwd") return c.backward ? 1 : 0;
  if (name == "dropout") return c.dropout_percent;
  if (name == "mrows") return c.masked_rows ? 1 : 0;
  return std::nullopt;
}

Expected<FaultCondition> parse_condition(std::string_view text) {
  FaultCondition w;
  const size_t at = text.find_first_of("<>=");
  w.name = std::string(text.substr(0, at));
  const auto bad = [&] {
    return make_error(fmt::format("SDPA_DOCTOR_TEST_FAULT: bad condition '{}' (NAME, NAME>N, "
                                  "NAME<N, NAME>=N, NAME<=N, NAME=N; NAME b, hq, hkv, lq, lkv, "
                                  "d, causal, gqa, mask, transposed, q_layout, k_layout, "
                                  "v_layout, mask_dtype, mask_shape, mask_layout, window, "
                                  "large, bwd, dropout, mrows, bottom_right, dtype)",
                                  text));
  };
  if (at == std::string_view::npos) {
    if (w.name == "dtype" || !condition_value(w.name, Case{})) return bad();
    return w;
  }
  const bool or_equal = text[at] != '=' && text.substr(at + 1).starts_with('=');
  w.op = std::string(text.substr(at, or_equal ? 2 : 1));
  const std::string_view value = text.substr(at + w.op.size());
  if (w.name == "dtype") {
    if (w.op != "=" || !dtype_from_string(value)) return bad();
    w.text = std::string(to_string(*dtype_from_string(value)));
    return w;
  }
  if (!condition_value(w.name, Case{}) || value.empty()) return bad();
  size_t used = 0;
  try {
    w.value = std::stoll(std::string(value), &used);
  } catch (const std::exception&) {
    return bad();
  }
  if (used != value.size()) return bad();
  return w;
}

} // namespace

bool FaultCondition::holds(const Case& c) const {
  if (name == "dtype") return to_string(c.dtype) == text;
  const int64_t v = condition_value(name, c).value_or(0);
  if (op == ">") return v > value;
  if (op == "<") return v < value;
  if (op == ">=") return v >= value;
  if (op == "<=") return v <= value;
  if (op == "=") return v == value;
  return v != 0;
}

bool PlantedFault::fires() const {
  if (once.empty()) return true;
  // Whoever creates the marker first fires; every later match, in any process, does not.
  const int fd = ::open(once.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

const PlantedFault* matching_fault(const std::vector<PlantedFault>& specs, std::string_view variant_name,
                                const Case& c, std::string_view id) {
  for (const PlantedFault& s : specs)
    if (s.matches(variant_name, id, c)) return s.fires() ? &s : nullptr;
  return nullptr;
}

Expected<std::vector<PlantedFault>> parse_planted_faults(std::string_view text) {
  std::vector<PlantedFault> specs;
  while (!text.empty()) {
    const size_t semi = text.find(';');
    const std::string_view one = text.substr(0, semi);
    text = semi == std::string_view::npos ? std::string_view{} : text.substr(semi + 1);
    if (one.empty()) continue;
    auto spec = parse_planted_fault(one);
    if (!spec) return make_error(spec.error().message);
    specs.push_back(std::move(*spec));
  }
  return specs;
}

Expected<PlantedFault> parse_planted_fault(std::string_view text) {
  PlantedFault spec;
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
    else if (key == "once") {
      if (value.empty() || value.front() != '/')
        return make_error("SDPA_DOCTOR_TEST_FAULT: once= takes an absolute path");
      spec.once = std::string(value);
    }
    else if (key == "stage") {
      if (value != "forward" && value != "backward")
        return make_error(fmt::format("SDPA_DOCTOR_TEST_FAULT: unknown stage '{}' (forward, "
                                      "backward)",
                                      value));
      spec.stage = value == "backward" ? PlantedFault::Stage::backward : PlantedFault::Stage::forward;
    }
    else if (key == "when") {
      auto w = parse_condition(value);
      if (!w) return make_error(w.error().message);
      spec.when.push_back(std::move(*w));
    }
    else if (key == "action") {
      static constexpr std::pair<std::string_view, FaultAction> k_actions[] = {
          {"abort", FaultAction::abort}, {"segv", FaultAction::segv},
          {"hang", FaultAction::hang},   {"nan", FaultAction::nan},
          {"perturb", FaultAction::perturb}, {"exit3", FaultAction::exit3},
          {"poison", FaultAction::poison}, {"zeros", FaultAction::zeros}};
      have_action = false;
      for (auto [name, action] : k_actions)
        if (value == name) {
          spec.action = action;
          have_action = true;
        }
      if (!have_action)
        return make_error(fmt::format("SDPA_DOCTOR_TEST_FAULT: unknown action '{}' (abort, "
                                      "segv, hang, nan, perturb, exit3, poison, zeros)",
                                      value));
    } else {
      return make_error(fmt::format("SDPA_DOCTOR_TEST_FAULT: unknown key '{}' (variant, case, "
                                    "when, once, stage, action)",
                                    key));
    }
  }
  if (!have_action) return make_error("SDPA_DOCTOR_TEST_FAULT needs action=...");
  return spec;
}

Expected<std::vector<PlantedFault>> planted_faults_from_environment() {
  const char* text = std::getenv("SDPA_DOCTOR_TEST_FAULT");
  if (!text || !*text) return std::vector<PlantedFault>{};
  return parse_planted_faults(text);
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
  case FaultAction::poison:
  case FaultAction::zeros: return;
  }
}

void corrupt_output(FaultAction action, std::vector<float>& output, const Case& c) {
  if (output.empty()) return;
  // A masked_rows case's NaN lands in a fully masked row (query 3 of the first head): a backend
  // that returns NaN for padded rows.
  const size_t at = c.masked_rows && c.lq > 3 ? size_t(3 * c.d) : output.size() / 2;
  if (action == FaultAction::nan) output[at] = std::numeric_limits<float>::quiet_NaN();
  if (action == FaultAction::perturb) output[at] += 0.5f;
  if (action == FaultAction::zeros) std::fill(output.begin(), output.end(), 0.0f);
}

std::string planted_canary(FaultAction action, std::string measured) {
  if (action == FaultAction::poison)
    return "failed: injected deferred device error (SDPA_DOCTOR_TEST_FAULT action=poison)";
  // The words torch prints for the deferred launch error, so known issues see what they would.
  if (action == FaultAction::zeros)
    return "failed: AcceleratorError: HIP error: invalid argument (hipErrorInvalidValue, injected "
           "by SDPA_DOCTOR_TEST_FAULT action=zeros)";
  return measured;
}

} // namespace sdpa_doctor::workers
