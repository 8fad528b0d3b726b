#include "run/launch.hpp"

#include "core/paths.hpp"
#include "cases/cases.hpp"
#include "workers/torch_worker.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace sdpa_doctor::run {

namespace fs = std::filesystem;

namespace {

constexpr size_t k_max_socket_path = 108; // sockaddr_un::sun_path, with its terminating NUL
// The Python probe package, run as a script: Python writes no bytecode cache for a script, so
// nothing is written into the data directory (its modules are imported without one too).
constexpr const char* k_python_probe = "sdpa_probe/__main__.py";

std::optional<fs::path> locate_worker(const std::string& name, const ExecuteOptions& options) {
  if (options.worker_dir.empty()) return find_worker(name);
  const fs::path candidate = fs::path(options.worker_dir) / name;
  if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  return std::nullopt;
}

// argv of the worker of `probe`, or why it cannot start.
WorkerLaunch probe_executable(Probe probe, const ExecuteOptions& options) {
  WorkerLaunch launch;
  isolate::Command cmd;
  switch (probe) {
  case Probe::torch:
    if (!options.torch_plugin_why_not.empty()) launch.why_not = options.torch_plugin_why_not;
    else if (auto exe = locate_worker("sdpa-doctor-torch-worker", options)) cmd.argv = {exe->string()};
    else launch.why_not = "the libtorch worker sdpa-doctor-torch-worker is missing beside the doctor";
    break;
  case Probe::reference:
    if (auto exe = locate_worker("sdpa-doctor-ref-worker", options)) cmd.argv = {exe->string()};
    else launch.why_not = "the reference worker sdpa-doctor-ref-worker is missing beside the doctor";
    break;
  case Probe::python: {
    const auto script = python_probe_script();
    if (options.python.empty()) launch.why_not = options.python_reason;
    else if (!script) launch.why_not = k_no_python_probe;
    else cmd.argv = {options.python, *script};
    break;
  }
  case Probe::fault: launch.why_not = "not a probe"; break;
  }
  if (launch.why_not.empty()) launch.command = std::move(cmd);
  return launch;
}

} // namespace

WorkerLaunch worker_launch(const PlannedRun& run, const ExecuteOptions& options,
                           const std::string& probe_server) {
  WorkerLaunch launch = probe_executable(run.probe, options);
  if (!launch.command) return launch;
  auto& argv = launch.command->argv;
  argv.insert(argv.end(), {"--device", run.target, "--variant", run.variant.name()});
  if (run.mode == Mode::compiled)
    argv.insert(argv.end(), {"--mode", "compiled", "--compile", options.compile_backend});
  // The variant's flags reach the worker before it starts: torch latches them on first use.
  launch.command->env = run.variant.environment();
  if (run.verify) { // exactly the recommendation's environment
    argv.insert(argv.end(), {"--verify", run.verify->id, "--snippet", run.verify->snippet});
    launch.command->env = run.verify->environment;
    // Variables torch latches must be there before the interpreter starts: a fork of the server,
    // which started without them, would not have them. Without any, its fork is as fresh.
    if (!run.verify->environment.empty()) return launch;
  }
  if (run.probe == Probe::torch && !options.torch_plugin.empty())
    launch.command->env.emplace_back(workers::k_torch_plugin_env, options.torch_plugin);
  if (run.probe == Probe::torch && !probe_server.empty())
    launch.command->env.emplace_back(workers::k_torch_server_env, probe_server);
  if (run.probe == Probe::python && !probe_server.empty())
    launch.command->env.emplace_back("SDPA_DOCTOR_PROBE_SERVER", probe_server);
  // The GPU compiler and runtime the diagnosed torch brought come first for our kernels too
  // (unless the user named other folders: their variable reaches the worker unchanged).
  if (run.probe == Probe::reference && !options.torch_lib_dirs.empty() &&
      !std::getenv("SDPA_DOCTOR_TORCH_LIB_DIRS"))
    launch.command->env.emplace_back("SDPA_DOCTOR_TORCH_LIB_DIRS",
                                     fmt::format("{}", fmt::join(options.torch_lib_dirs, ":")));
  return launch;
}

std::optional<isolate::Command> health_check_for(const std::string& target,
                                                 const DeviceInventory& inventory) {
  if (!cases::is_gpu_target(target)) return std::nullopt;
  const int index = std::stoi(target.substr(5));
  for (const Device& d : inventory.devices)
    if (d.index == index && d.sources.count("seen_by") && d.sources.at("seen_by").count("torch"))
      return std::nullopt;
  auto exe = find_worker("sdpa-doctor-ref-worker");
  if (!exe) return std::nullopt;
  isolate::Command cmd;
  cmd.argv = {exe->string(), "--health-check", "--device", target};
  return cmd;
}

int64_t host_memory_budget() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024 / 2;
  return int64_t{4} << 30;
}

int64_t device_memory_budget(const std::string& target, const DeviceInventory& inventory) {
  if (!cases::is_gpu_target(target)) return host_memory_budget();
  const int index = std::stoi(target.substr(5));
  for (const Device& d : inventory.devices)
    if (d.index == index && d.vram_total_bytes) return *d.vram_total_bytes;
  return int64_t{1} << 40; // unknown: let the backend answer for itself
}

std::string safe_name(std::string text) {
  for (char& ch : text)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_') ch = '_';
  return text;
}

// Starts `cmd` as a server listening at `socket` and waits until it binds (before it loads what
// is slow to load: the workers that come meanwhile wait in its backlog); null when it cannot.
std::shared_ptr<isolate::Service> started_server(const isolate::Command& cmd,
                                                const std::string& socket,
                                                const std::string& log) {
  auto service = isolate::Service::start(cmd, log);
  if (!service) return nullptr;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!fs::exists(socket) && (*service)->running() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (!fs::exists(socket)) return nullptr;
  return std::move(*service);
}

ProbeServer torch_server_for(const Plan& plan, const ExecuteOptions& options) {
  ProbeServer server;
  if (!options.probe_server || options.torch_plugin.empty() ||
      std::none_of(plan.runs.begin(), plan.runs.end(),
                   [](const PlannedRun& r) { return r.probe == Probe::torch; }))
    return server;
  const WorkerLaunch launch = probe_executable(Probe::torch, options);
  const fs::path dir = options.run_dir;
  const std::string socket = (dir / "torch-server.sock").string();
  if (!launch.command || socket.size() >= k_max_socket_path) return server;
  isolate::Command cmd = *launch.command;
  cmd.argv.insert(cmd.argv.end(), {"--serve", socket});
  cmd.env.emplace_back(workers::k_torch_plugin_env, options.torch_plugin);
  server.service = started_server(cmd, socket, (dir / "torch-server.log").string());
  if (server.service) server.socket = socket;
  return server;
}

ProbeServer probe_server_for(const Plan& plan, const ExecuteOptions& options) {
  if (options.shared_probe_server.service) return options.shared_probe_server;
  if (std::none_of(plan.runs.begin(), plan.runs.end(),
                   [](const PlannedRun& r) { return r.probe == Probe::python; }))
    return {};
  return start_probe_server(options, warm_ups_for(plan, options.compile_backend));
}

ServerWarmUps warm_ups_for(const Plan& plan, const std::string& compile_backend) {
  ServerWarmUps warm_ups;
  warm_ups.backward = std::any_of(plan.cases.begin(), plan.cases.end(),
                                  [](const Case& c) { return c.backward; });
  warm_ups.causal_bias = std::any_of(plan.cases.begin(), plan.cases.end(),
                                     [](const Case& c) { return c.causal_bottom_right; });
  if (std::any_of(plan.runs.begin(), plan.runs.end(), [](const PlannedRun& r) {
        return r.probe == Probe::python && r.mode == Mode::compiled;
      }))
    warm_ups.compile_backend = compile_backend;
  return warm_ups;
}

std::optional<std::string> python_probe_script() {
  const auto data = data_dir();
  if (!data || !fs::exists(*data / k_python_probe)) return std::nullopt;
  return (*data / k_python_probe).string();
}

ProbeServer start_probe_server(const ExecuteOptions& options, const ServerWarmUps& warm_ups) {
  ProbeServer server;
  if (!options.probe_server || options.python.empty()) return server;
  const WorkerLaunch launch = probe_executable(Probe::python, options);
  const fs::path dir = options.run_dir;
  const std::string socket = (dir / "probe-server.sock").string();
  const std::string compiled_socket = (dir / "probe-server-compiled.sock").string();
  if (!launch.command || compiled_socket.size() >= k_max_socket_path)
    return server; // workers start alone
  isolate::Command cmd = *launch.command;
  cmd.argv.insert(cmd.argv.end(), {"--serve", socket});
  if (warm_ups.backward) cmd.argv.push_back("--preload-backward");
  if (warm_ups.causal_bias) cmd.argv.push_back("--preload-causal-bias");
  if (!warm_ups.compile_backend.empty())
    cmd.argv.insert(cmd.argv.end(), {"--preload-compile", warm_ups.compile_backend, compiled_socket});
  server.service = started_server(cmd, socket, (dir / "probe-server.log").string());
  if (!server.service) return server;
  server.socket = socket;
  if (!warm_ups.compile_backend.empty()) server.compiled_socket = compiled_socket;
  return server;
}

} // namespace sdpa_doctor::run
