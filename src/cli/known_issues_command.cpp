#include "cli/commands.hpp"

namespace sdpa_doctor::cli {

void setup_known_issues(CLI::App& app, const GlobalOptions&, Action& action) {
  auto* sub = app.add_subcommand("known-issues", "known-issues (not implemented in this build yet)");
  sub->callback([&action] { action = [] { return not_implemented("'known-issues'"); }; });
}

} // namespace sdpa_doctor::cli
