#include "advice/advice.hpp"
#include "cli/commands.hpp"
#include "core/expected.hpp"
#include "core/status.hpp"
#include "devices/devices.hpp"
#include "report/inventory.hpp"
#include "report/report.hpp"
#include "run/run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <unistd.h>

namespace sdpa_doctor::cli {

namespace {

namespace fs = std::filesystem;

struct DevicesOptions {
  std::string sysfs_root; // empty = the live system
  std::string dev_root;   // empty = /dev on a live system, not checked with --sysfs-root
  bool require_gpu = false;
  bool no_hip = false;
  bool no_smi = false;
  bool no_nvidia = false;
  std::string python; // whose torch's own libraries are searched first; empty = the default choice
  double timeout_s = 20;
};

void require_directory(const std::string& path, const char* option) {
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    throw Fatal{fmt::format("{} '{}' is not a directory", option, path), exit_code::usage};
}

int run_devices(const DevicesOptions& options, const GlobalOptions& global) {
  devices::EnumerateOptions enumerate;
  if (!options.sysfs_root.empty()) {
    require_directory(options.sysfs_root, "--sysfs-root");
    enumerate.sysfs_root = options.sysfs_root;
    enumerate.dev_root.clear();
    enumerate.use_hip = false;
    enumerate.use_smi = false;
    enumerate.use_cuda = false;
    enumerate.use_nvml = false;
  }
  if (!options.dev_root.empty()) {
    require_directory(options.dev_root, "--dev-root");
    enumerate.dev_root = options.dev_root;
  }
  if (options.no_hip) enumerate.use_hip = false;
  if (options.no_smi) enumerate.use_smi = false;
  if (options.no_nvidia) enumerate.use_cuda = enumerate.use_nvml = false;
  if (options.timeout_s <= 0) throw Fatal{"--timeout must be positive", exit_code::usage};
  // The HIP runtime the diagnosed torch carries is the one to ask, and what it was built for
  // decides the advice: found and read, not imported (fast).
  std::string python_path;
  if (enumerate.use_hip || enumerate.use_smi || enumerate.use_cuda || enumerate.use_nvml) {
    auto python = run::locate_python(options.python, enumerate.deadline);
    if (!python) throw Fatal{python.error().message, exit_code::usage};
    enumerate.torch_lib_dirs = python->torch_lib_dirs;
    python_path = python->path;
  }
  enumerate.deadline = std::chrono::milliseconds(static_cast<int64_t>(options.timeout_s * 1000));

  DeviceInventory inventory = devices::enumerate_devices(enumerate);
  // Each GPU's verdict: is the torch under test built for it? Asked of torch only where a GPU is.
  if (!python_path.empty() &&
      std::any_of(inventory.devices.begin(), inventory.devices.end(),
                  [](const Device& d) { return is_amd_gpu(d) || is_nvidia_gpu(d); })) {
    const auto facts = devices::torch_arch_facts(python_path, enumerate.deadline);
    const auto version = facts.find("torch");
    const std::string source =
        version == facts.end() ? std::string() : "python torch " + version->second;
    const auto override_env = enumerate.environment.find("HSA_OVERRIDE_GFX_VERSION");
    for (Device& d : inventory.devices) {
      if (is_nvidia_gpu(d))
        d.gfx = advice::sm_truth(d, facts, source);
      else if (is_amd_gpu(d))
        d.gfx = advice::gfx_truth(d, facts, source,
                                  override_env == enumerate.environment.end()
                                      ? std::string()
                                      : override_env->second);
    }
  }

  const bool json_to_stdout = global.json_path == "-";
  report::InventoryConsoleOptions console;
  console.color = global.color_mode() == ColorMode::always && !json_to_stdout;
  const std::string text = report::render_inventory_console(inventory, console);
  // stdout carries the JSON alone with `--json -`; the human view then goes to stderr unless -q.
  if (json_to_stdout && !global.quiet) std::fputs(text.c_str(), stderr);
  if (!json_to_stdout) std::fputs(text.c_str(), stdout);
  if (!global.json_path.empty()) {
    auto written = report::write_atomically(global.json_path, report::render_inventory_json(inventory));
    if (!written) throw Fatal{written.error().message, exit_code::internal};
  }
  if (inventory.devices.empty() && options.require_gpu) {
    std::fprintf(stderr, "sdpa-doctor: no GPU found and --require-gpu was given\n");
    return exit_code::no_gpu;
  }
  return exit_code::ok;
}

} // namespace

void setup_devices(CLI::App& app, const GlobalOptions& global, Action& action) {
  auto options = std::make_shared<DevicesOptions>();
  auto* sub = app.add_subcommand(
      "devices",
      "List AMD GPUs (HIP, AMD SMI / ROCm SMI, sysfs) and NVIDIA GPUs (CUDA driver, NVML), say "
      "what the torch under test was built for, and check device nodes, groups and the "
      "environment variables that change what PyTorch sees");
  sub->add_option("--sysfs-root", options->sysfs_root,
                  "Read sys/ and proc/ under DIR instead of / (a captured tree, for bug reports "
                  "and tests); HIP, AMD/ROCm SMI, the CUDA driver, NVML and /dev are then not "
                  "asked")
      ->type_name("DIR");
  sub->add_option("--dev-root", options->dev_root,
                  "Check kfd and dri/renderD* under DIR instead of /dev (for tests)")
      ->type_name("DIR");
  sub->add_flag("--require-gpu", options->require_gpu, "Exit 3 when no GPU is found");
  sub->add_flag("--no-hip", options->no_hip, "Do not ask the HIP runtime");
  sub->add_flag("--no-smi,--no-rocm-smi", options->no_smi, "Do not ask AMD SMI / ROCm SMI");
  sub->add_flag("--no-nvidia", options->no_nvidia, "Do not ask the CUDA driver or NVML");
  sub->add_option("--python", options->python,
                  "Interpreter whose torch's own HIP runtime is looked for first (default: the "
                  "first python3 that finds torch)")
      ->type_name("PATH");
  sub->add_option("--timeout", options->timeout_s,
                  "Seconds to wait for the HIP runtime / SMI child before killing it")
      ->check(positive_seconds())
      ->default_val(20);
  sub->callback([&action, &global, options] {
    action = [&global, options] { return run_devices(*options, global); };
  });
}

} // namespace sdpa_doctor::cli
