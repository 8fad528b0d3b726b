#include "cli/commands.hpp"
#include "core/build_info.hpp"
#include "core/status.hpp"

#include <fmt/format.h>

namespace sdpa_doctor::cli {

namespace {
// The plugin built with the doctor serves that torch; any other gets one built on first use.
std::string libtorch_plugin(const char* version) {
  return *version ? fmt::format("plugin for torch {} (others: built on first use)", version)
                  : std::string("plugin built on first use for the torch under test");
}
} // namespace

int print_version() {
  namespace bi = build_info;
  fmt::print("sdpa-doctor {} (git {}, {}, {})\n", bi::k_version, bi::k_git_revision,
             bi::k_build_type, bi::k_compiler);
  // Nothing of ROCm is built in: the workers open it where the diagnosed torch finds its own.
  fmt::print("  HIP runtime   opened at run time (`sdpa-doctor devices` says which)\n");
  fmt::print("  AMD/ROCm SMI  opened at run time\n");
  fmt::print("  LibTorch      {}\n", libtorch_plugin(bi::k_torch_version));
  fmt::print("  fmt           {}\n", bi::k_fmt_version);
  fmt::print("  spdlog        {}\n", bi::k_spdlog_version);
  fmt::print("  CLI11         {}\n", bi::k_cli11_version);
  fmt::print("  nlohmann-json {}\n", bi::k_nlohmann_json_version);
  return exit_code::ok;
}

void setup_version(CLI::App& app, const GlobalOptions&, Action& action) {
  auto* sub = app.add_subcommand("version", "Print the version of sdpa-doctor and its dependencies");
  sub->callback([&action] { action = [] { return print_version(); }; });
}

} // namespace sdpa_doctor::cli
