// `sdpa-doctor report JOURNAL`: a check's reports rebuilt from its journal (check/rebuild.cpp).
// Exit codes: those the check would have returned; an unfinished journal reads as an
// interrupted run (130), with the remedy to resume it.
#include "check/check.hpp"
#include "cli/commands.hpp"

#include <filesystem>
#include <memory>

namespace sdpa_doctor::cli {

void setup_report(CLI::App& app, const GlobalOptions& global, Action& action) {
  auto path = std::make_shared<std::string>();
  auto* sub = app.add_subcommand(
      "report", "Rebuild a check's reports from its journal (a run that was killed included)");
  sub->add_option("JOURNAL", *path, "The run's journal.jsonl, or the run directory holding it")
      ->required();
  sub->callback([&action, &global, path] {
    action = [&global, path] {
      std::error_code ec;
      refuse_output_over(global,
                         std::filesystem::is_directory(*path, ec)
                             ? (std::filesystem::path(*path) / "journal.jsonl").string()
                             : *path,
                         "the journal the report is rebuilt from");
      return check::rebuild_report(*path, check_outputs(global));
    };
  });
}

} // namespace sdpa_doctor::cli
