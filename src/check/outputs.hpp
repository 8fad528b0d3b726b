// check/outputs: where a check's reports go, checked before anything runs, and written once it
// ended (the console table, JSON, Markdown, JUnit).
#pragma once

#include "core/model.hpp"

#include <string>

namespace sdpa_doctor::check {

struct Outputs {
  std::string json_path;     // "-": stdout
  std::string markdown_path; // "-": stdout
  std::string junit_path;    // "-": stdout
  bool redact = false;       // no hostname or user in reports or the journal
  bool color = false;        // the console table in colour
  bool quiet = false;        // -q: no progress lines either
  // A report goes to stdout: it is then all that stdout carries (no console table).
  bool report_on_stdout() const;
};

// Each report's path can be written: the folder exists and takes a new file (a report is written
// beside its path, then renamed), or the path is a device that opens for writing. Fatal (exit 2)
// naming the flag otherwise: a bad path costs nothing.
void check_outputs_writable(const Outputs& outputs);

// Redacts when asked, prints the console report (unless a report goes to stdout) and the
// journal's path, then writes every report asked for, even after one failed: the others still
// carry the diagnosis. False when one was not written (each said in one line on stderr).
bool present_and_write(Report report, const Outputs& outputs, const std::string& journal);

} // namespace sdpa_doctor::check
