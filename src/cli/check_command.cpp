#include "cli/commands.hpp"

namespace sdpa_doctor::cli {

void setup_check(CLI::App& app, const GlobalOptions&, Action& action) {
  auto* sub = app.add_subcommand("check", "check (not implemented in this build yet)");
  sub->callback([&action] { action = [] { return not_implemented("'check'"); }; });
}

Action default_check(const GlobalOptions&) {
  return [] { return not_implemented("'check'"); };
}

} // namespace sdpa_doctor::cli
