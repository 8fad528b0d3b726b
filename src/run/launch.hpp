// run/launch: how each worker is started (argv, environment), how a GPU's health is checked after
// a crash, and how much memory a case may take on a target. Internal to run.
#pragma once

#include "core/model.hpp"
#include "isolate/isolate.hpp"
#include "run/run.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace sdpa_doctor::run {

struct WorkerLaunch {
  std::optional<isolate::Command> command;
  std::string why_not; // set when command is empty
};

// The command of the worker for `run`, or why it cannot be started on this install.
// `probe_server`: the socket of the start-up server of the run's probe (Python, or libtorch),
// empty when none runs.
WorkerLaunch worker_launch(const PlannedRun& run, const ExecuteOptions& options,
                           const std::string& probe_server = {});

// The Python probe's entry script in the doctor's data directory, nullopt when it is missing.
std::optional<std::string> python_probe_script();
inline constexpr const char* k_no_python_probe =
    "the Python probe sdpa_probe is missing from the doctor's data directory";

// The start-up server for a plan's run: the caller's (ExecuteOptions::shared_probe_server), else
// one of its own when the plan has a Python worker; null otherwise.
ProbeServer probe_server_for(const Plan& plan, const ExecuteOptions& options);

// The libtorch workers' start-up server (sdpa-doctor-torch-worker --serve: the plugin loaded once,
// a child forked per worker) where the plan has libtorch runs and a plugin; null otherwise.
ProbeServer torch_server_for(const Plan& plan, const ExecuteOptions& options);

// The reference worker's device health check for a GPU target the HIP runtime enumerated;
// nullopt on the CPU and for a GPU only torch sees (the canary after each case speaks for it).
std::optional<isolate::Command> health_check_for(const std::string& target,
                                                 const DeviceInventory& inventory);

// Bytes the host can give a case: half of what the kernel says is available, so the doctor,
// the worker and the oracle copies fit beside each other.
int64_t host_memory_budget();

// The host budget on the CPU, the device's VRAM on a GPU (or unbounded when unknown).
int64_t device_memory_budget(const std::string& target, const DeviceInventory& inventory);

// `text` with every byte but [A-Za-z0-9_-] replaced by '_', for file names.
std::string safe_name(std::string text);

} // namespace sdpa_doctor::run
