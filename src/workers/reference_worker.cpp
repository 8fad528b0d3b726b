// sdpa-doctor-ref-worker: runs cases through our own ref-math / ref-flash kernels (CPU or GPU) and
// reports them on the results fd; `--health-check --device cuda:N` probes a device after a crash.
#include "workers/reference_worker.hpp"

int main(int argc, char** argv) {
  using namespace sdpa_doctor::workers;
  if (is_health_check(argc, argv)) return run_health_check(argc, argv);
  // The fault switch reaches our own kernels too: a failure of theirs must be reported as ours.
  return worker_main(argc, argv, make_reference_executor, WorkerOptions{.honour_test_fault = true, .started = {}});
}
