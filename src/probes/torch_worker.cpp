// sdpa-doctor-torch-worker: runs SDPA cases through LibTorch and reports them on the results fd.
#include "probes/torch_worker.hpp"

int main(int argc, char** argv) {
  using namespace sdpa_doctor::probes;
  return worker_main(argc, argv, make_torch_executor, WorkerOptions{.honour_test_fault = true});
}
