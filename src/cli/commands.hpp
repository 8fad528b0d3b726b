// cli/commands: the subcommand table. Each subcommand lives in its own <name>_command.cpp with an
// options struct, a setup_<name>(CLI::App&, ...) that declares its flags, and a run_<name>().
#pragma once

#include "check/outputs.hpp"

#include <CLI/CLI.hpp>

#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace sdpa_doctor::cli {

enum class ColorMode { automatic, always, never };

// Options every subcommand understands (they may appear before or after the subcommand name).
struct GlobalOptions {
  std::string json_path;     // --json FILE ("-" = stdout)
  std::string markdown_path; // --markdown FILE
  std::string junit_path;    // --junit FILE
  std::string color = "auto";
  int verbose = 0;           // -v count
  bool quiet = false;        // -q
  std::string log_file;
  bool redact = false;       // --redact: no hostname or user in reports

  ColorMode color_mode() const; // honours NO_COLOR, whether stdout is a terminal, TERM=dumb
  // A report goes to stdout ('-'): it is then all that stdout carries (no console table).
  bool report_on_stdout() const;
};

// What a subcommand's setup leaves behind: the function to call once parsing succeeded.
using Action = std::function<int()>;

// setup_X adds subcommand X to `app` and, when X is selected, stores its action in `action`.
// `global` outlives the parse and is filled in by then.
void setup_check(CLI::App& app, const GlobalOptions& global, Action& action);
void setup_devices(CLI::App& app, const GlobalOptions& global, Action& action);
void setup_cases(CLI::App& app, const GlobalOptions& global, Action& action);
void setup_self_test(CLI::App& app, const GlobalOptions& global, Action& action);
void setup_known_issues(CLI::App& app, const GlobalOptions& global, Action& action);
void setup_repro(CLI::App& app, const GlobalOptions& global, Action& action);
void setup_variants(CLI::App& app, const GlobalOptions& global, Action& action);
void setup_version(CLI::App& app, const GlobalOptions& global, Action& action);
void setup_completion(CLI::App& app, const GlobalOptions& global, Action& action);
// Reading reports back: compare two (diff), fold a fleet's into one matrix (merge).
void setup_diff(CLI::App& app, const GlobalOptions& global, Action& action);
void setup_merge(CLI::App& app, const GlobalOptions& global, Action& action);
// A check's reports rebuilt from its journal.
void setup_report(CLI::App& app, const GlobalOptions& global, Action& action);
// Hidden worker entry points of the doctor's own binary (e.g. the fault-injection worker).
void setup_workers(CLI::App& app, const GlobalOptions& global, Action& action);

// The default action when no subcommand is given: `check` with its defaults.
Action default_check(const GlobalOptions& global);

// Prints the version block (`--version` and `version`).
int print_version();

// diff and merge write JSON and Markdown of their own; --junit is refused (Fatal, exit 2).
void reject_junit(const GlobalOptions& global, const std::string& command);
// Prints the console form (its argument: unicode or not) unless --json is stdout, then writes
// --json and --markdown (when given) atomically; Fatal (exit 4) when a file cannot be written.
void print_and_write(const GlobalOptions& global, const std::function<std::string(bool)>& console,
                     const std::function<std::string()>& json,
                     const std::function<std::string()>& markdown);

// Where the check pipeline writes its reports, from the global flags.
check::Outputs check_outputs(const GlobalOptions& global);

// Fatal (exit 2) when a report or the log file would be written over `input` (a journal, a
// report read back), which `what` names.
void refuse_output_over(const GlobalOptions& global, const std::string& input,
                        const std::string& what);

// The flags that plan cases, declared once for `check` and `cases` (which lists what a check with
// the same flags would run); each command keeps the values in its own options.
struct CasePlanFlags {
  std::string& suite;
  std::vector<std::string>& case_specs;
  std::string& case_file;
  std::string& model_config;
  int64_t& max_len;
  std::vector<std::string>& dtypes;
  bool& train;
};
void add_case_plan_options(CLI::App& sub, const CasePlanFlags& flags);

// Number flags: NaN and infinities refused (CLI11's Range lets NaN through, since every
// comparison with it is false), and a one-line message.
CLI::Validator finite_number(double min, double max = std::numeric_limits<double>::max());
// Seconds: more than 0, at most 1e6.
CLI::Validator positive_seconds();

} // namespace sdpa_doctor::cli
