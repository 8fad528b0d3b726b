#include "run/run.hpp"

#include "core/io.hpp"
#include "core/model_json.hpp"
#include "isolate/isolate.hpp"
#include "cases/cases.hpp"
#include "protocol/protocol.hpp"
#include "run/journal.hpp"
#include "run/launch.hpp"
#include "run/oracle_feed.hpp"
#include "workers/torch_worker.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
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
  std::map<size_t, WorkerInfo> workers; // by index into Plan::runs; one per run over all batches
  std::vector<Finding> findings;
  std::map<Probe, std::string> unstartable; // probe -> why its worker could not even start
  std::string plugin_unusable; // why the libtorch worker could not use its plugin; empty: it could
  std::string write_error; // the first cases file that could not be written
};

// What every target's thread reads (and the journal and progress, which are thread-safe).
struct SharedState {
  const Plan& plan;
  const DeviceInventory& inventory;
  const ExecuteOptions& options;
  OracleFeed& feed; // oracle files and host skips, per case index
  Journal& journal;
  Progress& progress;
  const ProbeServer& probe_server; // the Python workers' start-up server (sockets empty: none)
  const ProbeServer& torch_server; // the libtorch workers'
  const std::map<std::string, const CaseResult*>& finished; // by cell_key: measured before
};

// One planned run's cases: every one gets a CaseResult; those a worker must run are `planned`.
struct RunCases {
  std::vector<CaseResult> results;
  std::vector<bool> new_result; // false: an earlier run's result, already in the journal
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
  r.mode = ctx.mode;
  r.tolerance = tol;
  return r;
}

// Why a cell is not run, in words and as data; an empty reason: it is run.
struct Skip {
  std::string reason;
  SkipCause cause = SkipCause::none;
  std::optional<Culprit> culprit;
};

void mark_skipped(CaseResult& r, const Skip& skip) {
  r.status = Status::skipped;
  r.reason = skip.reason;
  r.cause = skip.cause;
  r.culprit = skip.culprit;
}

// Why `c` is not run at all on this worker; an empty reason when it is.
Skip skip_reason(size_t index, const PlannedRun& run, const SharedState& s,
                 const Skip& unhealthy, int64_t budget) {
  if (s.options.interrupted && s.options.interrupted->load())
    return {"interrupted", SkipCause::interrupted, {}};
  if (!unhealthy.reason.empty()) return unhealthy;
  if (std::string guard = cases::target_guard(s.plan.cases[index], run.target); !guard.empty())
    return {guard, SkipCause::target_guard, {}};
  if (std::string host = s.feed.host_skip(index); !host.empty())
    return {host, SkipCause::host_memory_guard, {}};
  return {cases::memory_guard(s.plan.cases[index], budget, uses_math_scores(run.variant)),
          SkipCause::memory_guard, {}};
}

// Why a worker could not be launched for the probe: its cells are skipped, never unsupported (no
// backend refused anything). No interpreter with torch at all is the python probe's unusable case.
Skip unlaunchable(const PlannedRun& run, const WorkerLaunch& launch, const ExecuteOptions& o) {
  if (run.probe == Probe::python && (o.python_unusable || o.python.empty()))
    return {launch.why_not, SkipCause::python_unusable, {}};
  if (run.probe == Probe::torch && !o.torch_plugin_why_not.empty())
    return {launch.why_not, SkipCause::plugin_unusable, {}};
  return {launch.why_not, SkipCause::worker_missing, {}};
}

isolate::PlannedCase planned_case(size_t index, Tolerance tol, bool gpu, const SharedState& s) {
  const Case& c = s.plan.cases[index];
  const std::string oracle = s.feed.path(index);
  const bool have_oracle = !oracle.empty();
  isolate::PlannedCase p;
  p.id = c.id();
  p.line = protocol::make_case_line(c, tol, cases::gradient_tolerance(tol), oracle,
                                    s.options.warmup, s.options.repeat,
                                    int(s.options.call_budget.count()));
  p.deadline = s.options.case_timeout.value_or(cases::default_case_deadline(
      c, gpu, s.options.warmup + s.options.repeat, !have_oracle));
  return p;
}

RunCases sort_cases(const PlannedRun& run, const std::vector<size_t>& batch, const RunContext& ctx,
                    const WorkerLaunch& launch, const Skip& unhealthy,
                    RunJournal& observer, SharedState& s) {
  RunCases out;
  const bool gpu = cases::is_gpu_target(run.target);
  const int64_t budget = device_memory_budget(run.target, s.inventory);
  for (size_t index : batch) {
    const Case& c = s.plan.cases[index];
    if (!run.takes(c)) continue;
    if (auto done = s.finished.find(cell_key(run.target, run.probe, ctx.variant, run.mode, c.id()));
        done != s.finished.end()) {
      out.results.push_back(*done->second);
      out.new_result.push_back(false);
      continue;
    }
    const Tolerance tol = s.options.tolerances.for_dtype(c.dtype);
    CaseResult r = make_result(c, ctx, tol);
    if (Skip skip = skip_reason(index, run, s, unhealthy, budget); !skip.reason.empty()) {
      mark_skipped(r, skip);
      observer.on_unrun(r);
    } else if (!launch.command) {
      // An interpreter that cannot run the probe is the user's setup: nothing was measured.
      // So is a LibTorch plugin that could not be had: nothing of a backend was measured.
      mark_skipped(r, unlaunchable(run, launch, s.options));
      observer.on_unrun(r);
    } else {
      out.planned.push_back(planned_case(index, tol, gpu, s));
      out.planned_index.push_back(out.results.size());
    }
    out.results.push_back(std::move(r));
    out.new_result.push_back(true);
  }
  return out;
}

isolate::RunnerOptions runner_options(const RunContext& ctx, const ExecuteOptions& options,
                                      const DeviceInventory& inventory) {
  isolate::RunnerOptions ro;
  ro.run_dir = options.run_dir;
  ro.name = safe_name(fmt::format("{}-{}-{}{}", ctx.target, to_string(ctx.probe), ctx.variant,
                                  ctx.mode == Mode::eager ? "" : "-compiled"));
  ro.worker_deadline = options.worker_timeout;
  ro.startup_deadline = options.startup_timeout;
  ro.max_restarts = options.max_worker_restarts;
  ro.keep_core_dumps = options.keep_core_dumps;
  ro.interrupted = options.interrupted;
  ro.health_check = health_check_for(ctx.target, inventory);
  ro.judge = cases::judge_worker_event;
  return ro;
}

void apply_outcomes(const isolate::WorkerRunReport& report, const RunContext& ctx,
                    RunCases& cases) {
  for (size_t i = 0; i < report.outcomes.size() && i < cases.planned_index.size(); ++i) {
    const isolate::CaseOutcome& o = report.outcomes[i];
    CaseResult& r = cases.results[cases.planned_index[i]];
    r.status = o.status;
    r.reason = o.reason;
    r.process_end = o.process_end;
    r.signatures = o.signatures;
    r.stderr_tail = o.stderr_tail;
    r.attempt = o.attempt;
    r.wall_ms = o.elapsed_ms;
    r.cause = o.cause;
    if (!o.culprit.empty()) r.culprit = Culprit{ctx.variant, o.culprit};
    if (o.result) protocol::apply_result(*o.result, r);
    if (o.phase) { // ended inside its backward: the forward was judged before it began
      r.forward_status = protocol::read_phase(*o.phase).forward;
      r.backward_status = o.status;
    }
  }
}

// The last line the worker wrote to stderr before it died, e.g. the loader's complaint.
std::string last_stderr_line(const std::string& tail) {
  size_t end = tail.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return {};
  const size_t start = tail.rfind('\n', end);
  return tail.substr(start == std::string::npos ? 0 : start + 1,
                     end - (start == std::string::npos ? 0 : start + 1) + 1);
}

// A worker that exited 127 before its hello never ran: the loader or exec refused it (a missing
// shared library, a bad interpreter). That is this install, not a backend: its cells are
// `skipped` with the loader's words, and the run says it once for the probe. Returns the reason,
// empty when the worker did start.
std::string unstartable_reason(const isolate::WorkerRunReport& report, const RunContext& ctx,
                               RunCases& cases) {
  if (report.hello || report.outcomes.empty()) return {};
  for (const auto& o : report.outcomes)
    if (!o.process_end || o.process_end->exit_code != exit_code::exec_failed) return {};
  const std::string said = last_stderr_line(report.outcomes.front().stderr_tail);
  const std::string reason =
      fmt::format("the {} worker cannot start: {}", to_string(ctx.probe),
                  said.empty() ? "it exited with code 127 before saying hello" : said);
  for (size_t index : cases.planned_index)
    mark_skipped(cases.results[index], {reason, SkipCause::worker_unstartable, {}});
  return reason;
}

// A libtorch worker that could not use its plugin refused every case saying so (its hello is the
// handshake): nothing of a backend was measured, so its cells are skipped with that reason.
std::string plugin_unusable_reason(const isolate::WorkerRunReport& report, const RunContext& ctx,
                                   RunCases& cases) {
  if (ctx.probe != Probe::torch || report.outcomes.empty()) return {};
  for (const auto& o : report.outcomes)
    if (o.status != Status::unsupported || !o.reason.starts_with(workers::k_plugin_unusable))
      return {};
  const std::string reason = report.outcomes.front().reason;
  for (size_t index : cases.planned_index)
    mark_skipped(cases.results[index], {reason, SkipCause::plugin_unusable, {}});
  return reason;
}

Finding plugin_unusable_finding(const std::string& reason) {
  Finding f;
  f.id = "torch-plugin-unusable";
  f.severity = Severity::warning;
  f.message = reason;
  f.remedy = "delete that file (the next check builds it again) or check that CXX names a "
             "working C++ compiler; the other probes ran";
  return f;
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

// Said once for a probe whose worker cannot start, instead of once per cell.
Finding unstartable_finding(Probe probe, const std::string& reason) {
  Finding f;
  f.id = "worker-cannot-start";
  f.severity = Severity::problem;
  f.message = fmt::format("the {} probe did not run: {}", to_string(probe), reason);
  f.remedy = probe == Probe::torch
                 ? "the LibTorch worker cannot load its libraries: rebuild and reinstall the "
                   "doctor against the LibTorch that is installed (scripts/setup.sh), or leave "
                   "the probe out with --probe reference,python"
                 : "reinstall the doctor (scripts/setup.sh); its workers must sit beside it";
  return f;
}

// Said once for the whole python probe, instead of once per cell.
Finding python_unusable_finding(const std::string& reason) {
  Finding f;
  f.id = "python-probe-unusable";
  f.severity = Severity::problem;
  f.message = fmt::format("the python probe did not run: {}", reason);
  f.remedy = "point --python at an interpreter whose torch imports (e.g. the venv your model "
             "runs in: --python \"$(which python)\"), or leave the probe out with --no-python";
  return f;
}

// Said once when the run directory could not be written: why the exit code is 4 and what the
// skipped cells have in common.
Finding unwritable_run_dir_finding(const std::string& why) {
  Finding f;
  f.id = k_run_dir_unwritable;
  f.severity = Severity::problem;
  f.message = "the run directory could not be written: " + why;
  f.remedy = "free space on that file system or pick another --run-dir, then run the check again";
  return f;
}

// Runs one planned run's worker over one batch of cases; `unhealthy` is set when the device must
// not be used again.
void run_one(size_t run_index, size_t batch_index, SharedState& s, Skip& unhealthy,
             TargetOutput& out) {
  const PlannedRun& run = s.plan.runs[run_index];
  const RunContext ctx{run.target, run.probe, run.variant.name(), run.mode};
  WorkerInfo& info = out.workers[run_index];
  info.device = run.target;
  info.probe = run.probe;
  info.variant = ctx.variant;
  info.mode = run.mode;

  const WorkerLaunch launch = worker_launch(
      run, s.options,
      run.probe == Probe::python  ? s.probe_server.for_mode(run.mode)
      : run.probe == Probe::torch ? s.torch_server.socket
                                  : std::string());
  RunJournal observer(s.journal, s.progress, ctx);
  RunCases cases = sort_cases(run, s.feed.batches()[batch_index], ctx, launch, unhealthy,
                              observer, s);
  if (!launch.command) info.available = launch.why_not;

  if (!cases.planned.empty()) {
    s.journal.append({{"event", "run"},
                      {"target", run.target},
                      {"probe", to_string(run.probe)},
                      {"variant", ctx.variant},
                      {"mode", to_string(run.mode)},
                      {"batch", batch_index},
                      {"cases", cases.planned.size()}});
    WorkerRunner& runner = s.options.runner ? *s.options.runner : process_runner();
    const isolate::WorkerRunReport report = runner.run(
        *launch.command, cases.planned, runner_options(ctx, s.options, s.inventory), &observer);
    apply_outcomes(report, ctx, cases);
    if (out.write_error.empty()) out.write_error = report.write_error;
    if (std::string why = unstartable_reason(report, ctx, cases); !why.empty() &&
        out.unstartable.try_emplace(run.probe, why).second)
      s.journal.append({{"event", "finding"}, {"finding", to_json(unstartable_finding(run.probe, why))}});
    if (std::string why = plugin_unusable_reason(report, ctx, cases);
        !why.empty() && out.plugin_unusable.empty()) {
      out.plugin_unusable = why;
      s.journal.append({{"event", "finding"}, {"finding", to_json(plugin_unusable_finding(why))}});
    }
    if (report.hello && info.versions.empty()) {
      protocol::Hello hello = protocol::read_hello(*report.hello);
      info.versions = std::move(hello.versions);
      info.facts = std::move(hello.facts);
    }
    info.restarts += report.restarts;
    if (report.device_unhealthy || report.device_wedged) {
      std::string culprit;
      for (const auto& o : report.outcomes)
        if (o.status == Status::crash || o.status == Status::timeout) culprit = o.case_id;
      unhealthy = {fmt::format("device unhealthy after {} {}", ctx.variant, culprit),
                   report.device_wedged ? SkipCause::device_wedged : SkipCause::device_unhealthy,
                   culprit.empty() ? std::nullopt
                                   : std::optional<Culprit>(Culprit{ctx.variant, culprit})};
      out.findings.push_back(unhealthy_device_finding(report, run.target, culprit));
      s.journal.append({{"event", "finding"}, {"finding", to_json(out.findings.back())}});
    }
  }
  for (size_t i = 0; i < cases.results.size(); ++i)
    if (cases.new_result[i]) observer.on_result(cases.results[i]);
  if (!cases.planned.empty() || !launch.command)
    s.journal.append({{"event", "worker"}, {"worker", to_json(info)}});
  std::move(cases.results.begin(), cases.results.end(), std::back_inserter(out.results));
}

// The runs of `target` in the order they start: the Python probe's last, so that its start-up
// server imports torch (and warms Dynamo) while the C++ workers run; each probe's in plan order.
// The results are sorted back into plan order.
std::vector<size_t> start_order(const Plan& plan, const std::string& target) {
  std::vector<size_t> order;
  for (size_t i = 0; i < plan.runs.size(); ++i)
    if (plan.runs[i].target == target) order.push_back(i);
  std::stable_partition(order.begin(), order.end(),
                        [&](size_t i) { return plan.runs[i].probe != Probe::python; });
  return order;
}

// Batch by batch, as the oracle feed delivers them: every run of the target over one batch, then
// the next; the feed may drop a batch's oracle files once every target is past it.
TargetOutput run_target(const std::string& target, SharedState& s) {
  TargetOutput out;
  Skip unhealthy;
  const std::vector<size_t> order = start_order(s.plan, target);
  for (size_t b = 0; b < s.feed.batches().size(); ++b) {
    s.feed.wait_ready(b);
    for (size_t i : order) run_one(i, b, s, unhealthy, out);
    s.feed.finished(b);
  }
  return out;
}

// The plan less the cases every run of which `finished` already holds.
Plan unfinished_part(const Plan& plan, const std::map<std::string, const CaseResult*>& finished) {
  Plan todo = plan;
  std::erase_if(todo.cases, [&](const Case& c) {
    return std::all_of(plan.runs.begin(), plan.runs.end(), [&](const PlannedRun& r) {
      return !r.takes(c) || finished.count(cell_key(r.target, r.probe, r.variant.name(), r.mode,
                                                    c.id())) != 0;
    });
  });
  return todo;
}

} // namespace

WorkerRunner& process_runner() {
  class ProcessRunner final : public WorkerRunner {
  public:
    isolate::WorkerRunReport run(const isolate::WorkerCommand& command,
                                 const std::vector<isolate::PlannedCase>& cases,
                                 const isolate::RunnerOptions& options,
                                 isolate::RunObserver* observer) override {
      return isolate::run_worker(command, cases, options, observer);
    }
  };
  static ProcessRunner runner;
  return runner;
}

ExecuteResult execute_plan(const Plan& whole_plan, const DeviceInventory& inventory,
                           const ExecuteOptions& options) {
  ExecuteResult result;
  result.journal_path = (fs::path(options.run_dir) / "journal.jsonl").string();
  result.journal = std::make_shared<Journal>(result.journal_path, options.journal_redactions,
                                             options.append_journal);
  Journal& journal = *result.journal;
  journal.append({{"event", "start"},
                  {"cases", whole_plan.cases.size()},
                  {"runs", whole_plan.runs.size()},
                  {"plan", to_json(whole_plan)},
                  {"header", options.journal_header}});
  std::set<std::string> cells_planned;
  for (const PlannedRun& r : whole_plan.runs)
    for (const Case& c : whole_plan.cases)
      if (r.takes(c)) cells_planned.insert(cell_key(r.target, r.probe, r.variant.name(), r.mode, c.id()));
  std::map<std::string, const CaseResult*> finished; // of this plan's cells only
  for (const CaseResult& r : options.finished)
    if (cells_planned.count(cell_key(r))) finished.try_emplace(cell_key(r), &r);
  const Plan plan = unfinished_part(whole_plan, finished);
  if ((options.python_unusable || options.python.empty()) &&
      std::any_of(plan.runs.begin(), plan.runs.end(),
                  [](const PlannedRun& r) { return r.probe == Probe::python; })) {
    result.findings.push_back(python_unusable_finding(options.python_reason));
    journal.append({{"event", "finding"}, {"finding", to_json(result.findings.back())}});
  }

  const auto probes_start = Clock::now();
  std::set<std::string> ids_to_run;
  for (const Case& c : plan.cases) ids_to_run.insert(c.id());
  size_t cells = 0;
  for (const PlannedRun& r : plan.runs)
    cells += size_t(std::count_if(plan.cases.begin(), plan.cases.end(),
                                  [&](const Case& c) { return r.takes(c); }));
  for (const auto& [key, r] : finished) // measured before, inside what runs now
    if (ids_to_run.count(r->case_id)) --cells;
  Progress progress(options.progress, cells, options.progress_interval);
  OracleFeed::Options fo;
  fo.dir = (fs::path(options.run_dir) / "oracle").string();
  fo.consumers = plan.targets.size();
  fo.host_budget = host_memory_budget();
  fo.interrupted = options.interrupted;
  fo.on_progress = [&progress](size_t done, size_t total) { progress.oracle(done, total); };
  fo.cache_dir = options.oracle_cache_dir;
  fo.cache_bytes = options.oracle_cache_bytes;
  fo.cache_lock_timeout = options.cache_lock_timeout;
  fo.on_lock_wait = [](const std::string& line) { spdlog::warn("{}", line); };
  std::vector<TargetOutput> outputs(plan.targets.size());
  {
    // The oracle of the next batches is computed while the targets run this one.
    OracleFeed feed(plan.cases, oracle_batches(plan.cases), fo);
    // The caller's, or one of its own that is killed when the runs end.
    const ProbeServer server = probe_server_for(plan, options);
    const ProbeServer torch_server = torch_server_for(plan, options);
    for (const auto& [probe, started] :
         {std::pair{Probe::python, &server}, std::pair{Probe::torch, &torch_server}})
      if (started->service)
        journal.append({{"event", "probe-server"}, {"probe", to_string(probe)},
                        {"pid", started->service->pid()}, {"socket", started->socket}});
    SharedState shared{plan, inventory, options, feed, journal, progress, server, torch_server,
                       finished};
    // One thread per target: GPUs run beside each other, each strictly one worker at a time.
    std::vector<std::thread> threads;
    for (size_t i = 0; i < plan.targets.size(); ++i)
      threads.emplace_back([&, i] { outputs[i] = run_target(plan.targets[i], shared); });
    for (auto& t : threads) t.join();
    result.oracle_ms = feed.busy_ms();
    result.oracle_cache_hits = feed.cache_hits();
    if (!options.oracle_cache_dir.empty())
      journal.append({{"event", "oracle-cache"}, {"dir", options.oracle_cache_dir},
                      {"hits", feed.cache_hits()}, {"stores", feed.cache_stores()}});
  }
  progress.clear();
  result.probes_ms = ms_since(probes_start);

  std::map<Probe, std::string> unstartable;
  for (const auto& o : outputs) unstartable.insert(o.unstartable.begin(), o.unstartable.end());
  for (const auto& [probe, why] : unstartable)
    result.findings.push_back(unstartable_finding(probe, why));
  std::set<std::string> plugin_unusable; // one finding, however many targets saw it
  for (const auto& o : outputs)
    if (!o.plugin_unusable.empty() && plugin_unusable.insert(o.plugin_unusable).second)
      result.findings.push_back(plugin_unusable_finding(o.plugin_unusable));
  for (auto& o : outputs) {
    if (result.write_error.empty()) result.write_error = o.write_error;
    std::move(o.results.begin(), o.results.end(), std::back_inserter(result.results));
    for (auto& [index, info] : o.workers) result.workers.push_back(std::move(info));
    std::move(o.findings.begin(), o.findings.end(), std::back_inserter(result.findings));
  }
  // The cells of cases measured before in full, as they were.
  for (const auto& [key, r] : finished)
    if (!ids_to_run.count(r->case_id)) result.results.push_back(*r);
  sort_by_plan(whole_plan, result.results);
  if (result.write_error.empty()) result.write_error = journal.failure();
  if (!result.write_error.empty()) {
    result.findings.push_back(unwritable_run_dir_finding(result.write_error));
    journal.append({{"event", "finding"}, {"finding", to_json(result.findings.back())}});
  }
  journal.append({{"event", "end"}, {"results", result.results.size()}});
  if (result.write_error.empty()) result.write_error = journal.failure();
  return result;
}

} // namespace sdpa_doctor::run
