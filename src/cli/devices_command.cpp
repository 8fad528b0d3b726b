#include "cli/commands.hpp"

namespace sdpa_doctor::cli {

void setup_devices(CLI::App& app, const GlobalOptions&, Action& action) {
  auto* sub = app.add_subcommand("devices", "devices (not implemented in this build yet)");
  sub->callback([&action] { action = [] { return not_implemented("'devices'"); }; });
}

} // namespace sdpa_doctor::cli
