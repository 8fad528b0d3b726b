// workers/fork_server: a start-up server for a C++ worker whose libraries take long to load (the
// LibTorch plugin: 0.2 s of dlopen, most of it torch registering its operators). The server loads
// them once and forks a fresh child per worker; the worker the runner spawned hands over its
// standard streams, results fd, argv, environment and directory, waits, and ends the way the child
// did (its code, or its signal), so the runner's isolation, deadlines and crash attribution are
// unchanged. The protocol is the Python probe's server's (sdpa_probe/server.py): one JSON line and
// four descriptors, answered by "forked PID", then "exit N" or "signal N". Where the server cannot
// be reached, the worker runs itself.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace sdpa_doctor::workers {

// How a forked worker says it was started (the hello's "started" fact), as the Python probe does.
inline constexpr const char* k_forked_by_server = "forked by the start-up server";
// The exit code of a worker whose server died while its child ran.
inline constexpr int k_lost_server_exit = 70;

// A worker's end once every event is written: its libraries' static teardown (LibTorch's thread
// pools, allocator caches, device handles) would only delay the exit the runner waits for.
[[noreturn]] void end_worker(int code);

// Loads what the children share; empty on success, else why the server cannot serve.
using ServerPreparation = std::function<std::string()>;
// The worker's main in a forked child: argv as the spawned worker had it; returns its exit code.
using ForkedMain = std::function<int(int argc, char** argv)>;

// Binds `socket_path` (before `prepare`, so early workers wait in the backlog), prepares, and
// serves until the doctor kills the process group. Returns 1 (and removes the socket) when it
// cannot serve: `prepare` failed, or a thread is alive after it (a fork would copy one thread,
// and a lock another holds could stay held in the child forever).
int serve_forks(const std::string& socket_path, const ServerPreparation& prepare,
                const ForkedMain& run);

// In the worker the runner spawned: the exit code of the server's child that ran it, nullopt when
// no server took it (then it runs itself). A child killed by a signal is mirrored: this process
// raises the same signal.
std::optional<int> run_through_fork_server(const std::string& socket_path, int argc,
                                           const char* const* argv, int results_fd);

} // namespace sdpa_doctor::workers
