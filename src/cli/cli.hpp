// cli: the command line. Parses argv, builds each subcommand's options, calls the parts and
// returns the exit code. The only part that sees argv; everything else gets plain structs. Each
// subcommand declares its flags and calls one function (commands.hpp; `check` calls
// check::parse_request then check::run_check). May include every room; none includes it.
#pragma once

namespace sdpa_doctor {

// Never throws; returns the process exit code (see `sdpa-doctor --help`).
int run_cli(int argc, char** argv);

} // namespace sdpa_doctor
