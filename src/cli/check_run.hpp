// cli/check_run: executes a Plan. Computes the shared float64 oracles, runs one worker process
// per (target, probe, variant) through the isolation runner (targets in parallel, one worker per
// target at a time), journals every outcome as it lands and turns outcomes into CaseResults.
#pragma once

#include "cli/check_plan.hpp"
#include "core/model.hpp"
#include "probes/tolerance.hpp"

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace sdpa_doctor::cli {

struct ExecuteOptions {
  std::string run_dir;       // journal, oracles, worker logs
  std::string python;        // interpreter for the python probe; empty = not available
  std::string python_reason; // why there is none, when empty
  probes::TolerancePolicy tolerances;
  std::optional<std::chrono::milliseconds> case_timeout; // overrides the size-based default
  std::chrono::milliseconds worker_timeout{0};           // 0 = none
  // Spawn to first `begin` (interpreter start, `import torch`) and between cases.
  std::chrono::milliseconds startup_timeout{60'000};
  int max_worker_restarts = 4;
  bool keep_core_dumps = false;
  int warmup = 1;
  int repeat = 3;
  bool progress = false;     // live progress line on stderr
  const std::atomic<bool>* interrupted = nullptr;
};

struct ExecuteResult {
  std::vector<CaseResult> results;
  std::vector<WorkerInfo> workers;
  std::vector<Finding> findings; // wedged/unhealthy devices, missing workers
  double oracle_ms = 0;
  double probes_ms = 0;
  std::string journal_path;
};

ExecuteResult execute_plan(const Plan& plan, const DeviceInventory& inventory,
                           const ExecuteOptions& options);

} // namespace sdpa_doctor::cli
