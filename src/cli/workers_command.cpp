#include "cli/commands.hpp"

namespace sdpa_doctor::cli {

// Hidden worker modes of the doctor's own binary are registered here (group "" = not listed).
void setup_workers(CLI::App&, const GlobalOptions&, Action&) {}

} // namespace sdpa_doctor::cli
