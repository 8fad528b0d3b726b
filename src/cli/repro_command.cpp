#include "cli/commands.hpp"

namespace sdpa_doctor::cli {

void setup_repro(CLI::App& app, const GlobalOptions&, Action& action) {
  auto* sub = app.add_subcommand("repro", "repro (not implemented in this build yet)");
  sub->callback([&action] { action = [] { return not_implemented("'repro'"); }; });
}

} // namespace sdpa_doctor::cli
