// sdpa-doctor-torch-worker: runs SDPA cases through LibTorch and reports them on the results fd.
#include "workers/torch_worker.hpp"

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  using namespace sdpa_doctor::workers;
  const int code =
      worker_main(argc, argv, make_torch_executor, WorkerOptions{.honour_test_fault = true});
  // Every event is written and `bye` sent: LibTorch's static teardown (thread pools, allocator
  // caches, device handles) would only delay the exit the runner waits for.
#ifdef __SANITIZE_ADDRESS__
  return code; // LeakSanitizer checks at a normal exit
#else
  std::fflush(nullptr);
  std::_Exit(code);
#endif
}
