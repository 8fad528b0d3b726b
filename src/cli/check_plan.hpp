// cli/check_plan: the Plan of a `check` run, pure data built from options and device facts:
// probe targets x probes x variants x cases. No I/O.
#pragma once

#include "core/case.hpp"
#include "core/model.hpp"
#include "core/variant.hpp"

#include <string>
#include <vector>

namespace sdpa_doctor::cli {

// One worker process's worth of work: a probe and a variant on one target, over cases.
struct PlannedRun {
  std::string target; // "cpu", "cuda:0"
  Probe probe = Probe::torch;
  Variant variant;
};

struct Plan {
  std::vector<std::string> targets;
  std::vector<Case> cases; // unique by id, in planned order
  std::vector<PlannedRun> runs; // grouped by target, in the order they run
};

struct PlanRequest {
  std::vector<Case> cases;
  std::vector<Probe> probes;              // which probe kinds
  std::vector<std::string> variant_filter; // empty = all; else variant names or backends
  std::vector<std::string> targets;        // empty = cpu + every GPU in the inventory
};

// Every name `--variant` may use: the variants of all probes on any target, then their backends.
std::vector<std::string> known_variant_names();
// The filter entries that name no variant or backend any probe has, in the order given.
std::vector<std::string> unknown_variants(const std::vector<std::string>& filter);

// Builds the plan; cases are de-duplicated by id keeping the first.
Plan make_plan(const PlanRequest& request, const DeviceInventory& inventory);

} // namespace sdpa_doctor::cli
