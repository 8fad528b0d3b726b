#include "check/steps.hpp"

#include "core/build_info.hpp"
#include "core/cache.hpp"
#include "core/text.hpp"
#include "core/io.hpp"
#include "devices/devices.hpp"
#include "cases/cases.hpp"
#include "report/report.hpp"
#include "run/torch_plugin.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <unistd.h>

namespace sdpa_doctor::check {

namespace {

// What the interpreter gets to find and import torch: the time a worker gets to start.
std::chrono::milliseconds preflight_deadline(const CheckRequest& r) {
  return r.worker_timeout.count() > 0 ? std::min(r.startup_timeout, r.worker_timeout)
                                      : r.startup_timeout;
}

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
    const std::vector<Variant> on_gpu = cases::plan_variants(probe, "cuda:0");
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

} // namespace

run::PythonChoice located_python(const CheckRequest& r) {
  auto located = run::locate_python(r.python, preflight_deadline(r));
  // A --python that was named is the torch under test for the libtorch probe too: one that does
  // not run is refused, never replaced by the torch the doctor was built with.
  const bool runs_torch = std::find(r.probes.begin(), r.probes.end(), Probe::torch) != r.probes.end();
  if (!located && (r.runs_python() || (runs_torch && !r.python.empty())))
    throw Fatal{located.error().message};
  return located ? *located : run::PythonChoice{};
}

std::string planted_faults() {
  auto faults = run::planted_faults_in_environment();
  if (!faults) throw Fatal{faults.error().message};
  if (!faults->empty())
    spdlog::warn("SDPA_DOCTOR_TEST_FAULT={}: faults are planted in the workers; the results are "
                 "not a measurement of the backends",
                 escape_to_one_line(*faults));
  return *faults;
}

Report started_report(const CheckRequest& r, const run::PythonChoice& python) {
  Report report;
  report.tool_version = build_info::k_version;
  report.git_revision = build_info::k_git_revision;
  report.started_at = utc_now();
  report.host = devices::host_facts();
  report.environment = report::reportable_environment(devices::process_environment());
  report.suite = r.suite;
  report.model = r.model;

  const auto enum_start = std::chrono::steady_clock::now();
  devices::EnumerateOptions eo;
  eo.sysfs_root = r.sysfs_root;
  if (r.sysfs_root != "/") eo.dev_root.clear();
  eo.torch_lib_dirs = python.torch_lib_dirs;
  report.inventory = devices::enumerate_devices(eo);
  report.timings.enumerate_ms = ms_since(enum_start);
  for (const auto& [k, v] : report.inventory.runtime) report.versions[k] = v;
  return report;
}

run::ExecuteOptions execute_options(const CheckRequest& r, const Outputs& outputs,
                                    const std::atomic<bool>* interrupted) {
  run::ExecuteOptions exec;
  exec.tolerances = r.tolerances;
  if (r.case_timeout.count() > 0) exec.case_timeout = r.case_timeout;
  exec.worker_timeout = r.worker_timeout;
  exec.startup_timeout = r.startup_timeout;
  exec.max_worker_restarts = r.max_worker_restarts;
  exec.keep_core_dumps = r.keep_core_dumps;
  exec.warmup = r.warmup;
  exec.repeat = r.repeat;
  exec.call_budget = r.call_budget;
  exec.compile_backend = r.compile_backend;
  exec.probe_server = r.probe_server;
  exec.oracle_cache_dir = r.oracle_cache_dir;
  exec.oracle_cache_bytes = r.oracle_cache_bytes;
  exec.cache_lock_timeout = r.cache_lock_timeout;
  exec.progress = outputs.quiet                  ? run::ProgressMode::none
                  : ::isatty(STDERR_FILENO) != 0 ? run::ProgressMode::terminal
                                                 : run::ProgressMode::log;
  exec.progress_interval = r.progress_interval;
  exec.interrupted = interrupted;
  return exec;
}

run::ProbeServer started_probe_server(const CheckRequest& r, const run::PythonChoice& located,
                                      const run::ExecuteOptions& exec) {
  if (!r.runs_python() || located.path.empty() || located.hung) return {};
  run::ExecuteOptions with_python = exec;
  with_python.python = located.path;
  run::ServerWarmUps warm_ups;
  const auto backward = [](const Case& c) { return c.backward; };
  const auto bottom_right = [](const Case& c) { return c.causal_bottom_right; };
  warm_ups.backward = std::any_of(r.cases.begin(), r.cases.end(), backward) ||
                      std::any_of(r.gpu_cases.begin(), r.gpu_cases.end(), backward);
  warm_ups.causal_bias = std::any_of(r.cases.begin(), r.cases.end(), bottom_right) ||
                         std::any_of(r.gpu_cases.begin(), r.gpu_cases.end(), bottom_right);
  const bool compiled_mode =
      r.modes.empty() || std::find(r.modes.begin(), r.modes.end(), Mode::compiled) != r.modes.end();
  if (compiled_mode && !r.compiled_cases.empty()) warm_ups.compile_backend = r.compile_backend;
  return run::start_probe_server(with_python, warm_ups);
}

void preflight_step(const CheckRequest& r, const run::PythonChoice& located,
                    run::ExecuteOptions& exec, DeviceInventory& inventory) {
  if (!r.runs_python()) return;
  const auto python =
      run::preflight_python(located, preflight_deadline(r), exec.shared_probe_server.socket);
  exec.python = python.path;
  exec.python_reason = python.reason;
  exec.python_unusable = python.unusable;
  exec.torch_lib_dirs = python.torch_lib_dirs;
  if (exec.python.empty()) exec.shared_probe_server = {}; // an import that failed or hangs there
  devices::add_torch_gpus(inventory, python.gpus, python.path);
  devices::compare_torch_hip_runtime(inventory, python.torch_hip_runtimes, python.path);
  if (!python.gpus_error.empty())
    spdlog::warn("{}: torch could not list its GPUs: {}", python.path, python.gpus_error);
}

run::Plan checked_plan(const CheckRequest& r, const DeviceInventory& inventory) {
  check_devices_exist(r.targets, inventory);
  const run::ModeRequest modes{r.modes, r.compiled_cases};
  run::Plan plan = run::make_plan({r.cases, r.probes, r.variant_filter, r.targets}, inventory, modes);
  // The suite's GPU-only cases join where a GPU is a target; a CPU target skips them.
  if (!r.gpu_cases.empty() &&
      std::any_of(plan.targets.begin(), plan.targets.end(),
                  [](const std::string& t) { return cases::is_gpu_target(t); })) {
    std::vector<Case> with_gpu = r.cases;
    with_gpu.insert(with_gpu.end(), r.gpu_cases.begin(), r.gpu_cases.end());
    plan = run::make_plan({with_gpu, r.probes, r.variant_filter, r.targets}, inventory, modes);
  }
  if (plan.runs.empty() && r.modes == std::vector<Mode>{Mode::compiled})
    throw Fatal{"--mode compiled: only the python probe runs compiled cells, and this check "
                "plans none (no python probe, or --variant names only variants with no CPU "
                "kernel)"};
  if (plan.runs.empty() && !r.variant_filter.empty())
    throw Fatal{fmt::format("--variant {}: {}", fmt::join(r.variant_filter, ","),
                            why_not_planned(r.variant_filter.front(), r.probes, plan.targets))};
  return plan;
}

cache::FileInUse choose_torch_plugin(const CheckRequest& r, const run::Plan& plan,
                                     const run::PythonChoice& located, bool quiet,
                                     run::ExecuteOptions& exec, DeviceInventory& inventory) {
  if (std::none_of(plan.runs.begin(), plan.runs.end(),
                   [](const run::PlannedRun& p) { return p.probe == Probe::torch; }))
    return {};
  run::PluginBuildOptions build;
  build.python = located.path;
  build.cache_dir = cache::folder("workers");
  build.scratch_dir = exec.run_dir;
  build.deadline = r.plugin_build_timeout;
  build.lock_deadline = r.cache_lock_timeout;
  build.interrupted = exec.interrupted;
  if (!quiet)
    build.progress = [](const std::string& line) {
      fmt::print(stderr, "sdpa-doctor: {}\n", escape_to_one_line(line));
    };
  // torch/lib comes first among the torch's library folders, when it has one.
  std::string lib_dir;
  if (!located.path.empty() && !located.torch_lib_dirs.empty() &&
      located.torch_lib_dirs.front().ends_with("/lib"))
    lib_dir = located.torch_lib_dirs.front();
  run::TorchPlugin plugin = run::torch_plugin_for(lib_dir, build);
  exec.torch_plugin = plugin.path;
  exec.torch_plugin_why_not = plugin.why_not;
  inventory.runtime["torch_plugin"] = plugin.path.empty() ? "none: " + plugin.why_not : plugin.path;
  if (!plugin.origin.empty()) inventory.runtime["torch_plugin_origin"] = plugin.origin;
  if (plugin.finding) inventory.findings.push_back(std::move(*plugin.finding));
  return std::move(plugin.in_use);
}

std::string checked_run_dir(const std::string& named) {
  auto run_dir = run::make_run_dir(named);
  // A directory the user named is an input error; the system's temp directory is ours.
  if (!run_dir)
    throw Fatal{run_dir.error().message, named.empty() ? exit_code::internal : exit_code::usage};
  return *run_dir;
}

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

} // namespace sdpa_doctor::check
