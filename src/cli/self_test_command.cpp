#include "cli/commands.hpp"

namespace sdpa_doctor::cli {

void setup_self_test(CLI::App& app, const GlobalOptions&, Action& action) {
  auto* sub = app.add_subcommand("self-test", "self-test (not implemented in this build yet)");
  sub->callback([&action] { action = [] { return not_implemented("'self-test'"); }; });
}

} // namespace sdpa_doctor::cli
