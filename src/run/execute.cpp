#include "run/run.hpp"

#include "core/io.hpp"
#include "isolate/isolate.hpp"
#include "probes/probes.hpp"
#include "run/journal.hpp"
#include "run/launch.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <map>
#include <thread>

namespace sdpa_doctor::run {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

bool uses_math_scores(const Variant& v) {
  return v.backend == "math" || v.backend == "default" || v.backend == "ref-math";
}

// What one target's thread produces.
struct TargetOutput {
  std::vector<CaseResult> results;
  std::vector<WorkerInfo> workers;
  std::vector<Finding> findings;
};

// What every target's thread reads (and the journal and progress, which are thread-safe).
struct SharedState {
  const Plan& plan;
  const DeviceInventory& inventory;
  const ExecuteOptions& options;
  const std::map<std::string, std::string>& oracle_paths; // case id -> file
  const std::map<std::string, std::string>& host_skips;   // case id -> reason
  Journal& journal;
  Progress& progress;
};

// One planned run's cases: every one gets a CaseResult; those a worker must run are `planned`.
struct RunCases {
  std::vector<CaseResult> results;
  std::vector<isolate::PlannedCase> planned;
  std::vector<size_t> planned_index; // into results
};

CaseResult make_result(const Case& c, const RunContext& ctx, Tolerance tol) {
  CaseResult r;
  r.case_id = c.id();
  r.kase = c;
  r.device = ctx.target;
  r.probe = ctx.probe;
  r.variant = ctx.variant;
  r.tolerance = tol;
  return r;
}

// Why `c` is not run at all on this worker; empty when it is.
std::string skip_reason(const Case& c, const PlannedRun& run, const SharedState& s,
                        const std::string& unhealthy_reason, int64_t budget) {
  if (s.options.interrupted && s.options.interrupted->load()) return "interrupted";
  if (!unhealthy_reason.empty()) return unhealthy_reason;
  if (auto it = s.host_skips.find(c.id()); it != s.host_skips.end()) return it->second;
  return probes::memory_guard(c, budget, uses_math_scores(run.variant));
}

isolate::PlannedCase planned_case(const Case& c, Tolerance tol, bool gpu, const SharedState& s) {
  auto oracle = s.oracle_paths.find(c.id());
  const bool have_oracle = oracle != s.oracle_paths.end();
  isolate::PlannedCase p;
  p.id = c.id();
  p.line = probes::make_case_line(c, tol, have_oracle ? oracle->second : std::string(),
                                  s.options.warmup, s.options.repeat);
  p.deadline = s.options.case_timeout.value_or(probes::default_case_deadline(
      c, gpu, s.options.warmup + s.options.repeat, !have_oracle));
  return p;
}

RunCases sort_cases(const PlannedRun& run, const RunContext& ctx, const WorkerLaunch& launch,
                    const std::string& unhealthy_reason, RunJournal& observer, SharedState& s) {
  RunCases out;
  const bool gpu = probes::is_gpu_target(run.target);
  const int64_t budget = device_memory_budget(run.target, s.inventory);
  for (const Case& c : s.plan.cases) {
    const Tolerance tol = s.options.tolerances.for_dtype(c.dtype);
    CaseResult r = make_result(c, ctx, tol);
    if (std::string skip = skip_reason(c, run, s, unhealthy_reason, budget); !skip.empty()) {
      r.status = Status::skipped;
      r.reason = skip;
      observer.on_unrun(r);
    } else if (!launch.command) {
      r.status = Status::unsupported;
      r.reason = launch.why_not;
      observer.on_unrun(r);
    } else {
      out.planned.push_back(planned_case(c, tol, gpu, s));
      out.planned_index.push_back(out.results.size());
    }
    out.results.push_back(std::move(r));
  }
  return out;
}

isolate::RunnerOptions runner_options(const RunContext& ctx, const ExecuteOptions& options) {
  isolate::RunnerOptions ro;
  ro.run_dir = options.run_dir;
  ro.name = safe_name(fmt::format("{}-{}-{}", ctx.target, to_string(ctx.probe), ctx.variant));
  ro.worker_deadline = options.worker_timeout;
  ro.startup_deadline = options.startup_timeout;
  ro.max_restarts = options.max_worker_restarts;
  ro.keep_core_dumps = options.keep_core_dumps;
  ro.interrupted = options.interrupted;
  ro.health_check = health_check_for(ctx.target);
  return ro;
}

void apply_outcomes(const isolate::WorkerRunReport& report, RunCases& cases) {
  for (size_t i = 0; i < report.outcomes.size() && i < cases.planned_index.size(); ++i) {
    const isolate::CaseOutcome& o = report.outcomes[i];
    CaseResult& r = cases.results[cases.planned_index[i]];
    r.status = o.status;
    r.reason = o.reason;
    r.process_end = o.process_end;
    r.signatures = o.signatures;
    r.stderr_tail = o.stderr_tail;
    r.attempt = o.attempt;
    if (o.result) isolate::apply_result_event(*o.result, r);
    if (o.result) isolate::apply_canary(*o.result, r);
  }
}

// The finding of a device that failed its health check or held on to a killed worker.
Finding unhealthy_device_finding(const isolate::WorkerRunReport& report, const std::string& target,
                                 const std::string& culprit) {
  Finding f;
  f.id = report.device_wedged ? "device-wedged" : "device-unhealthy";
  f.severity = Severity::problem;
  f.device = target;
  f.message = report.device_wedged
                  ? fmt::format("{}: a worker could not be killed after {} (stuck in the driver); "
                                "the remaining cases were skipped",
                                target, culprit)
                  : fmt::format("{}: the device failed its health check after {}; the remaining "
                                "cases were skipped",
                                target, culprit);
  f.remedy = "reset the GPU (amd-smi reset / rocm-smi --gpureset -d N) or reboot, then run the "
             "doctor again";
  f.case_ids = {culprit};
  return f;
}

// Runs one planned run's worker; `unhealthy_reason` is set when the device must not be used again.
void run_one(const PlannedRun& run, SharedState& s, std::string& unhealthy_reason,
             TargetOutput& out) {
  const RunContext ctx{run.target, run.probe, run.variant.name()};
  WorkerInfo info;
  info.device = run.target;
  info.probe = run.probe;
  info.variant = ctx.variant;

  const WorkerLaunch launch = worker_launch(run, s.options);
  RunJournal observer(s.journal, s.progress, ctx);
  RunCases cases = sort_cases(run, ctx, launch, unhealthy_reason, observer, s);
  if (!launch.command) info.available = launch.why_not;

  if (!cases.planned.empty()) {
    s.journal.append({{"event", "run"},
                      {"target", run.target},
                      {"probe", to_string(run.probe)},
                      {"variant", ctx.variant},
                      {"cases", cases.planned.size()}});
    const isolate::WorkerRunReport report = isolate::run_worker(
        *launch.command, cases.planned, runner_options(ctx, s.options), &observer);
    apply_outcomes(report, cases);
    if (report.hello) {
      info.versions = isolate::hello_strings(*report.hello, "versions");
      info.facts = isolate::hello_strings(*report.hello, "facts");
    }
    info.restarts = report.restarts;
    if (report.device_unhealthy || report.device_wedged) {
      std::string culprit;
      for (const auto& o : report.outcomes)
        if (o.status == Status::crash || o.status == Status::timeout) culprit = o.case_id;
      unhealthy_reason = fmt::format("device unhealthy after {} {}", ctx.variant, culprit);
      out.findings.push_back(unhealthy_device_finding(report, run.target, culprit));
    }
  }
  out.workers.push_back(std::move(info));
  std::move(cases.results.begin(), cases.results.end(), std::back_inserter(out.results));
}

TargetOutput run_target(const std::string& target, SharedState& s) {
  TargetOutput out;
  std::string unhealthy_reason;
  for (const PlannedRun& run : s.plan.runs)
    if (run.target == target) run_one(run, s, unhealthy_reason, out);
  return out;
}

// The oracle: once per case, shared by every variant through a file. Cases too big for the host
// go into `host_skips` instead.
void write_oracles(const Plan& plan, const ExecuteOptions& options,
                   std::map<std::string, std::string>& oracle_paths,
                   std::map<std::string, std::string>& host_skips) {
  const int64_t host_budget = host_memory_budget();
  for (const Case& c : plan.cases) {
    if (options.interrupted && options.interrupted->load()) break;
    const std::string id = c.id();
    if (auto guard = probes::memory_guard(c, host_budget, false); !guard.empty()) {
      host_skips[id] = "host: " + guard;
      continue;
    }
    const std::string path = (fs::path(options.run_dir) / "oracle" / (id + ".f64")).string();
    auto written = probes::write_oracle_file(path, probes::compute_oracle(c));
    if (written) oracle_paths[id] = path;
    else spdlog::warn("oracle for {} not cached: {}", id, written.error().message);
  }
}

} // namespace

ExecuteResult execute_plan(const Plan& plan, const DeviceInventory& inventory,
                           const ExecuteOptions& options) {
  ExecuteResult result;
  std::error_code ec;
  fs::create_directories(fs::path(options.run_dir) / "oracle", ec);
  result.journal_path = (fs::path(options.run_dir) / "journal.jsonl").string();
  Journal journal(result.journal_path);
  journal.append({{"event", "start"}, {"cases", plan.cases.size()}, {"runs", plan.runs.size()}});

  const auto oracle_start = Clock::now();
  std::map<std::string, std::string> oracle_paths;
  std::map<std::string, std::string> host_skips;
  write_oracles(plan, options, oracle_paths, host_skips);
  result.oracle_ms = ms_since(oracle_start);

  const auto probes_start = Clock::now();
  Progress progress(options.progress, plan.cases.size() * plan.runs.size());
  SharedState shared{plan, inventory, options, oracle_paths, host_skips, journal, progress};
  // One thread per target: GPUs run beside each other, each strictly one worker at a time.
  std::vector<TargetOutput> outputs(plan.targets.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < plan.targets.size(); ++i)
    threads.emplace_back([&, i] { outputs[i] = run_target(plan.targets[i], shared); });
  for (auto& t : threads) t.join();
  progress.clear();
  result.probes_ms = ms_since(probes_start);

  for (auto& o : outputs) {
    std::move(o.results.begin(), o.results.end(), std::back_inserter(result.results));
    std::move(o.workers.begin(), o.workers.end(), std::back_inserter(result.workers));
    std::move(o.findings.begin(), o.findings.end(), std::back_inserter(result.findings));
  }
  fs::remove_all(fs::path(options.run_dir) / "oracle", ec);
  journal.append({{"event", "end"}, {"results", result.results.size()}});
  return result;
}

} // namespace sdpa_doctor::run
