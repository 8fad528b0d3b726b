// cli: the command line. Parses argv, builds each subcommand's options, calls the parts and
// returns the exit code. The only part that sees argv; everything else gets plain structs.
#pragma once

namespace sdpa_doctor {

// Never throws; returns the process exit code (see `sdpa-doctor --help`).
int run_cli(int argc, char** argv);

} // namespace sdpa_doctor
