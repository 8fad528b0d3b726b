#include "cli/check_run.hpp"

#include "core/paths.hpp"
#include "isolate/isolate.hpp"
#include "probes/probes.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <unistd.h>

namespace sdpa_doctor::cli {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Bytes the host can give a case: half of what the kernel says is available, so that the
// doctor, the worker and the oracle copies fit beside each other.
int64_t host_memory_budget() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024 / 2;
  return int64_t{4} << 30;
}

// Every outcome is appended (and flushed by write(2)) the moment it is known, so that a doctor
// killed with SIGKILL still leaves what it learned.
class Journal {
public:
  explicit Journal(const std::string& path) {
    m_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (m_fd < 0) spdlog::warn("cannot open the journal {}: {}", path, std::strerror(errno));
  }
  ~Journal() {
    if (m_fd >= 0) ::close(m_fd);
  }
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  void append(nlohmann::json event) {
    if (m_fd < 0) return;
    event["v"] = 1;
    event["t_ms"] = ms_since(m_start); // lets a reader time spawn, import and each case
    std::string line = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    line += '\n';
    std::lock_guard lock(m_mutex);
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
      ssize_t n = ::write(m_fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      p += n;
      left -= size_t(n);
    }
  }

private:
  int m_fd = -1;
  std::mutex m_mutex;
  Clock::time_point m_start = Clock::now();
};

// The live progress line (stderr, terminals only): target, variant, case i/N, elapsed.
class Progress {
public:
  Progress(bool enabled, size_t total) : m_enabled(enabled), m_total(total) {}
  void update(const std::string& where, const std::string& case_id, bool finished) {
    if (!m_enabled) return;
    std::lock_guard lock(m_mutex);
    if (finished) ++m_done;
    const double s = ms_since(m_start) / 1000;
    std::string line = fmt::format("[{:>5.1f}s] {}/{} {} {}", s, m_done, m_total, where, case_id);
    if (line.size() > 99) line.resize(99);
    fmt::print(stderr, "\r\033[K{}", line);
    std::fflush(stderr);
  }
  void clear() {
    if (!m_enabled) return;
    std::lock_guard lock(m_mutex);
    fmt::print(stderr, "\r\033[K");
    std::fflush(stderr);
  }

private:
  bool m_enabled;
  size_t m_total;
  size_t m_done = 0;
  Clock::time_point m_start = Clock::now();
  std::mutex m_mutex;
};

struct RunContext {
  std::string target;
  Probe probe;
  std::string variant;
};

class RunJournal : public isolate::RunObserver {
public:
  RunJournal(Journal& journal, Progress& progress, RunContext context)
      : m_journal(journal), m_progress(progress), m_context(std::move(context)),
        m_where(fmt::format("{} {}/{}", m_context.target, to_string(m_context.probe),
                            m_context.variant)) {}
  void on_begin(const std::string& case_id) override {
    m_journal.append(base("begin", case_id));
    m_progress.update(m_where, case_id, false);
  }
  void on_outcome(const isolate::CaseOutcome& outcome) override {
    nlohmann::json e = base("outcome", outcome.case_id);
    e["status"] = to_string(outcome.status);
    e["reason"] = outcome.reason;
    e["attempt"] = outcome.attempt;
    e["elapsed_ms"] = outcome.elapsed_ms;
    if (outcome.result) e["result"] = *outcome.result;
    if (!outcome.signatures.empty()) e["signatures"] = outcome.signatures;
    if (outcome.process_end) e["process_end"] = isolate::describe(*outcome.process_end);
    m_journal.append(std::move(e));
    m_progress.update(m_where, outcome.case_id, true);
  }
  // A case decided before any worker ran it (skipped, or its probe is unavailable).
  void on_unrun(const CaseResult& r) {
    nlohmann::json e = base("outcome", r.case_id);
    e["status"] = to_string(r.status);
    e["reason"] = r.reason;
    m_journal.append(std::move(e));
    m_progress.update(m_where, r.case_id, true);
  }

private:
  nlohmann::json base(const char* event, const std::string& case_id) const {
    return {{"event", event},
            {"target", m_context.target},
            {"probe", to_string(m_context.probe)},
            {"variant", m_context.variant},
            {"case", case_id}};
  }
  Journal& m_journal;
  Progress& m_progress;
  RunContext m_context;
  std::string m_where;
};

std::optional<double> number_or_null(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::string scalar_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_null()) return "";
  return value.dump();
}

std::map<std::string, std::string> string_map(const nlohmann::json& hello, const char* key) {
  std::map<std::string, std::string> out;
  auto it = hello.find(key);
  if (it == hello.end() || !it->is_object()) return out;
  for (const auto& [k, v] : it->items())
    if (auto text = scalar_text(v); !text.empty()) out[k] = text;
  return out;
}

// Folds what the worker reported (when it reported anything) into the result.
void apply_worker_result(const nlohmann::json& r, CaseResult& out) {
  if (auto it = r.find("metrics"); it != r.end() && it->is_object()) {
    const auto& m = *it;
    out.metrics.max_abs_err = number_or_null(m, "max_abs_err");
    out.metrics.rel_l2_err = number_or_null(m, "rel_l2_err");
    out.metrics.frac_outside_tol = number_or_null(m, "frac_outside_tol");
    out.metrics.nan_count = int64_t(number_or_null(m, "nan_count").value_or(0));
    out.metrics.inf_count = int64_t(number_or_null(m, "inf_count").value_or(0));
    out.metrics.time_ms = number_or_null(m, "time_ms");
    out.metrics.time_min_ms = number_or_null(m, "time_min_ms");
    out.metrics.timed_runs = int(number_or_null(m, "timed_runs").value_or(0));
  }
  if (auto it = r.find("tolerance"); it != r.end() && it->is_object()) {
    out.tolerance.atol = number_or_null(*it, "atol").value_or(out.tolerance.atol);
    out.tolerance.rtol = number_or_null(*it, "rtol").value_or(out.tolerance.rtol);
  }
  if (auto it = r.find("backend_chosen"); it != r.end() && it->is_string())
    out.backend_chosen = it->get<std::string>();
  if (auto it = r.find("warnings"); it != r.end() && it->is_array())
    for (const auto& w : *it)
      if (w.is_string()) out.warnings.push_back(w.get<std::string>());
  if (out.metrics.time_ms && *out.metrics.time_ms > 0)
    out.metrics.tflops = out.kase.flops() / (*out.metrics.time_ms * 1e-3) / 1e12;
}

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

struct WorkerLaunch {
  std::optional<isolate::Command> command;
  std::string why_not; // set when command is empty
};

WorkerLaunch worker_launch(const PlannedRun& run, const ExecuteOptions& options) {
  WorkerLaunch launch;
  std::vector<std::string> argv;
  switch (run.probe) {
  case Probe::torch: {
    auto exe = find_worker("sdpa-doctor-torch-worker");
    if (!exe) {
      launch.why_not = "the libtorch worker is not built in (LibTorch was not found at build time)";
      return launch;
    }
    argv = {exe->string()};
    break;
  }
  case Probe::reference: {
    auto exe = find_worker("sdpa-doctor-ref-worker");
    if (!exe) {
      launch.why_not = "the reference worker sdpa-doctor-ref-worker is missing beside the doctor";
      return launch;
    }
    argv = {exe->string()};
    break;
  }
  case Probe::python: {
    if (options.python.empty()) {
      launch.why_not = options.python_reason;
      return launch;
    }
    auto data = data_dir();
    if (!data || !fs::exists(*data / "sdpa_probe.py")) {
      launch.why_not = "sdpa_probe.py is missing from the doctor's data directory";
      return launch;
    }
    argv = {options.python, (*data / "sdpa_probe.py").string()};
    break;
  }
  case Probe::fault: launch.why_not = "not a probe"; return launch;
  }
  argv.insert(argv.end(), {"--device", run.target, "--variant", run.variant.name()});
  isolate::Command cmd;
  cmd.argv = std::move(argv);
  cmd.env = run.variant.environment();
  launch.command = std::move(cmd);
  return launch;
}

std::optional<isolate::Command> health_check_for(const std::string& target) {
  if (!probes::is_gpu_target(target)) return std::nullopt;
  auto exe = find_worker("sdpa-doctor-ref-worker");
  if (!exe) return std::nullopt;
  isolate::Command cmd;
  cmd.argv = {exe->string(), "--health-check", "--device", target};
  return cmd;
}

int64_t device_memory_budget(const std::string& target, const DeviceInventory& inventory) {
  if (!probes::is_gpu_target(target)) return host_memory_budget();
  const int index = std::stoi(target.substr(5));
  for (const Device& d : inventory.devices)
    if (d.index == index && d.vram_total_bytes) return *d.vram_total_bytes;
  return int64_t{1} << 40; // unknown: let the backend answer for itself
}

std::string safe_name(std::string text) {
  for (char& ch : text)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_') ch = '_';
  return text;
}

bool uses_math_scores(const Variant& v) {
  return v.backend == "math" || v.backend == "default" || v.backend == "ref-math";
}

// What one target's thread produces.
struct TargetOutput {
  std::vector<CaseResult> results;
  std::vector<WorkerInfo> workers;
  std::vector<Finding> findings;
};

struct SharedState {
  const Plan& plan;
  const DeviceInventory& inventory;
  const ExecuteOptions& options;
  const std::map<std::string, std::string>& oracle_paths;  // case id -> file
  const std::map<std::string, std::string>& host_skips;    // case id -> reason
  Journal& journal;
  Progress& progress;
};

TargetOutput run_target(const std::string& target, SharedState& s) {
  TargetOutput out;
  std::string unhealthy_reason;
  const bool gpu = probes::is_gpu_target(target);
  const int64_t budget = device_memory_budget(target, s.inventory);
  for (const PlannedRun& run : s.plan.runs) {
    if (run.target != target) continue;
    const RunContext ctx{target, run.probe, run.variant.name()};
    WorkerInfo info;
    info.device = target;
    info.probe = run.probe;
    info.variant = ctx.variant;

    const WorkerLaunch launch = worker_launch(run, s.options);
    RunJournal observer(s.journal, s.progress, ctx);
    std::vector<isolate::PlannedCase> planned;
    std::vector<size_t> planned_index; // into `results` below
    std::vector<CaseResult> results;
    for (const Case& c : s.plan.cases) {
      const Tolerance tol = s.options.tolerances.for_dtype(c.dtype);
      CaseResult r = make_result(c, ctx, tol);
      std::string skip;
      if (s.options.interrupted && s.options.interrupted->load()) skip = "interrupted";
      else if (!unhealthy_reason.empty()) skip = unhealthy_reason;
      else if (auto it = s.host_skips.find(r.case_id); it != s.host_skips.end()) skip = it->second;
      else skip = probes::memory_guard(c, budget, uses_math_scores(run.variant));
      if (!skip.empty()) {
        r.status = Status::skipped;
        r.reason = skip;
        observer.on_unrun(r);
      } else if (!launch.command) {
        r.status = Status::unsupported;
        r.reason = launch.why_not;
        observer.on_unrun(r);
      } else {
        auto oracle = s.oracle_paths.find(r.case_id);
        const bool have_oracle = oracle != s.oracle_paths.end();
        isolate::PlannedCase p;
        p.id = r.case_id;
        p.line = probes::make_case_line(c, tol, have_oracle ? oracle->second : std::string(),
                                        s.options.warmup, s.options.repeat);
        p.deadline = s.options.case_timeout.value_or(probes::default_case_deadline(
            c, gpu, s.options.warmup + s.options.repeat, !have_oracle));
        planned.push_back(std::move(p));
        planned_index.push_back(results.size());
      }
      results.push_back(std::move(r));
    }
    if (!launch.command) info.available = launch.why_not;

    if (!planned.empty()) {
      isolate::RunnerOptions ro;
      ro.run_dir = s.options.run_dir;
      ro.name = safe_name(fmt::format("{}-{}-{}", target, to_string(run.probe), ctx.variant));
      ro.worker_deadline = s.options.worker_timeout;
      ro.startup_deadline = s.options.startup_timeout;
      ro.max_restarts = s.options.max_worker_restarts;
      ro.keep_core_dumps = s.options.keep_core_dumps;
      ro.interrupted = s.options.interrupted;
      ro.health_check = health_check_for(target);
      s.journal.append({{"event", "run"},
                        {"target", target},
                        {"probe", to_string(run.probe)},
                        {"variant", ctx.variant},
                        {"cases", planned.size()}});
      isolate::WorkerRunReport report =
          isolate::run_worker(*launch.command, planned, ro, &observer);
      for (size_t i = 0; i < report.outcomes.size() && i < planned_index.size(); ++i) {
        const isolate::CaseOutcome& o = report.outcomes[i];
        CaseResult& r = results[planned_index[i]];
        r.status = o.status;
        r.reason = o.reason;
        r.process_end = o.process_end;
        r.signatures = o.signatures;
        r.stderr_tail = o.stderr_tail;
        r.attempt = o.attempt;
        if (o.result) apply_worker_result(*o.result, r);
      }
      if (report.hello) {
        info.versions = string_map(*report.hello, "versions");
        info.facts = string_map(*report.hello, "facts");
      }
      info.restarts = report.restarts;
      if (report.device_unhealthy || report.device_wedged) {
        std::string culprit;
        for (const auto& o : report.outcomes)
          if (o.status == Status::crash || o.status == Status::timeout) culprit = o.case_id;
        unhealthy_reason = fmt::format("device unhealthy after {} {}", ctx.variant, culprit);
        Finding f;
        f.id = report.device_wedged ? "device-wedged" : "device-unhealthy";
        f.severity = Severity::problem;
        f.device = target;
        f.message = report.device_wedged
                        ? fmt::format("{}: a worker could not be killed after {} (stuck in the "
                                      "driver); the remaining cases were skipped",
                                      target, culprit)
                        : fmt::format("{}: the device failed its health check after {}; the "
                                      "remaining cases were skipped",
                                      target, culprit);
        f.remedy = "reset the GPU (amd-smi reset / rocm-smi --gpureset -d N) or reboot, then run "
                   "the doctor again";
        f.case_ids = {culprit};
        out.findings.push_back(std::move(f));
      }
    }
    out.workers.push_back(std::move(info));
    std::move(results.begin(), results.end(), std::back_inserter(out.results));
  }
  return out;
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

  // The oracle: once per case, shared by every variant through a file.
  const auto oracle_start = Clock::now();
  std::map<std::string, std::string> oracle_paths;
  std::map<std::string, std::string> host_skips;
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

} // namespace sdpa_doctor::cli
