#include "run/run.hpp"

#include "probes/probes.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <set>

namespace sdpa_doctor::run {

namespace {
bool selected(const Variant& v, const std::vector<std::string>& filter) {
  if (filter.empty()) return true;
  return std::any_of(filter.begin(), filter.end(),
                     [&](const std::string& f) { return f == v.name() || f == v.backend; });
}
} // namespace

std::vector<std::string> known_variant_names() {
  std::vector<std::string> names;
  const auto add = [&](const std::string& name) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  };
  // A GPU target plans a superset of the CPU's variants.
  for (Probe probe : {Probe::torch, Probe::reference})
    for (const Variant& v : probes::plan_variants(probe, "cuda:0")) add(v.name());
  for (Probe probe : {Probe::torch, Probe::reference})
    for (const Variant& v : probes::plan_variants(probe, "cuda:0")) add(v.backend);
  return names;
}

std::vector<std::string> unknown_variants(const std::vector<std::string>& filter) {
  const std::vector<std::string> known = known_variant_names();
  std::vector<std::string> unknown;
  for (const std::string& f : filter)
    if (std::find(known.begin(), known.end(), f) == known.end()) unknown.push_back(f);
  return unknown;
}

Plan make_plan(const PlanRequest& request, const DeviceInventory& inventory) {
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
  for (const std::string& target : plan.targets)
    for (Probe probe : request.probes)
      for (const Variant& v : probes::plan_variants(probe, target))
        if (selected(v, request.variant_filter)) plan.runs.push_back({target, probe, v});
  return plan;
}

} // namespace sdpa_doctor::run
