#include "check/exit_code.hpp"

#include "core/status.hpp"

#include <csignal>

namespace sdpa_doctor::check {

int exit_code_for(const ExitFacts& f) {
  if (f.report_unwritten) return exit_code::internal;
  if (f.interrupt_signal == SIGTERM) return exit_code::interrupted_term;
  if (f.interrupt_signal == SIGHUP) return exit_code::interrupted_hup;
  if (f.interrupt_signal != 0) return exit_code::interrupted_int;
  if (f.run_dir_unwritable) return exit_code::internal;
  if (f.named_python_unusable) return exit_code::usage;
  if (f.missing_required_gpu) return exit_code::no_gpu;
  if (f.failed_cells) return exit_code::failures;
  return exit_code::ok;
}

} // namespace sdpa_doctor::check
