#include "cli/commands.hpp"

#include "isolate/isolate.hpp"

#include <memory>

namespace sdpa_doctor::cli {

namespace {
struct FaultWorkerOptions {
  int results_fd = -1;
  std::string cases;
};
} // namespace

// Hidden worker modes of the doctor's own binary are registered here (group "" = not listed).
void setup_workers(CLI::App& app, const GlobalOptions&, Action& action) {
  auto options = std::make_shared<FaultWorkerOptions>();
  auto* fault = app.add_subcommand("__fault-worker",
                                   "Fault-injection worker for self-test (protocol v1)");
  fault->group("");
  fault->add_option("--results-fd", options->results_fd, "fd for protocol events")->required();
  fault->add_option("--cases", options->cases, "file of case lines")->required();
  fault->callback([options, &action] {
    action = [options] { return isolate::run_fault_worker(options->results_fd, options->cases); };
  });
}

} // namespace sdpa_doctor::cli
