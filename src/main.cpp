#include "cli/cli.hpp"

int main(int argc, char** argv) { return sdpa_doctor::run_cli(argc, argv); }
