#include "cli/cli.hpp"

#include "cli/commands.hpp"
#include "core/expected.hpp"
#include "core/status.hpp"
#include "core/text.hpp"

#include <fmt/format.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <exception>
#include <unistd.h>

namespace sdpa_doctor {
namespace cli {

ColorMode GlobalOptions::color_mode() const {
  if (color == "always") return ColorMode::always;
  if (color == "never") return ColorMode::never;
  if (const char* no = std::getenv("NO_COLOR"); no && *no) return ColorMode::never;
  return ::isatty(STDOUT_FILENO) && !dumb_terminal() ? ColorMode::always : ColorMode::never;
}

int not_implemented(const std::string& what) {
  fmt::print(stderr, "sdpa-doctor: {} is not implemented in this build yet\n", what);
  return exit_code::internal;
}

namespace {

constexpr const char* k_footer = R"(Exit codes:
  0  every case that ran passed or was unsupported
  1  at least one case failed (mismatch, nonfinite, error, crash, timeout; see --fail-on)
  2  usage or input error (bad flag, unreadable case file, ...)
  3  no GPU found while --require-gpu was given
  4  the doctor itself failed
  130/143  interrupted by SIGINT/SIGTERM (the report holds what finished)

With no subcommand, `check` runs: the full diagnosis.)";

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
  spdlog::set_default_logger(logger);
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
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion&) {
    return exit_code::ok;
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "sdpa-doctor: error: {}\nRun 'sdpa-doctor --help' for usage.\n",
               escape_to_one_line(e.what()));
    return exit_code::usage;
  }
  setup_logging(global);
  if (!action) action = default_check(global);
  const int code = action();
  // What went to stdout through stdio is only known to have arrived once it is flushed: a full
  // disk or a closed pipe must not end in a silent success.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    fmt::print(stderr, "sdpa-doctor: error: cannot write to stdout: {}\n", std::strerror(errno));
    return exit_code::internal;
  }
  return code;
}

} // namespace
} // namespace cli

int run_cli(int argc, char** argv) {
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
