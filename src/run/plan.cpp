#include "run/run.hpp"

#include "cases/cases.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace sdpa_doctor::run {

namespace {
bool selected(const Variant& v, const std::vector<std::string>& filter) {
  if (filter.empty()) return true;
  return std::any_of(filter.begin(), filter.end(),
                     [&](const std::string& f) { return f == v.name() || f == v.backend; });
}

// The variants' flags (ck, aotriton, experimental) switch ROCm's flash kernels: on an NVIDIA GPU
// they select nothing, so those variants are not planned there.
bool fits_target(const Variant& v, const std::string& target, const DeviceInventory& inventory) {
  if (v.flags.empty()) return true;
  return std::none_of(inventory.devices.begin(), inventory.devices.end(), [&](const Device& d) {
    return is_nvidia_gpu(d) && d.index >= 0 && fmt::format("cuda:{}", d.index) == target;
  });
}
} // namespace

std::vector<std::string> known_variant_names() {
  std::vector<std::string> names;
  const auto add = [&](const std::string& name) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  };
  // A GPU target plans a superset of the CPU's variants.
  for (Probe probe : {Probe::torch, Probe::reference})
    for (const Variant& v : cases::plan_variants(probe, "cuda:0")) add(v.name());
  for (Probe probe : {Probe::torch, Probe::reference})
    for (const Variant& v : cases::plan_variants(probe, "cuda:0")) add(v.backend);
  return names;
}

std::vector<std::string> unknown_variants(const std::vector<std::string>& filter) {
  const std::vector<std::string> known = known_variant_names();
  std::vector<std::string> unknown;
  for (const std::string& f : filter)
    if (std::find(known.begin(), known.end(), f) == known.end()) unknown.push_back(f);
  return unknown;
}

bool PlannedRun::takes(const Case& c) const {
  return mode == Mode::eager || std::find(case_ids.begin(), case_ids.end(), c.id()) != case_ids.end();
}

bool compiles_on(const Variant& variant, const std::string& target) {
  if (cases::is_gpu_target(target)) return true;
  return variant.backend != "mem_efficient" && variant.backend != "cudnn";
}

Plan make_plan(const PlanRequest& request, const DeviceInventory& inventory,
               const ModeRequest& modes) {
  Plan plan;
  std::set<std::string> seen;
  for (const Case& c : request.cases)
    if (seen.insert(c.id()).second) plan.cases.push_back(c);

  plan.targets = request.targets;
  if (plan.targets.empty()) {
    plan.targets.push_back("cpu");
    for (const Device& d : inventory.devices)
      if (d.index >= 0) plan.targets.push_back(fmt::format("cuda:{}", d.index));
  }
  const auto wants = [&](Mode m) {
    return modes.modes.empty() ||
           std::find(modes.modes.begin(), modes.modes.end(), m) != modes.modes.end();
  };
  // The compile family among the planned cases, in plan order.
  std::vector<std::string> compiled;
  for (const Case& c : plan.cases)
    if (std::find(modes.case_ids.begin(), modes.case_ids.end(), c.id()) != modes.case_ids.end())
      compiled.push_back(c.id());
  for (const std::string& target : plan.targets)
    for (Probe probe : request.probes) {
      for (const Variant& v : cases::plan_variants(probe, target))
        if (selected(v, request.variant_filter) && fits_target(v, target, inventory) &&
            wants(Mode::eager))
          plan.runs.push_back({target, probe, v, std::nullopt, Mode::eager, {}});
      // The libtorch probe has no compiled mode: its compiled cells are not planned at all.
      if (probe != Probe::python || compiled.empty() || !wants(Mode::compiled)) continue;
      for (const Variant& v : cases::plan_variants(probe, target))
        if (selected(v, request.variant_filter) && fits_target(v, target, inventory) &&
            compiles_on(v, target))
          plan.runs.push_back({target, probe, v, std::nullopt, Mode::compiled, compiled});
    }
  return plan;
}

// Results in plan order (run, then case), whatever order the batches produced them in.
void sort_by_plan(const Plan& plan, std::vector<CaseResult>& results) {
  std::map<std::string, size_t> run_order, case_order;
  for (size_t i = 0; i < plan.runs.size(); ++i)
    run_order.try_emplace(plan.runs[i].target + "|" + std::string(to_string(plan.runs[i].probe)) +
                              "|" + variant_row(plan.runs[i].variant.name(), plan.runs[i].mode),
                          i);
  for (size_t i = 0; i < plan.cases.size(); ++i) case_order.try_emplace(plan.cases[i].id(), i);
  const auto key = [&](const CaseResult& r) {
    const std::string run =
        r.device + "|" + std::string(to_string(r.probe)) + "|" + variant_row(r.variant, r.mode);
    return std::pair{run_order[run], case_order[r.case_id]};
  };
  std::stable_sort(results.begin(), results.end(),
                   [&](const CaseResult& a, const CaseResult& b) { return key(a) < key(b); });
}

nlohmann::json to_json(const Plan& plan) {
  nlohmann::json runs = nlohmann::json::array(), cases = nlohmann::json::array();
  for (const PlannedRun& r : plan.runs) {
    nlohmann::json run{{"target", r.target}, {"probe", to_string(r.probe)}, {"variant", r.variant.name()}};
    if (r.mode != Mode::eager) {
      run["mode"] = to_string(r.mode);
      run["case_ids"] = r.case_ids;
    }
    if (r.verify)
      run["verify"] = {{"id", r.verify->id},
                       {"snippet", r.verify->snippet},
                       {"environment", r.verify->environment}};
    runs.push_back(std::move(run));
  }
  for (const Case& c : plan.cases) cases.push_back(to_json(c));
  return {{"targets", plan.targets}, {"runs", runs}, {"cases", cases}};
}

Expected<Plan> plan_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return make_error("the plan is not a JSON object");
  Plan plan;
  try {
    plan.targets = j.at("targets").get<std::vector<std::string>>();
    for (const auto& r : j.at("runs")) {
      const std::string probe_name = r.at("probe").get<std::string>();
      auto probe = probe_from_string(probe_name);
      if (!probe) return make_error(fmt::format("the plan names an unknown probe '{}'", probe_name));
      auto variant = parse_variant(r.at("variant").get<std::string>());
      if (!variant) return make_error("the plan names an unknown variant: " + variant.error().message);
      PlannedRun run{r.at("target").get<std::string>(), *probe, *variant, std::nullopt,
                     Mode::eager, {}};
      if (const auto m = r.find("mode"); m != r.end()) {
        const auto mode = m->is_string() ? mode_from_string(m->get<std::string>()) : std::nullopt;
        if (!mode) return make_error("the plan names an unknown mode: " + m->dump());
        run.mode = *mode;
        run.case_ids = r.value("case_ids", std::vector<std::string>{});
      }
      if (const auto v = r.find("verify"); v != r.end())
        run.verify = VerifyRun{v->at("id").get<std::string>(), v->at("snippet").get<std::string>(),
                               v->at("environment")
                                   .get<std::vector<std::pair<std::string, std::string>>>()};
      plan.runs.push_back(std::move(run));
    }
    for (const auto& c : j.at("cases")) {
      auto parsed = case_from_json(c);
      if (!parsed) return make_error("the plan holds a bad case: " + parsed.error().message);
      plan.cases.push_back(*parsed);
    }
  } catch (const nlohmann::json::exception&) {
    return make_error("the plan lacks its targets, runs or cases");
  }
  return plan;
}

} // namespace sdpa_doctor::run
