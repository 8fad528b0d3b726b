// check/exit_code: the one place that decides what a check (and `report JOURNAL`) exits with.
// Pure: everything it weighs is in ExitFacts.
#pragma once

namespace sdpa_doctor::check {

struct ExitFacts {
  bool failed_cells = false;          // a cell, or a re-run of the advice, ended in a --fail-on status
  bool missing_required_gpu = false;  // --require-gpu and no GPU found
  int interrupt_signal = 0;           // SIGHUP, SIGINT or SIGTERM that cut the run short; 0: none
  bool named_python_unusable = false; // the --python the user named cannot run the probe
  bool run_dir_unwritable = false;    // the run's journal could not be written (a full disk)
  bool report_unwritten = false;      // a report asked for could not be written
};

// From the weightiest fact down: a report not written (4: what was measured must not look
// delivered), an interrupt (129 / 130 / 143), a run directory not written (4), a bad --python (2),
// no GPU where one was required (3), failing cells (1), else 0.
int exit_code_for(const ExitFacts& facts);

} // namespace sdpa_doctor::check
