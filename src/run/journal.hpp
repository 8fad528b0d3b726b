// run/journal: what a run leaves as it goes. The journal (journal.jsonl in the run directory),
// appended the moment each event is known; the progress line; the runner observer that feeds
// both. Internal to run.
#pragma once

#include "core/model.hpp"
#include "isolate/isolate.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>

namespace sdpa_doctor::run {

// One JSON object a line, each written with one write(2): a doctor killed with SIGKILL still
// leaves every event it had. Thread-safe.
class Journal {
public:
  explicit Journal(const std::string& path);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Adds "v" and "t_ms" (since the journal opened) and appends the line.
  void append(nlohmann::json event);

private:
  int m_fd = -1;
  std::mutex m_mutex;
  std::chrono::steady_clock::time_point m_start = std::chrono::steady_clock::now();
};

// The live progress line (stderr, terminals only): target, variant, case i/N, elapsed.
class Progress {
public:
  Progress(bool enabled, std::size_t total) : m_enabled(enabled), m_total(total) {}
  void update(const std::string& where, const std::string& case_id, bool finished);
  void clear();

private:
  bool m_enabled;
  std::size_t m_total;
  std::size_t m_done = 0;
  std::chrono::steady_clock::time_point m_start = std::chrono::steady_clock::now();
  std::mutex m_mutex;
};

// Which worker a journal line is about.
struct RunContext {
  std::string target;
  Probe probe;
  std::string variant;
};

// Journals and shows the runner's events of one worker.
class RunJournal : public isolate::RunObserver {
public:
  RunJournal(Journal& journal, Progress& progress, RunContext context);
  void on_begin(const std::string& case_id) override;
  void on_outcome(const isolate::CaseOutcome& outcome) override;
  // A case decided before any worker ran it (skipped, or its probe is unavailable).
  void on_unrun(const CaseResult& r);

private:
  nlohmann::json base(const char* event, const std::string& case_id) const;
  Journal& m_journal;
  Progress& m_progress;
  RunContext m_context;
  std::string m_where;
};

} // namespace sdpa_doctor::run
