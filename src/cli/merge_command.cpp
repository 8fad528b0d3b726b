#include "advice/advice.hpp"
#include "cli/commands.hpp"
#include "compare/compare.hpp"
#include "core/expected.hpp"
#include "core/status.hpp"
#include "core/text.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <set>
#include <system_error>

namespace sdpa_doctor::cli {

namespace {

constexpr const char* k_merge_help =
    "Fold the reports of many nodes into one fleet matrix per (arch, probe, variant), naming the "
    "odd nodes and the fact that sets them apart. Exit 2 when an input was skipped, 1 when a cell "
    "fails on any node";

struct MergeOptions {
  std::vector<std::string> reports;
  std::string fail_on = "default";
};

int run_merge(const MergeOptions& o, const GlobalOptions& global) {
  auto fail_on = advice::parse_fail_on(o.fail_on);
  if (!fail_on) throw Fatal{fail_on.error().message};
  reject_junit(global, "merge");
  for (const std::string& path : o.reports) refuse_output_over(global, path, "a report to merge");
  compare::FleetMatrix fleet(*fail_on);
  std::set<std::string> seen;
  // One report at a time: read, fold into the matrix, drop.
  for (const std::string& path : o.reports) {
    // The same file twice (a shell glob and a name, a symlink) is one node, not two.
    std::error_code ec;
    const auto canonical = std::filesystem::weakly_canonical(path, ec);
    if (!seen.insert(ec ? path : canonical.string()).second) {
      fmt::print(stderr, "sdpa-doctor: warning: {}: given more than once; merged once\n",
                 escape_to_one_line(path));
      continue;
    }
    auto digest = compare::read_report_file(path);
    if (!digest) {
      fmt::print(stderr, "sdpa-doctor: warning: {}: skipped: {}\n", escape_to_one_line(path),
                 escape_to_one_line(digest.error().message));
      fleet.skip({path, digest.error().message});
      continue;
    }
    fleet.add(*digest, std::filesystem::path(path).stem().string());
  }
  if (fleet.nodes() == 0) fmt::print(stderr, "sdpa-doctor: error: no valid report to merge\n");
  print_and_write(
      global, [&](bool unicode) { return compare::render_fleet_console(fleet, unicode); },
      [&] { return compare::render_fleet_json(fleet); },
      [&] { return compare::render_fleet_markdown(fleet); });
  return fleet.exit_code();
}

} // namespace

void setup_merge(CLI::App& app, const GlobalOptions& global, Action& action) {
  auto* sub = app.add_subcommand("merge", k_merge_help);
  auto o = std::make_shared<MergeOptions>();
  sub->add_option("reports", o->reports, "Report files (JSON from check --json), one per node")
      ->required()
      ->type_name("REPORT.json...");
  sub->add_option("--fail-on", o->fail_on,
                  "Statuses that make a node fail a cell (default: mismatch,nonfinite,error,"
                  "crash,timeout)")
      ->type_name("LIST");
  sub->callback([&action, &global, o] { action = [&global, o] { return run_merge(*o, global); }; });
}

} // namespace sdpa_doctor::cli
