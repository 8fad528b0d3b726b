#include "cli/cli.hpp"

#include "cli/commands.hpp"
#include "core/build_info.hpp"
#include "core/expected.hpp"
#include "core/io.hpp"
#include "core/status.hpp"
#include "core/text.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string_view>
#include <vector>
#include <iostream>
#include <mutex>
#include <optional>
#include <system_error>
#include <unistd.h>

namespace sdpa_doctor {
namespace cli {

ColorMode GlobalOptions::color_mode() const {
  if (color == "always") return ColorMode::always;
  if (color == "never") return ColorMode::never;
  if (const char* no = std::getenv("NO_COLOR"); no && *no) return ColorMode::never;
  return ::isatty(STDOUT_FILENO) && !dumb_terminal() ? ColorMode::always : ColorMode::never;
}

bool GlobalOptions::report_on_stdout() const { return check_outputs(*this).report_on_stdout(); }

check::Outputs check_outputs(const GlobalOptions& global) {
  check::Outputs out;
  out.json_path = global.json_path;
  out.markdown_path = global.markdown_path;
  out.junit_path = global.junit_path;
  out.redact = global.redact;
  out.color = global.color_mode() == ColorMode::always;
  out.quiet = global.quiet;
  return out;
}

namespace {

namespace fs = std::filesystem;

std::optional<double> parsed_number(const std::string& text) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// Whether two paths name one file, existing or not (links, "./", ".." resolved). Character
// devices are written in place and may be shared (/dev/null twice is fine).
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::is_character_file(a, ec)) return false;
  if (fs::equivalent(a, b, ec)) return true;
  std::error_code ec_a, ec_b;
  const fs::path ca = fs::weakly_canonical(fs::absolute(a, ec_a), ec_a);
  const fs::path cb = fs::weakly_canonical(fs::absolute(b, ec_b), ec_b);
  return !ec_a && !ec_b && ca == cb;
}

struct Output {
  const char* flag;
  const std::string& path;
  bool dash_is_stdout; // a report's '-'; the log file has none
};

std::vector<Output> outputs(const GlobalOptions& g) {
  return {{"--json", g.json_path, true},
          {"--markdown", g.markdown_path, true},
          {"--junit", g.junit_path, true},
          {"--log-file", g.log_file, false}};
}

// Two outputs that are one file would leave only the last one written; two reports on stdout
// would run together into text no reader parses.
void check_outputs_distinct(const GlobalOptions& g) {
  const std::vector<Output> all = outputs(g);
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = i + 1; j < all.size(); ++j) {
      const Output& a = all[i];
      const Output& b = all[j];
      if (a.path.empty() || b.path.empty()) continue;
      const bool stdout_a = a.dash_is_stdout && a.path == "-";
      const bool stdout_b = b.dash_is_stdout && b.path == "-";
      if (stdout_a && stdout_b)
        throw Fatal{fmt::format("{} and {} both write to stdout ('-'): give one of them a file",
                                a.flag, b.flag)};
      if (!stdout_a && !stdout_b && same_file(a.path, b.path))
        throw Fatal{fmt::format("{} and {} both write {}: give each its own file", a.flag,
                                b.flag, a.path)};
    }
}

// An empty value is never meant: it is an unset variable (`--model "$CONFIG"`), and taking it as
// "not given" would run something else and pass.
const CLI::Validator k_not_empty(
    [](std::string& text) {
      return text.empty() ? std::string("empty value (an unset variable?): give one or leave the "
                                        "option out")
                          : std::string();
    },
    "");

void refuse_empty_values(CLI::App& app) {
  for (CLI::Option* opt : app.get_options())
    if (opt->get_type_size() > 0) opt->check(k_not_empty); // flags take no value
}

} // namespace

void refuse_output_over(const GlobalOptions& global, const std::string& input,
                        const std::string& what) {
  for (const Output& out : outputs(global))
    if (!out.path.empty() && !(out.dash_is_stdout && out.path == "-") && same_file(out.path, input))
      throw Fatal{fmt::format("{} {}: that is {}, which writing it would destroy", out.flag,
                              out.path, what)};
}

CLI::Validator finite_number(double min, double max) {
  const bool unbounded = max == std::numeric_limits<double>::max();
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        const auto v = parsed_number(text);
        if (v && std::isfinite(*v) && *v >= min && *v <= max) return {};
        if (unbounded)
          return fmt::format("expected a finite number of at least {}, got '{}'", min, text);
        return fmt::format("expected a finite number from {} to {}, got '{}'", min, max, text);
      },
      unbounded ? fmt::format("NUMBER >= {}", min) : fmt::format("NUMBER in [{} - {}]", min, max));
}

CLI::Validator positive_seconds() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const auto v = parsed_number(text);
        if (!v) return "expected a number of seconds, got '" + text + "'";
        if (!(*v > 0) || *v > 1e6)
          return "must be more than 0 and at most 1e6 seconds, got " + text;
        return {};
      },
      "SECONDS");
}

namespace {

constexpr const char* k_footer = R"(Exit codes:
  0  every case that ran passed or was unsupported
  1  at least one case failed (mismatch, nonfinite, error, crash, timeout; see --fail-on)
  2  usage or input error (bad flag, unreadable case file, ...)
  3  no GPU found while --require-gpu was given
  4  the doctor itself failed
  129/130/143  interrupted by SIGHUP/SIGINT/SIGTERM (the report holds what finished)

With no subcommand, `check` runs: the full diagnosis, with any of its flags
(`sdpa-doctor --python PATH` is `sdpa-doctor check --python PATH`).)";

// Which report flags a command takes: only those it writes.
struct Reports {
  bool json = false;
  bool markdown = false;
  bool junit = false;
  bool redact = false;
};
constexpr Reports k_all_reports{true, true, true, true};

struct CommandHelp {
  const char* name;
  Reports reports;
  const char* footer; // the exit codes this command can return
};

constexpr const char* k_plain_footer = R"(Exit codes:
  0  done
  2  usage or input error
  4  the doctor itself failed (e.g. the output could not be written))";

constexpr CommandHelp k_command_help[] = {
    {"check", k_all_reports, k_footer},
    {"devices", {true, false, false, false}, R"(Exit codes:
  0  done (with or without a GPU)
  2  usage or input error
  3  no GPU found while --require-gpu was given
  4  the doctor itself failed (e.g. the report could not be written))"},
    {"cases", {true, false, false, false}, k_plain_footer},
    {"report", k_all_reports, R"(Exit codes: those the check would have returned
  0  every cell that ran passed or was unsupported
  1  at least one cell failed (the check's --fail-on)
  2  usage or input error (no such file, not a journal)
  4  the doctor itself failed (e.g. a report could not be written)
  130  the journal ends before the run did (killed or interrupted): resume it with
       sdpa-doctor check --resume RUN-DIR)"},
    {"self-test", {}, R"(Exit codes:
  0  every injected fault was caught and attributed
  1  at least one was not
  2  usage or input error
  4  the doctor itself failed)"},
    {"diff", {true, true, false, false}, R"(Exit codes:
  0  no regression (fixes, new or removed cells and slower cells are listed)
  1  at least one cell regressed (see --fail-on; slower cells with --fail-on-slower)
  2  usage or input error (unreadable, truncated or newer-schema report)
  4  the doctor itself failed (e.g. the output could not be written))"},
    {"merge", {true, true, false, false}, R"(Exit codes:
  0  every cell passed (or was unsupported) on every node
  1  some cell fails on some node
  2  an input was skipped (unreadable, not a report, newer schema), or none was valid
  4  the doctor itself failed (e.g. the output could not be written))"},
};

const CommandHelp& help_for(const std::string& name) {
  static const CommandHelp k_other{"", {}, k_plain_footer};
  for (const CommandHelp& h : k_command_help)
    if (name == h.name) return h;
  return k_other;
}

// The first failure to write the log file (a full disk): spdlog's own handler would print a line
// per failed message and carry on.
std::mutex g_log_error_mutex;
std::string g_log_error;

void on_log_error(const std::string& message) {
  std::lock_guard lock(g_log_error_mutex);
  if (g_log_error.empty()) g_log_error = message;
}

// Empty when every log line reached the log file; else why not.
std::string flushed_log() {
  spdlog::default_logger()->flush();
  std::lock_guard lock(g_log_error_mutex);
  return g_log_error;
}

void setup_logging(const GlobalOptions& global) {
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  if (global.color_mode() == ColorMode::never) console->set_color_mode(spdlog::color_mode::never);
  std::vector<spdlog::sink_ptr> sinks{console};
  auto level = global.quiet ? spdlog::level::err
               : global.verbose >= 2 ? spdlog::level::trace
               : global.verbose == 1 ? spdlog::level::debug
                                     : spdlog::level::warn;
  console->set_level(level);
  if (!global.log_file.empty()) {
    try {
      auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(global.log_file, true);
      file->set_level(spdlog::level::trace);
      sinks.push_back(file);
    } catch (const spdlog::spdlog_ex& e) {
      throw Fatal{fmt::format("cannot open log file '{}': {}", global.log_file, e.what())};
    }
  }
  auto logger = std::make_shared<spdlog::logger>("sdpa-doctor", sinks.begin(), sinks.end());
  logger->set_level(spdlog::level::trace);
  logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  logger->set_error_handler(on_log_error);
  spdlog::set_default_logger(logger);
}

// What went to stdout through stdio or iostreams (CLI11's help) is only known to have arrived once
// it is flushed: a full disk or a closed pipe must not end in a silent success.
// `failed_errno`: what a write that already failed said, when the caller caught it.
int flushed_stdout(int code, int failed_errno = 0) {
  errno = 0;
  std::cout.flush();
  const bool failed = std::fflush(stdout) != 0 || std::ferror(stdout) || !std::cout;
  // Of the first failed write: a flush after it may have nothing left to write.
  const int err = failed_errno != 0 ? failed_errno : stdout_error() != 0 ? stdout_error() : errno;
  if (failed) {
    fmt::print(stderr, "sdpa-doctor: error: cannot write to stdout: {}\n",
               std::strerror(err != 0 ? err : EIO));
    return exit_code::internal;
  }
  return code;
}

// The action's exit code; a print to a stdout that was closed (fmt::print throws there) ends the
// action with exit 4 (`failed_errno`: what the write said), which flushed_stdout then explains in
// one line.
int stdout_failure_is_exit_4(const Action& action, int& failed_errno) {
  try {
    return action();
  } catch (const std::system_error& e) {
    if (!std::ferror(stdout)) throw;
    failed_errno = e.code().value();
    return exit_code::internal;
  }
}

// With no subcommand, `check` runs, and so its flags are the top level's: `sdpa-doctor --python X`
// is `sdpa-doctor check --python X`. Help and version stay the top level's own.
std::vector<char*> with_default_subcommand(int argc, char** argv, const CLI::App& app) {
  std::vector<char*> args(argv, argv + argc);
  if (argc < 2 || argv[1][0] != '-') return args;
  for (const char* own : {"-h", "--help", "--help-all", "-V", "--version"})
    if (std::string_view(argv[1]) == own) return args;
  for (int i = 1; i < argc; ++i)
    for (const CLI::App* sub : app.get_subcommands({}))
      if (sub->check_name(argv[i])) return args; // a subcommand is named after the flags
  static char check[] = "check";
  args.insert(args.begin() + 1, check);
  return args;
}

int run(int argc, char** argv) {
  GlobalOptions global;
  CLI::App app{"sdpa-doctor: diagnose PyTorch scaled-dot-product-attention backends on AMD ROCm "
               "GPUs. Every probe runs in its own child process.",
               "sdpa-doctor"};
  app.footer(k_footer);
  app.set_version_flag("-V,--version", [] {
    print_version();
    return std::string{};
  }, "Print the version of sdpa-doctor and of every dependency built in, then exit");
  app.require_subcommand(0, 1);

  auto add_global = [&](CLI::App& a, const Reports& reports) {
    if (reports.json)
      a.add_option("--json", global.json_path, "Write the JSON report to FILE ('-' for stdout)")
          ->type_name("FILE");
    if (reports.markdown)
      a.add_option("--markdown", global.markdown_path, "Write a Markdown report to FILE")
          ->type_name("FILE");
    if (reports.junit)
      a.add_option("--junit", global.junit_path, "Write a JUnit XML report to FILE")
          ->type_name("FILE");
    a.add_option("--color", global.color, "Colour on the console (NO_COLOR is honoured)")
        ->check(CLI::IsMember({"auto", "always", "never"}))
        ->default_str("auto");
    a.add_flag("-v,--verbose", global.verbose, "More log output on stderr (repeatable)");
    a.add_flag("-q,--quiet", global.quiet, "Only errors on stderr; no progress line");
    a.add_option("--log-file", global.log_file, "Also write the full log to FILE")
        ->type_name("FILE");
    if (reports.redact)
      a.add_flag("--redact", global.redact, "Leave hostname and user name out of every report");
  };
  add_global(app, k_all_reports); // `sdpa-doctor --json r.json` is a check

  Action action;
  using Setup = void (*)(CLI::App&, const GlobalOptions&, Action&);
  // The subcommand table: one entry per subcommand, each in its own <name>_command.cpp.
  constexpr Setup k_subcommands[] = {setup_check,        setup_devices, setup_cases,
                                     setup_self_test,    setup_known_issues,
                                     setup_repro,        setup_variants, setup_version,
                                     setup_completion,   setup_workers,  setup_diff,
                                     setup_merge,        setup_report};
  for (Setup setup : k_subcommands) setup(app, global, action);
  for (CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_group().empty()) continue; // hidden worker modes take no global flags
    const CommandHelp& help = help_for(sub->get_name());
    add_global(*sub, help.reports);
    sub->footer(help.footer);
    refuse_empty_values(*sub);
  }
  refuse_empty_values(app);

  std::vector<char*> args = with_default_subcommand(argc, argv, app);
  try {
    app.parse(int(args.size()), args.data());
  } catch (const CLI::CallForHelp& e) {
    return flushed_stdout(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    return flushed_stdout(app.exit(e));
  } catch (const CLI::CallForVersion&) {
    return flushed_stdout(exit_code::ok);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "sdpa-doctor: error: {}\nRun 'sdpa-doctor --help' for usage.\n",
               escape_to_one_line(e.what()));
    return exit_code::usage;
  }
  check_outputs_distinct(global);
  setup_logging(global);
  // The log file's first line; it also proves, at the end, that the file takes writes.
  spdlog::info("sdpa-doctor {}: {}", build_info::k_version,
               escape_to_one_line(fmt::format("{}", fmt::join(argv, argv + argc, " "))));
  if (!action) action = default_check(global);
  int failed_errno = 0;
  const int done = stdout_failure_is_exit_4(action, failed_errno);
  const int code = flushed_stdout(done, failed_errno);
  if (const std::string log_error = flushed_log(); !log_error.empty()) {
    fmt::print(stderr, "sdpa-doctor: error: cannot write the log file '{}': {}\n",
               escape_to_one_line(global.log_file), escape_to_one_line(log_error));
    return exit_code::internal;
  }
  return code;
}

} // namespace
} // namespace cli

int run_cli(int argc, char** argv) {
  // A reader that closes the pipe (`| head -1`) is a write error like a full disk: the files
  // still get written and the exit is 4, not a silent death by SIGPIPE half-way. Children start
  // with every signal at its default again (isolate).
  std::signal(SIGPIPE, SIG_IGN);
  try {
    return cli::run(argc, argv);
  } catch (const Fatal& fatal) {
    std::fflush(stdout);
    fmt::print(stderr, "sdpa-doctor: error: {}\n", escape_to_one_line(fatal.message));
    return fatal.exit_code;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "sdpa-doctor: internal error: {}\n", escape_to_one_line(e.what()));
    return exit_code::internal;
  } catch (...) {
    fmt::print(stderr, "sdpa-doctor: internal error: unknown exception\n");
    return exit_code::internal;
  }
}

} // namespace sdpa_doctor
