// workers/torch_worker: the libtorch probe's executor, created for one (device, variant). It runs
// LibTorch through the plugin of torch_plugin/ (the one translation unit that includes torch),
// opened with dlopen: this header and the worker include nothing of torch.
// Depends on workers/worker.hpp only.
#pragma once

#include "workers/worker.hpp"

#include <memory>
#include <string>
#include <string_view>

namespace sdpa_doctor::workers {

// The plugin a worker loads, when the doctor chose one (built for the torch under test).
inline constexpr const char* k_torch_plugin_env = "SDPA_DOCTOR_TORCH_PLUGIN";

// How the reason of every case opens when the worker could not use its plugin (it did not load,
// is not this doctor's, or could not start torch): the doctor blames the plugin, not a backend.
inline constexpr std::string_view k_plugin_unusable = "the LibTorch plugin cannot be used: ";

// $SDPA_DOCTOR_TORCH_PLUGIN, else the plugin built with this worker (core built_in_torch_plugin);
// empty when there is none.
std::string torch_plugin_path();

std::unique_ptr<CaseExecutor> make_torch_executor(const WorkerArgs& args);

// The socket of the libtorch workers' start-up server (workers/fork_server.hpp), which has loaded
// the plugin once: a worker started with it set is forked from there.
inline constexpr const char* k_torch_server_env = "SDPA_DOCTOR_TORCH_SERVER";

// Loads the plugin into this process (the start-up server's preparation) without starting torch
// on any device; empty on success, else why not.
std::string preload_torch_plugin();

} // namespace sdpa_doctor::workers
