// `sdpa-doctor check`: its flags, declared here and parsed once into a check::CheckRequest;
// the pipeline itself is src/check/.
#include "check/check.hpp"
#include "cli/commands.hpp"
#include "cases/cases.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <memory>

namespace sdpa_doctor::cli {

namespace {

using check::CheckOptions;

// What trades measurement for time, and the caches and servers that save it.
void add_speed_options(CLI::App& sub, CheckOptions& o) {
  sub.add_option("--time-budget", o.time_budget_s,
                 "Seconds a case's runs may take before its warm-ups and repeats stop (two timed "
                 "runs always happen; 0 = no limit)")
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
  add_case_plan_options(sub, {o.suite, o.case_specs, o.case_file, o.model_config, o.max_len,
                              o.dtypes, o.train});
  sub.add_option("--probe", o.probes, "Probes to run: libtorch, python, reference (default all)")
      ->type_name("LIST");
  sub.add_option("--variant", o.variants,
                 "Only these variants or backends, e.g. flash,math or \"flash[ck]\"")
      ->type_name("LIST");
  sub.add_option("--device", o.devices, "Probe targets: cpu, cuda:N (default cpu + every GPU)")
      ->type_name("LIST");
  sub.add_option("--mode", o.modes,
                 "Only cells of these modes: eager, compiled (default both: the python probe "
                 "also runs the suite's compile family through torch.compile; compiled alone "
                 "compiles every planned case)")
      ->type_name("LIST");
  sub.add_option("--compile", o.compile,
                 "torch.compile backend of compiled cells: aot_eager (Dynamo and AOTAutograd's "
                 "fake tensors) or inductor (generated kernels; needs a C++ compiler on a CPU)")
      ->type_name("BACKEND")
      ->default_str("aot_eager");
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
  sub.add_option("--plugin-build-timeout", o.plugin_build_timeout_s,
                 "Seconds the LibTorch plugin's compiler may take before it and its children are "
                 "killed")
      ->check(positive_seconds())
      ->default_str("900");
  sub.add_option("--cache-lock-timeout", o.cache_lock_timeout_s,
                 "Seconds to wait for another check holding a cache folder's lock before going on "
                 "without that cache")
      ->check(positive_seconds())
      ->default_str("120");
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

// The journal is the run's record (what --resume and `report` read): never a report's path.
void refuse_output_over_journal(const GlobalOptions& global, const std::string& run_dir) {
  if (!run_dir.empty())
    refuse_output_over(global, (std::filesystem::path(run_dir) / "journal.jsonl").string(),
                       "the run's journal");
}

int run_check(const CheckOptions& options, const GlobalOptions& global) {
  refuse_output_over_journal(global, options.run_dir);
  return check::run_check(check::parse_request(options), check_outputs(global));
}

// `check --resume RUN-DIR`: only output options may come with it, the plan is the journal's.
int resume_check(const std::vector<const CLI::Option*>& plan_options, const std::string& run_dir,
                 const GlobalOptions& global) {
  for (const CLI::Option* opt : plan_options)
    if (opt->count() > 0)
      throw Fatal{fmt::format("--resume takes the check's options from its journal; {} cannot "
                              "come with it",
                              opt->get_name())};
  std::error_code ec;
  refuse_output_over_journal(global, std::filesystem::is_directory(run_dir, ec)
                                         ? run_dir
                                         : std::filesystem::path(run_dir).parent_path().string());
  return check::resume_check(run_dir, check_outputs(global));
}

} // namespace

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
