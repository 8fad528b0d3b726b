// sdpa-doctor-torch-worker: runs SDPA cases through LibTorch and reports them on the results fd.
// `--serve SOCKET`: the libtorch workers' start-up server (workers/fork_server.hpp), which loads
// the plugin once; a worker started with $SDPA_DOCTOR_TORCH_SERVER is forked from it.
#include "workers/fork_server.hpp"
#include "workers/torch_worker.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

using namespace sdpa_doctor::workers;

int run_worker(int argc, const char* const* argv, std::string started) {
  return worker_main(argc, argv, make_torch_executor,
                     WorkerOptions{.honour_test_fault = true, .started = std::move(started)});
}

} // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string_view(argv[1]) == "--serve")
    return serve_forks(argv[2], preload_torch_plugin,
                       [](int n, char** args) { return run_worker(n, args, k_forked_by_server); });
  if (const char* server = std::getenv(k_torch_server_env); server && *server) {
    const std::string socket = server;
    ::unsetenv(k_torch_server_env); // the child is a worker, not another client
    if (const auto args = parse_worker_args(argc, argv))
      if (const auto code = run_through_fork_server(socket, argc, argv, args->results_fd))
        end_worker(*code);
  }
  end_worker(run_worker(argc, argv, {}));
}
