#include "advice/advice.hpp"
#include "cli/commands.hpp"
#include "compare/compare.hpp"
#include "core/expected.hpp"
#include "core/status.hpp"
#include "report/report.hpp"

#include <fmt/format.h>

#include <memory>

namespace sdpa_doctor::cli {

namespace {

struct DiffOptions {
  std::string baseline;
  std::string now;
  double time_threshold = 1.25;
  std::string fail_on = "default";
  bool fail_on_slower = false;
};

compare::ReportDigest read_or_fail(const std::string& path) {
  auto digest = compare::read_report_file(path);
  if (!digest) throw Fatal{fmt::format("{}: {}", path, digest.error().message), exit_code::usage};
  return std::move(*digest);
}

int run_diff(const DiffOptions& o, const GlobalOptions& global) {
  auto fail_on = advice::parse_fail_on(o.fail_on);
  if (!fail_on) throw Fatal{fail_on.error().message};
  reject_junit(global, "diff");
  refuse_output_over(global, o.baseline, "the baseline report");
  refuse_output_over(global, o.now, "the new report");
  const compare::ReportDigest baseline = read_or_fail(o.baseline);
  const compare::ReportDigest now = read_or_fail(o.now);
  const compare::DiffResult d = compare::diff(
      baseline, now, compare::DiffOptions{*fail_on, o.time_threshold, o.fail_on_slower});
  print_and_write(
      global, [&](bool unicode) { return compare::render_diff_console(d, unicode); },
      [&] { return compare::render_diff_json(d); },
      [&] { return compare::render_diff_markdown(d); });
  return d.exit_code;
}

} // namespace

void setup_diff(CLI::App& app, const GlobalOptions& global, Action& action) {
  auto o = std::make_shared<DiffOptions>();
  auto* sub = app.add_subcommand(
      "diff", "Compare two reports cell by cell (device arch and index, probe, variant, dtype, "
              "case): regressions, fixes, new and removed cells, timing changes. Exit 1 on a "
              "regression");
  sub->add_option("baseline", o->baseline, "The baseline report (JSON from check --json)")
      ->required()
      ->type_name("BASELINE.json");
  sub->add_option("new", o->now, "The new report")->required()->type_name("NEW.json");
  sub->add_option("--time-threshold", o->time_threshold,
                  "Report a median time that grew or shrank by this ratio or more")
      ->check(finite_number(1.0, 1000.0))
      ->default_str("1.25");
  sub->add_option("--fail-on", o->fail_on,
                  "Statuses that count as failing; a cell that moves into one is a regression "
                  "(default: mismatch,nonfinite,error,crash,timeout)")
      ->type_name("LIST");
  sub->add_flag("--fail-on-slower", o->fail_on_slower,
                "Also exit 1 when a cell got slower beyond --time-threshold");
  sub->callback([&action, &global, o] { action = [&global, o] { return run_diff(*o, global); }; });
}

} // namespace sdpa_doctor::cli
