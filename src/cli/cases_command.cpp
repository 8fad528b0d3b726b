#include "cli/commands.hpp"

namespace sdpa_doctor::cli {

void setup_cases(CLI::App& app, const GlobalOptions&, Action& action) {
  auto* sub = app.add_subcommand("cases", "cases (not implemented in this build yet)");
  sub->callback([&action] { action = [] { return not_implemented("'cases'"); }; });
}

} // namespace sdpa_doctor::cli
