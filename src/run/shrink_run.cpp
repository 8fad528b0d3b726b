// The driver of failure shrinking: each batch the pure search asks for is a plan of its own, run
// through execute_plan in a fresh worker like any other cases (crashes included).
#include "core/io.hpp"
#include "core/text.hpp"
#include "run/run.hpp"
#include "run/shrink.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <tuple>

namespace sdpa_doctor::run {

namespace {

namespace fs = std::filesystem;

struct Group {
  std::string device;
  Probe probe = Probe::torch;
  std::string variant;
  Mode mode = Mode::eager; // a compiled failure is shrunk compiled
  const CaseResult* failing = nullptr; // the smallest failing case of the group
};

// One group per failing (device, probe, variant), in the order their first failure came.
std::vector<Group> failing_groups(const std::vector<CaseResult>& results) {
  std::vector<Group> groups;
  for (const CaseResult& r : results) {
    // A case its worker never began (an interpreter that hung at start) says nothing of shapes.
    if (outcome_of(r.status) != ProbeOutcome::fails || r.wall_ms == 0) continue;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
      return g.device == r.device && g.probe == r.probe && g.variant == r.variant &&
             g.mode == r.mode;
    });
    if (it == groups.end()) {
      groups.push_back({r.device, r.probe, r.variant, r.mode, &r});
    } else if (r.kase.flops() < it->failing->kase.flops()) {
      it->failing = &r;
    }
  }
  return groups;
}

Shrink shrink_group(const Group& g, const DeviceInventory& inventory, ExecuteOptions exec,
                    const ShrinkBudget& budget, int index) {
  const auto start = std::chrono::steady_clock::now();
  Shrink out;
  out.device = g.device;
  out.probe = g.probe;
  out.variant = g.variant;
  out.mode = g.mode;
  out.status = g.failing->status;
  out.original_case = g.failing->case_id;
  const bool progress = exec.progress != ProgressMode::none;
  exec.progress = ProgressMode::none; // one line per round instead of each round's own
  exec.max_worker_restarts = budget.cases; // a crash is an answer here, not a reason to stop
  auto variant = parse_variant(g.variant);
  ShrinkSearch search(g.failing->kase);
  int round = 0;
  for (std::vector<Case> batch = search.next(); !batch.empty(); batch = search.next()) {
    const double seconds = ms_since(start) / 1000.0;
    const int left = budget.cases - int(out.tried.size());
    if (left <= 0 || seconds >= budget.seconds || (exec.interrupted && exec.interrupted->load())) {
      out.budget_exhausted = true;
      search.stop();
      continue;
    }
    if (int(batch.size()) > left) batch.resize(size_t(left));
    Plan plan;
    plan.targets = {g.device};
    plan.cases = batch;
    plan.runs = {{g.device, g.probe, variant ? *variant : Variant{g.variant, {}}, std::nullopt,
                  g.mode, {}}};
    if (g.mode == Mode::compiled)
      for (const Case& c : batch) plan.runs.front().case_ids.push_back(c.id());
    ExecuteOptions round_exec = exec;
    round_exec.run_dir =
        (fs::path(exec.run_dir) / "shrink" / fmt::format("{}-{}", index, round++)).string();
    round_exec.append_journal = false; // each round's journal is its own
    std::error_code ec;
    fs::create_directories(round_exec.run_dir, ec);
    ExecuteResult done = execute_plan(plan, inventory, round_exec);
    if (!done.write_error.empty()) {
      // Cells a full disk kept from running say nothing of the failure: stop here.
      std::fprintf(stderr, "shrinking %s on %s stopped: %s\n", g.variant.c_str(),
                   g.device.c_str(), escape_to_one_line(done.write_error).c_str());
      out.budget_exhausted = true;
      search.stop();
      continue;
    }
    for (const CaseResult& r : done.results) {
      search.record(r.kase, outcome_of(r.status));
      out.tried.emplace_back(r.case_id, r.status);
    }
    if (progress)
      std::fprintf(stderr, "shrinking %s on %s: round %d, %zu/%d cases, %.1f/%.0f s\n",
                   g.variant.c_str(), g.device.c_str(), round, out.tried.size(), budget.cases,
                   ms_since(start) / 1000.0, budget.seconds);
  }
  search.fill(out);
  out.rule = shrink_rule(out);
  out.seconds = ms_since(start) / 1000.0;
  return out;
}

} // namespace

std::vector<Shrink> shrink_failures(const std::vector<CaseResult>& results,
                                    const DeviceInventory& inventory, const ExecuteOptions& exec,
                                    const ShrinkBudget& budget) {
  std::vector<Shrink> out;
  int index = 0;
  for (const Group& g : failing_groups(results))
    out.push_back(shrink_group(g, inventory, exec, budget, index++));
  return out;
}

} // namespace sdpa_doctor::run
