#include "advice/advice.hpp"
#include "cli/case_plan.hpp"
#include "cli/check.hpp"
#include "cli/commands.hpp"
#include "core/build_info.hpp"
#include "core/io.hpp"
#include "core/text.hpp"
#include "core/paths.hpp"
#include "devices/devices.hpp"
#include "core/model_json.hpp"
#include "isolate/isolate.hpp"
#include "probes/probes.hpp"
#include "protocol/protocol.hpp"
#include "report/report.hpp"
#include "run/run.hpp"
#include "run/shrink.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <fcntl.h>
#include <unistd.h>

namespace sdpa_doctor::cli {

namespace fs = std::filesystem;

namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signal{0};

extern "C" void on_interrupt(int sig) {
  g_signal.store(sig);
  g_interrupted.store(true);
}

// Installs SIGINT/SIGTERM handlers for the run and restores the old ones after.
class InterruptGuard {
public:
  InterruptGuard() {
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &m_old_int);
    sigaction(SIGTERM, &sa, &m_old_term);
  }
  ~InterruptGuard() {
    sigaction(SIGINT, &m_old_int, nullptr);
    sigaction(SIGTERM, &m_old_term, nullptr);
  }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

private:
  struct sigaction m_old_int {};
  struct sigaction m_old_term {};
};

std::vector<Probe> planned_probes(const CheckOptions& o) {
  std::vector<Probe> out;
  for (const auto& name : split_list(o.probes)) {
    auto p = probe_from_string(name);
    if (!p || *p == Probe::fault)
      throw Fatal{fmt::format("unknown probe '{}' (libtorch, python, reference)", name)};
    out.push_back(*p);
  }
  // Both asked for: whichever wins, a plan the user did not mean would run (or nothing at all).
  if (o.no_python && std::find(out.begin(), out.end(), Probe::python) != out.end())
    throw Fatal{"--no-python contradicts --probe python: leave one out"};
  if (out.empty()) out = {Probe::torch, Probe::python, Probe::reference};
  if (o.no_python) std::erase(out, Probe::python);
  return out;
}

void check_writable(const std::string& path, const char* flag) {
  if (path.empty() || path == "-") return;
  fs::path p(path);
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (fs::is_directory(p, ec))
    throw Fatal{fmt::format("{} {}: is a directory", flag, path)};
  // A device or FIFO is written in place (never replaced by a rename): it must open for writing.
  if (const auto type = fs::status(p, ec).type();
      !ec && type != fs::file_type::regular && type != fs::file_type::not_found) {
    if (type == fs::file_type::fifo) return; // opening it would wait for its reader
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
      throw Fatal{fmt::format("{} {}: cannot open it for writing: {}", flag, path,
                              std::strerror(errno))};
    ::close(fd);
    return;
  }
  if (!fs::is_directory(dir, ec))
    throw Fatal{fmt::format("{} {}: directory '{}' does not exist", flag, path, dir.string())};
  // The report is written as a temporary file beside it, then renamed: try exactly that now.
  // access(W_OK) is not enough: root passes it for /proc and read-only mounts.
  std::string probe = (dir / ".sdpa-doctor-write-test-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0)
    throw Fatal{fmt::format("{} {}: directory '{}' is not writable: {}", flag, path, dir.string(),
                            std::strerror(errno))};
  ::close(fd);
  ::unlink(probe.c_str());
}

std::vector<advice::KnownIssues> load_issue_files(const CheckOptions& o) {
  std::vector<advice::KnownIssues> files;
  if (auto data = data_dir()) {
    auto shipped = advice::load_known_issues((*data / "known_issues.json").string());
    if (!shipped) throw Fatal{shipped.error().message, exit_code::internal};
    files.push_back(std::move(*shipped));
  } else {
    spdlog::warn("the doctor's data directory was not found: shipped known issues not loaded");
  }
  for (const auto& f : o.known_issue_files) {
    auto extra = advice::load_known_issues(f);
    if (!extra) throw Fatal{extra.error().message};
    files.push_back(std::move(*extra));
  }
  return files;
}

// Writes every report asked for, even after one failed: the others still carry the diagnosis.
// Each failure is one line on stderr; any failure makes the exit code 4.
int write_reports(const Report& report, const GlobalOptions& global) {
  struct Output {
    const std::string& path;
    std::string (*render)(const Report&);
  };
  const Output outputs[] = {{global.json_path, report::render_json},
                            {global.markdown_path, report::render_markdown},
                            {global.junit_path, report::render_junit}};
  int failed = 0;
  for (const auto& out : outputs) {
    if (out.path.empty()) continue;
    if (auto written = report::write_atomically(out.path, out.render(report)); !written) {
      fmt::print(stderr, "sdpa-doctor: error: {}\n", escape_to_one_line(written.error().message));
      ++failed;
    }
  }
  return failed ? exit_code::internal : report.exit_code;
}

// Everything a check needs from its flags, each checked before anything runs: a bad flag costs
// nothing.
struct CheckInputs {
  std::vector<Case> cases;
  std::vector<Probe> probes;
  probes::TolerancePolicy tolerances;
  AdviceInputs advice;
  std::vector<std::string> variant_filter;
  std::vector<std::string> targets;
  std::optional<probes::ModelShapes> model; // --model
  std::string suite;                        // the report's: probes::PlannedCases::label
};

// `--model`, checked; nullopt without it.
std::optional<probes::ModelShapes> checked_model(const CheckOptions& o) {
  if (o.train)
    throw Fatal{"--train: backward cases are not supported yet (the workers run the forward pass "
                "only)"};
  return loaded_model(o.model_config);
}

std::vector<std::string> checked_variant_filter(const CheckOptions& o) {
  std::vector<std::string> filter = split_list(o.variants);
  for (const auto& v : filter)
    if (!parse_variant(v)) throw Fatal{parse_variant(v).error().message};
  // A misspelt variant must not select nothing and pass.
  if (auto unknown = run::unknown_variants(filter); !unknown.empty())
    throw Fatal{fmt::format("unknown variant '{}' (known: {})", unknown.front(),
                            fmt::join(run::known_variant_names(), ", "))};
  return filter;
}

// The `--target` case, else the longest prompt of `--model`; nullopt with neither.
std::optional<Case> advice_target(const CheckOptions& o,
                                  const std::optional<probes::ModelShapes>& model) {
  if (!o.target.empty()) {
    auto t = parse_case_spec(o.target);
    if (!t) throw Fatal{"--target: " + t.error().message};
    return *t;
  }
  if (model) return probes::model_target_case(*model);
  return std::nullopt;
}

CheckInputs checked_inputs(const CheckOptions& o, const GlobalOptions& global) {
  std::optional<probes::ModelShapes> model = checked_model(o);
  probes::PlannedCases planned = planned_cases(
      {o.suite, o.case_specs, o.case_file, model, o.max_len, listed_dtypes(o.dtypes)});
  CheckInputs in{std::move(planned.cases), planned_probes(o), {}, {}, {}, {}, model,
                 std::move(planned.label)};
  auto tolerances = probes::parse_tolerance_overrides(o.tolerance);
  if (!tolerances) throw Fatal{tolerances.error().message};
  in.tolerances = *tolerances;
  in.advice = advice_inputs(o, advice_target(o, model));
  in.variant_filter = checked_variant_filter(o);
  in.targets = split_list(o.devices);
  for (const auto& t : in.targets)
    if (!probes::is_valid_target(t))
      throw Fatal{fmt::format("--device '{}': expected cpu or cuda:N", t)};
  if (o.repeat < 1 || o.repeat > protocol::k_max_repeat || o.warmup < 1)
    throw Fatal{"--repeat must be in 1..1000 and --warmup at least 1"};
  if (auto b = run::parse_shrink_budget(o.shrink_budget); !b) throw Fatal{b.error().message};
  check_writable(global.json_path, "--json");
  check_writable(global.markdown_path, "--markdown");
  check_writable(global.junit_path, "--junit");
  // The journal is the run's record (and what --resume and `report` read): never a report's path.
  if (!o.run_dir.empty())
    refuse_output_over(global, (fs::path(o.run_dir) / "journal.jsonl").string(),
                       "the run's journal");
  if (o.sysfs_root != "/" && !fs::is_directory(o.sysfs_root))
    throw Fatal{fmt::format("--sysfs-root {}: not a directory", o.sysfs_root)};
  return in;
}

// The report's header facts and the device inventory, asked where `python`'s torch keeps its own
// HIP runtime first.
Report started_report(const CheckOptions& o, const CheckInputs& in,
                      const run::PythonChoice& python) {
  Report report;
  report.tool_version = build_info::k_version;
  report.git_revision = build_info::k_git_revision;
  report.started_at = utc_now();
  report.host = devices::host_facts();
  report.environment = report::reportable_environment(devices::process_environment());
  report.suite = in.suite;
  if (in.model) report.model = in.model->describe();

  const auto enum_start = std::chrono::steady_clock::now();
  devices::EnumerateOptions eo;
  eo.sysfs_root = o.sysfs_root;
  if (o.sysfs_root != "/") eo.dev_root.clear();
  eo.torch_lib_dirs = python.torch_lib_dirs;
  report.inventory = devices::enumerate_devices(eo);
  report.timings.enumerate_ms = ms_since(enum_start);
  for (const auto& [k, v] : report.inventory.runtime) report.versions[k] = v;
  return report;
}

// The run's directory (journal, oracles, logs): the one named, or a new temporary one.
std::string checked_run_dir(const CheckOptions& o) {
  auto run_dir = run::make_run_dir(o.run_dir);
  // A directory the user named is an input error; the system's temp directory is ours.
  if (!run_dir)
    throw Fatal{run_dir.error().message,
                o.run_dir.empty() ? exit_code::internal : exit_code::usage};
  return *run_dir;
}

} // namespace

run::RunDirLock locked_run_dir(const std::string& dir, bool named) {
  run::RunDirClaim claim = run::claim_run_dir(dir);
  if (claim.lock) return std::move(*claim.lock);
  using Refusal = run::RunDirClaim::Refusal;
  // Another run, or a directory the user named that cannot be written: their input (2). A full
  // disk, or a temporary directory of our choosing: the doctor's failure (4).
  const bool usage = claim.refusal == Refusal::in_use ||
                     (claim.refusal == Refusal::not_writable && named);
  throw Fatal{claim.problem, usage ? exit_code::usage : exit_code::internal};
}

namespace {

// What the interpreter gets to find and import torch: the time a worker gets to start.
std::chrono::milliseconds preflight_deadline(const CheckOptions& o) {
  const auto startup = std::chrono::milliseconds(int64_t(o.startup_timeout_s * 1000));
  const auto worker = std::chrono::milliseconds(int64_t(o.worker_timeout_s * 1000));
  return worker.count() > 0 ? std::min(startup, worker) : startup;
}

// The python probe's interpreter, found (not imported) before the devices are enumerated. A bad
// --python is an input error only where the python probe runs.
run::PythonChoice located_python(const CheckOptions& o, const CheckInputs& in) {
  const bool probe = !o.no_python && std::find(in.probes.begin(), in.probes.end(), Probe::python) !=
                                         in.probes.end();
  auto located = run::locate_python(o.python, preflight_deadline(o));
  if (!located && probe) throw Fatal{located.error().message};
  return located ? *located : run::PythonChoice{};
}

// Everything but the run directory. The python probe's interpreter is pre-flighted here (its
// pre-flight imports torch once); the GPUs that torch sees join `inventory`, so a device only
// torch can reach (another vendor's, or one whose ROCm only the wheel carries) is a target too.
run::ExecuteOptions execute_options(const CheckOptions& o, const GlobalOptions& global,
                                    const CheckInputs& in, const run::PythonChoice& located,
                                    DeviceInventory& inventory) {
  run::ExecuteOptions exec;
  exec.tolerances = in.tolerances;
  if (o.case_timeout_s > 0)
    exec.case_timeout = std::chrono::milliseconds(int64_t(o.case_timeout_s * 1000));
  exec.worker_timeout = std::chrono::milliseconds(int64_t(o.worker_timeout_s * 1000));
  exec.startup_timeout = std::chrono::milliseconds(int64_t(o.startup_timeout_s * 1000));
  exec.max_worker_restarts = o.max_worker_restarts;
  exec.keep_core_dumps = o.keep_core_dumps;
  exec.warmup = o.warmup;
  exec.repeat = o.repeat;
  exec.call_budget = std::chrono::milliseconds(int64_t(std::ceil(o.time_budget_s * 1000)));
  exec.probe_server = !o.no_probe_server;
  if (!o.no_oracle_cache)
    exec.oracle_cache_dir = o.oracle_cache.empty() ? run::default_oracle_cache_dir() : o.oracle_cache;
  exec.oracle_cache_bytes = int64_t(o.oracle_cache_gib * double(int64_t{1} << 30));
  exec.progress = global.quiet                 ? run::ProgressMode::none
                  : ::isatty(STDERR_FILENO) != 0 ? run::ProgressMode::terminal
                                                 : run::ProgressMode::log;
  exec.progress_interval = std::chrono::milliseconds(int64_t(o.progress_every_s * 1000));
  exec.interrupted = &g_interrupted;
  if (!o.no_python && std::find(in.probes.begin(), in.probes.end(), Probe::python) != in.probes.end()) {
    const auto python = run::preflight_python(located, preflight_deadline(o));
    exec.python = python.path;
    exec.python_reason = python.reason;
    exec.python_unusable = python.unusable;
    exec.torch_lib_dirs = python.torch_lib_dirs;
    devices::add_torch_gpus(inventory, python.gpus, python.path);
    devices::compare_torch_hip_runtime(inventory, python.torch_hip_runtimes, python.path);
    if (!python.gpus_error.empty())
      spdlog::warn("{}: torch could not list its GPUs: {}", python.path, python.gpus_error);
  }
  return exec;
}

// A `--device` the inventory does not have would plan a run in which every cell is
// "unsupported" and the exit code 0: a usage error instead, naming what is there.
void check_devices_exist(const std::vector<std::string>& targets, const DeviceInventory& inventory) {
  std::vector<std::string> here = {"cpu"};
  for (const Device& d : inventory.devices)
    if (d.index >= 0) here.push_back(fmt::format("cuda:{}", d.index));
  for (const std::string& t : targets)
    if (std::find(here.begin(), here.end(), t) == here.end())
      throw Fatal{fmt::format("--device {}: no such device (devices here: {})", t,
                              fmt::join(here, ", "))};
}

// Why `--variant` entry `name` plans no run: a GPU-only variant on CPU targets, or one the
// chosen probes do not have (then their variants are named).
std::string why_not_planned(const std::string& name, const std::vector<Probe>& probes,
                            const std::vector<std::string>& targets) {
  const auto is_name = [&](const Variant& v) { return name == v.name() || name == v.backend; };
  std::vector<std::string> theirs;
  for (Probe probe : probes) {
    const std::vector<Variant> on_gpu = probes::plan_variants(probe, "cuda:0");
    if (std::any_of(on_gpu.begin(), on_gpu.end(), is_name))
      return fmt::format("{} runs on a GPU only: no cuda:N target among {}", name,
                         fmt::join(targets, ", "));
    for (const Variant& v : on_gpu)
      if (std::find(theirs.begin(), theirs.end(), v.name()) == theirs.end())
        theirs.push_back(v.name());
  }
  std::vector<std::string> names;
  for (Probe probe : probes) names.emplace_back(to_string(probe));
  return fmt::format("{} is not a variant of the {} probe{} ({}: {})", name,
                     fmt::join(names, ", "), probes.size() > 1 ? "s" : "",
                     probes.size() > 1 ? "theirs" : "its", fmt::join(theirs, ", "));
}

run::Plan checked_plan(const CheckInputs& in, const DeviceInventory& inventory) {
  check_devices_exist(in.targets, inventory);
  run::Plan plan = run::make_plan({in.cases, in.probes, in.variant_filter, in.targets}, inventory);
  if (plan.runs.empty() && !in.variant_filter.empty())
    throw Fatal{fmt::format("--variant {}: {}", fmt::join(in.variant_filter, ","),
                            why_not_planned(in.variant_filter.front(), in.probes, plan.targets))};
  return plan;
}

// Moves what the workers measured into the report; versions keyed by the probe that saw them.
void take_results(Report& report, run::ExecuteResult& executed) {
  report.results = std::move(executed.results);
  report.workers = std::move(executed.workers);
  report.timings.oracle_ms = executed.oracle_ms;
  report.timings.probes_ms = executed.probes_ms;
  add_worker_versions(report);
}

// What the journal keeps of this check besides its plan: its options (--resume and `report`
// decide as this run does), the advice's target and the report's header.
// Under --redact the header is the redacted report, and says so: a resumed run redacts too.
nlohmann::json journal_header(const CheckOptions& o, const CheckInputs& in, const Report& started,
                              bool redact) {
  const std::string report_json = report::render_json(redact ? report::redact(started) : started);
  nlohmann::json header{{"check_options", o}, {"report", nlohmann::json::parse(report_json)}};
  if (redact) header["redact"] = true;
  if (in.advice.advice.target) header["advice_target"] = to_json(*in.advice.advice.target);
  return header;
}

// The boundary and the smallest case of every failure; nothing runs when nothing failed.
std::vector<Shrink> shrink_step(const CheckOptions& o, const Report& report,
                                const run::ExecuteOptions& exec) {
  auto budget = run::parse_shrink_budget(o.shrink_budget);
  if (!budget) throw Fatal{budget.error().message};
  if (!o.shrink || g_interrupted.load()) return {};
  return run::shrink_failures(report.results, report.inventory, exec, *budget);
}

// Each recommendation re-run in a fresh python worker under exactly its printed flags; one whose
// re-run fails gives way to the next configuration the advice ranked. What they decided goes in
// the journal too, unless an interrupt cut them short.
void verify_step(const CheckOptions& o, Report& report, const AdviceInputs& in,
                 const std::vector<Recommendation>& alternatives, const run::ExecuteOptions& exec,
                 run::ExecuteResult& executed) {
  if (!o.verify || report.interrupted || report.recommendations.empty()) return;
  const auto start = std::chrono::steady_clock::now();
  run::VerifiedAdvice verified = run::verify_recommendations(
      report.recommendations, alternatives, report.results, report.inventory, exec);
  report.timings.verify_ms = ms_since(start);
  const bool interrupted = g_interrupted.load();
  if (!interrupted) run::journal_verified_advice(executed, verified);
  take_verified_advice(report, std::move(verified), in.fail_on);
  if (interrupted) {
    report.interrupted = true;
    report.exit_code = g_signal.load() == SIGTERM ? exit_code::interrupted_term
                                                  : exit_code::interrupted_int;
  }
}

// What a resumed run keeps of the one before: its workers and findings where this run did not
// replace them (a variant measured in full then is not run again, but its facts still count).
void keep_earlier(Report& report, std::vector<Finding>& findings, const run::JournalContents& before) {
  for (const WorkerInfo& w : before.workers) {
    auto now = std::find_if(report.workers.begin(), report.workers.end(), [&](const WorkerInfo& n) {
      return n.device == w.device && n.probe == w.probe && n.variant == w.variant;
    });
    if (now == report.workers.end()) report.workers.push_back(w);
    // Listed but never started this time (all its cells measured before): the earlier facts.
    else if (now->versions.empty() && now->facts.empty() && now->available.empty()) *now = w;
  }
  for (const Finding& f : before.findings)
    if (std::none_of(findings.begin(), findings.end(),
                     [&](const Finding& n) { return n.id == f.id && n.device == f.device; }))
      findings.push_back(f);
}

// parse -> plan -> execute -> advise -> render.
int run_check(const CheckOptions& o, const GlobalOptions& global,
              const run::JournalContents* before = nullptr) {
  const auto start = std::chrono::steady_clock::now();
  const CheckInputs in = checked_inputs(o, global);

  InterruptGuard interrupt_guard;
  // Found, not yet imported: the enumeration looks for its HIP runtime first.
  const run::PythonChoice python = located_python(o, in);
  Report report = started_report(o, in, python);
  run::ExecuteOptions exec = execute_options(o, global, in, python, report.inventory);
  const run::Plan plan = checked_plan(in, report.inventory);
  exec.run_dir = checked_run_dir(o);
  const run::RunDirLock lock = locked_run_dir(exec.run_dir, !o.run_dir.empty());
  // One start-up server for the check's Python workers, its shrinking and the advice's re-runs.
  const bool python_runs = std::any_of(plan.runs.begin(), plan.runs.end(),
                                       [](const run::PlannedRun& r) { return r.probe == Probe::python; });
  if (python_runs) exec.shared_probe_server = run::start_probe_server(exec);
  report.targets = plan.targets;
  exec.journal_header = journal_header(o, in, report, global.redact);
  if (global.redact) exec.journal_redactions = report::redactions(report);
  if (before) { // --resume: the cells that ended are kept, the rest run
    exec.append_journal = true;
    for (const CaseResult& r : before->results)
      if (run::is_measured(r)) exec.finished.push_back(r);
    spdlog::info("resuming {}: {} cells measured before", exec.run_dir, exec.finished.size());
  }
  spdlog::info("run directory {}", exec.run_dir);
  run::ExecuteResult executed = run::execute_plan(plan, report.inventory, exec);
  take_results(report, executed);
  if (before) {
    keep_earlier(report, executed.findings, *before);
    add_worker_versions(report); // what only the earlier workers said
  }
  report.shrinks = shrink_step(o, report, exec);
  if (!report.shrinks.empty()) run::journal_shrinks(executed, report.shrinks);

  const auto report_start = std::chrono::steady_clock::now();
  report.interrupted = g_interrupted.load(); // the advice says what an interrupt left unmeasured
  const std::vector<Recommendation> alternatives = advise_and_decide(
      report, in.advice, std::move(executed.findings), report.interrupted ? g_signal.load() : 0);
  verify_step(o, report, in.advice, alternatives, exec, executed);
  // An interpreter the user named that cannot run the probe is their input, not a backend.
  if (exec.python_unusable && !o.python.empty() && !report.interrupted) {
    fmt::print(stderr, "sdpa-doctor: error: --python: {}\n", escape_to_one_line(exec.python_reason));
    report.exit_code = exit_code::usage;
  }
  // A run directory that could not be written (a full disk) is the doctor's failure, not a
  // backend's: its cells are `skipped`, and this is said once, last.
  const bool disk_failed = !executed.write_error.empty() && !report.interrupted;
  if (disk_failed) report.exit_code = exit_code::internal;
  report.timings.total_ms = ms_since(start);
  report.timings.report_ms = ms_since(report_start) - report.timings.verify_ms;
  const int code = present_and_write(std::move(report), global, executed.journal_path);
  if (!disk_failed) return code;
  fmt::print(stderr, "sdpa-doctor: error: {}; free space there or pick another --run-dir\n",
             escape_to_one_line(executed.write_error));
  return exit_code::internal;
}

// `check --resume RUN-DIR`: the options of the journal's check, its cells that ended kept, the
// rest run. Only output options may come with it: the plan is the journal's.
int resume_check(const std::vector<const CLI::Option*>& plan_options, const std::string& run_dir,
                 const GlobalOptions& global) {
  for (const CLI::Option* opt : plan_options)
    if (opt->count() > 0)
      throw Fatal{fmt::format("--resume takes the check's options from its journal; {} cannot "
                              "come with it",
                              opt->get_name())};
  auto journal = run::read_journal(run_dir);
  if (!journal) throw Fatal{"--resume: " + journal.error().message};
  const auto options = journal->header.find("check_options");
  if (options == journal->header.end())
    throw Fatal{fmt::format("--resume {}: the journal keeps no check options (written by an older "
                            "doctor)", run_dir)};
  CheckOptions o;
  try {
    o = options->get<CheckOptions>();
  } catch (const nlohmann::json::exception& e) {
    throw Fatal{fmt::format("--resume {}: the journal's check options are unreadable", run_dir)};
  }
  o.run_dir = fs::is_directory(run_dir) ? run_dir : fs::path(run_dir).parent_path().string();
  // A run that was redacted stays redacted, in its journal and its reports.
  GlobalOptions resumed = global;
  const auto redact = journal->header.find("redact");
  if (redact != journal->header.end() && redact->is_boolean() && redact->get<bool>())
    resumed.redact = true;
  return run_check(o, resumed, &*journal);
}

// What trades measurement for time, and the caches and servers that save it.
void add_speed_options(CLI::App& sub, CheckOptions& o) {
  sub.add_option("--time-budget", o.time_budget_s,
                 "Seconds a case's runs may take before its warm-ups and repeats stop (one timed "
                 "run always happens; 0 = no limit)")
      ->type_name("SECONDS")
      ->check(finite_number(0.0, 86'400.0))
      ->default_str("2");
  sub.add_option("--oracle-cache", o.oracle_cache,
                 "Where float64 oracles of big cases are kept across runs (default: oracle/ in "
                 "$SDPA_DOCTOR_CACHE_DIR, $XDG_CACHE_HOME/sdpa-doctor or ~/.cache/sdpa-doctor)")
      ->type_name("DIR");
  sub.add_option("--oracle-cache-size", o.oracle_cache_gib,
                 "GiB the oracle cache may hold; when full, what earlier runs used least recently goes")
      ->type_name("GIB")
      ->check(finite_number(0.0, 1024.0))
      ->default_str("2");
  sub.add_flag("--no-oracle-cache", o.no_oracle_cache, "Compute every oracle, keep none");
  sub.add_flag("--no-probe-server", o.no_probe_server,
               "Start every Python worker as its own interpreter instead of forking it from one "
               "that imported torch once");
}

void add_check_options(CLI::App& sub, CheckOptions& o) {
  sub.add_option("--suite", o.suite,
                 "Case suite: quick (seconds on a CPU) or full (hundreds); runs by default only "
                 "without --case, --case-file and --model, beside them when given")
      ->check(CLI::IsMember({"quick", "full"}))
      ->default_str("quick");
  sub.add_option("--case", o.case_specs,
                 "A case, e.g. \"dtype=bf16,b=1,h=32,l=4096,d=128,causal\" (repeatable)")
      ->type_name("SPEC");
  sub.add_option("--case-file", o.case_file, "Cases as JSON lines, one object a line")
      ->type_name("FILE");
  sub.add_option("--model", o.model_config,
                 "Plan the attention shapes of this Hugging Face config.json: causal prefill and "
                 "decode, its heads, KV heads, head dim and dtype (or each --dtype)")
      ->type_name("CONFIG");
  sub.add_option("--max-len", o.max_len,
                 "Longest sequence --model plans (prefill length and decode KV length)")
      ->check(CLI::Range(int64_t{1}, k_max_dim))
      ->default_str(std::to_string(probes::k_default_model_max_len));
  sub.add_flag("--train", o.train, "Also plan backward cases (not supported yet: refused)");
  sub.add_option("--probe", o.probes, "Probes to run: libtorch, python, reference (default all)")
      ->type_name("LIST");
  sub.add_option("--variant", o.variants,
                 "Only these variants or backends, e.g. flash,math or \"flash[ck]\"")
      ->type_name("LIST");
  sub.add_option("--device", o.devices, "Probe targets: cpu, cuda:N (default cpu + every GPU)")
      ->type_name("LIST");
  sub.add_option("--dtype", o.dtypes, "Only cases of these dtypes: fp16, bf16, fp32 (default all)")
      ->type_name("LIST");
  sub.add_option("--python", o.python,
                 "Interpreter for the python probe (default: the first that imports torch of "
                 "$SDPA_DOCTOR_PYTHON, the doctor's own environment, the active venv, python3)")
      ->type_name("PATH");
  sub.add_flag("--no-python", o.no_python, "Skip the python probe");
  sub.add_option("--case-timeout", o.case_timeout_s,
                 "Seconds a case may take before its worker is killed (default: from its size)")
      ->check(positive_seconds());
  sub.add_option("--worker-timeout", o.worker_timeout_s, "Seconds one worker process may live")
      ->check(positive_seconds());
  sub.add_option("--startup-timeout", o.startup_timeout_s,
                 "Seconds a worker may take to start (interpreter, import torch) and between cases")
      ->check(positive_seconds())
      ->default_str("60");
  sub.add_option("--max-worker-restarts", o.max_worker_restarts,
                 "Fresh workers after crashes, per variant, before the rest is skipped")
      ->check(CLI::Range(0, 1000))
      ->default_str("4");
  sub.add_option("--progress-every", o.progress_every_s,
                 "Seconds between progress lines when stderr is not a terminal (not with -q)")
      ->check(positive_seconds())
      ->default_str("10");
  sub.add_flag("--keep-core-dumps", o.keep_core_dumps, "Let crashing workers write core files");
  sub.add_option("--fail-on", o.fail_on,
                 "Statuses that make the exit code 1 (default: mismatch,nonfinite,error,crash,"
                 "timeout; 'none' for never)")
      ->type_name("LIST");
  sub.add_option("--target", o.target,
                 "Your model's attention shape, for the memory cost of the advice, e.g. "
                 "\"b=1,h=32,l=8192,d=128\"")
      ->type_name("SPEC");
  sub.add_option("--known-issues", o.known_issue_files, "More known issues (JSON; repeatable)")
      ->type_name("FILE");
  sub.add_option("--tolerance", o.tolerance, "Override tolerances, e.g. \"bf16=0.02:0.02\"")
      ->type_name("DTYPE=ATOL:RTOL,...");
  sub.add_flag("--require-gpu", o.require_gpu, "Exit 3 when no AMD GPU is found");
  sub.add_option("--sysfs-root", o.sysfs_root,
                 "Read a captured sysfs tree instead of / (for bug reports and tests)")
      ->type_name("DIR");
  sub.add_option("--run-dir", o.run_dir, "Where the journal and worker logs go (default: a new "
                                         "temporary directory)")
      ->type_name("DIR");
  sub.add_option("--repeat", o.repeat, "Timed runs per case (the median is reported)")
      ->default_str("3");
  sub.add_option("--warmup", o.warmup, "Untimed runs per case, the first one checked")
      ->default_str("1");
  add_speed_options(sub, o);
  sub.add_flag("--shrink,!--no-shrink", o.shrink,
               "Search each failure's boundary over the case dimensions and its smallest failing "
               "case (default on; costs nothing when nothing fails)");
  sub.add_option("--shrink-budget", o.shrink_budget,
                 "Cases and seconds the shrinking may spend per failing variant and device: "
                 "CASES, SECONDSs or CASES,SECONDSs")
      ->type_name("CASES[,SECONDSs]")
      ->default_str("24,60s");
  sub.add_flag("--verify,!--no-verify", o.verify,
               "Re-run each recommendation in a fresh python worker under exactly its printed "
               "flags, falling back to the next configuration when that fails (default on)");
}

} // namespace

void add_worker_versions(Report& report) {
  for (const WorkerInfo& w : report.workers)
    for (const auto& [k, v] : w.versions) {
      const std::string key = (k == "torch" && w.probe == Probe::torch)    ? "torch_cpp"
                              : (k == "torch" && w.probe == Probe::python) ? "torch_python"
                                                                           : k;
      report.versions.try_emplace(key, v);
    }
}

AdviceInputs advice_inputs(const CheckOptions& o, std::optional<Case> target) {
  AdviceInputs in;
  auto fail_on = advice::parse_fail_on(o.fail_on);
  if (!fail_on) throw Fatal{fail_on.error().message};
  in.fail_on = *fail_on;
  in.advice.target = std::move(target);
  in.issues = advice::merge_known_issues(load_issue_files(o));
  in.require_gpu = o.require_gpu;
  return in;
}

std::vector<Recommendation> advise_and_decide(Report& report, const AdviceInputs& in,
                                              std::vector<Finding> run_findings, int signal) {
  advice::apply_gfx_truth(advice::settle_gfx_truth(report), report); // before advise reads it
  advice::AdviceResult advised = advice::advise(report, in.issues, in.advice);
  // Device findings stay in the inventory; these are the run's own.
  report.findings = std::move(run_findings);
  report.findings.insert(report.findings.end(), advised.findings.begin(), advised.findings.end());
  report.recommendations = std::move(advised.recommendations);
  report.known_issues = std::move(advised.known_issues);

  int code = advice::exit_code_for(report, in.fail_on);
  if (in.require_gpu && report.inventory.devices.empty()) code = exit_code::no_gpu;
  if (report.interrupted)
    code = signal == SIGTERM ? exit_code::interrupted_term : exit_code::interrupted_int;
  report.exit_code = code;
  return std::move(advised.alternatives);
}

void take_verified_advice(Report& report, run::VerifiedAdvice verified,
                          const std::set<Status>& fail_on) {
  report.recommendations = std::move(verified.recommendations);
  report.findings.insert(report.findings.end(), verified.findings.begin(), verified.findings.end());
  const bool failed = std::any_of(verified.statuses.begin(), verified.statuses.end(),
                                  [&](Status s) { return fail_on.count(s) != 0; });
  if (failed && report.exit_code == 0) report.exit_code = 1;
}

int present_and_write(Report report, const GlobalOptions& global, const std::string& journal) {
  if (global.redact) report = report::redact(std::move(report));
  if (!global.report_on_stdout()) {
    report::ConsoleOptions co;
    co.color = global.color_mode() == ColorMode::always;
    co.unicode = utf8_locale();
    if (const int columns = terminal_columns(STDOUT_FILENO); columns > 0)
      co.width = std::min(columns, co.width); // a narrower terminal: wrap to it
    fmt::print("{}", report::render_console(report, co));
    if (!journal.empty()) fmt::print("journal: {}\n", journal);
  }
  return write_reports(report, global);
}

void setup_check(CLI::App& app, const GlobalOptions& global, Action& action) {
  auto options = std::make_shared<CheckOptions>();
  auto resume = std::make_shared<std::string>();
  auto* sub = app.add_subcommand(
      "check", "The full diagnosis (default): devices, every probe and variant, matrix, advice");
  const size_t before = sub->get_options().size(); // the global ones: --json, -q, ...
  add_check_options(*sub, *options);
  const std::vector<CLI::Option*> all = sub->get_options();
  const std::vector<const CLI::Option*> plan_options(all.begin() + std::ptrdiff_t(before), all.end());
  sub->add_option("--resume", *resume,
                  "Finish the run in RUN-DIR that was stopped: its options and plan from its "
                  "journal, only the cells it had not measured run")
      ->type_name("RUN-DIR");
  sub->callback([&action, &global, options, resume, plan_options] {
    if (!resume->empty()) {
      action = [&global, resume, plan_options] {
        return resume_check(plan_options, *resume, global);
      };
      return;
    }
    action = [&global, options] { return run_check(*options, global); };
  });
}

Action default_check(const GlobalOptions& global) {
  return [&global] { return run_check(CheckOptions{}, global); };
}

} // namespace sdpa_doctor::cli
