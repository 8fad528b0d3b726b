// run/journal: what a run leaves as it goes. The journal (journal.jsonl in the run directory, one
// line an event with `t_ms` since the start), appended the moment each event is known; the
// progress line; the runner observer that feeds both. It is the run's durable record: `start`
// carries the plan (run::to_json(Plan)) and a header opaque to run (check/journal_header.hpp),
// each cell's final `result` is the report's own result JSON (core/model_json), `worker` and
// `finding` events carry the rest; after the run check appends `shrinks` and `verified-advice`,
// which a new `start` clears. read_journal reads it back (the last word on a cell wins, a torn
// last line is ignored): all that `report JOURNAL` and `check --resume` (which appends to it)
// need. Under --redact every string it keeps has the host and user names replaced
// (ExecuteOptions::journal_redactions). Internal to run.
#pragma once

#include "core/model.hpp"
#include "isolate/isolate.hpp"
#include "run/run.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <condition_variable>
#include <thread>
#include <cstddef>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace sdpa_doctor::run {

// One JSON object a line, each written with one write(2): a doctor killed with SIGKILL still
// leaves every event it had. Thread-safe.
class Journal {
public:
  using Redactions = std::vector<std::pair<std::string, std::string>>;
  // A new journal at `path` (an old one there is replaced), or, with `append`, the one there
  // continued (`check --resume`). Every string of every event has `redactions` applied.
  Journal(const std::string& path, Redactions redactions, bool append);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Adds "v" and "t_ms" (since the journal opened) and appends the line. After a failed write
  // (a full disk) nothing more is written; failure() says why.
  void append(nlohmann::json event);
  // Why the journal could not be opened or written, naming its file system; empty when it could.
  std::string failure() const;

private:
  std::string m_path;
  Redactions m_redactions;
  std::string m_failure;
  int m_fd = -1;
  mutable std::mutex m_mutex;
  std::chrono::steady_clock::time_point m_start = std::chrono::steady_clock::now();
};

// Progress on stderr. On a terminal: one live line (cells done/total, where, eta) cut to the
// terminal's width, redrawn on every event and each second. Elsewhere (a CI log, or a terminal
// with TERM=dumb, which takes no escape sequence): a plain line every `interval`, so a long run
// shows life without flooding the log. Both say how far the oracle is while it runs ahead.
class Progress {
public:
  Progress(ProgressMode mode, std::size_t total, std::chrono::milliseconds interval);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  void update(const std::string& where, const std::string& case_id, bool finished);
  void oracle(std::size_t done, std::size_t total);
  void clear(); // stops the ticker; the terminal line is erased

private:
  std::string line_locked() const;
  void draw_locked();
  void tick();

  ProgressMode m_mode;
  std::size_t m_total;
  std::chrono::milliseconds m_interval;
  std::string m_dot; // " · ", or " | " where the locale is not UTF-8
  std::size_t m_done = 0;
  std::size_t m_oracle_done = 0, m_oracle_total = 0;
  std::string m_where;
  std::chrono::steady_clock::time_point m_start = std::chrono::steady_clock::now();
  std::mutex m_mutex;
  std::condition_variable m_wake;
  bool m_stop = false;
  std::thread m_ticker;
};

// Which worker a journal line is about.
struct RunContext {
  std::string target;
  Probe probe;
  std::string variant;
  Mode mode = Mode::eager;
};

// Journals and shows the runner's events of one worker.
class RunJournal : public isolate::RunObserver {
public:
  RunJournal(Journal& journal, Progress& progress, RunContext context);
  void on_begin(const std::string& case_id) override;
  void on_outcome(const isolate::CaseOutcome& outcome) override;
  // A case decided before any worker ran it (skipped, or its probe is unavailable).
  void on_unrun(const CaseResult& r);
  // The cell's final result, whole: what `report JOURNAL` and `check --resume` read back.
  void on_result(const CaseResult& r);

private:
  nlohmann::json base(const char* event, const std::string& case_id) const;
  Journal& m_journal;
  Progress& m_progress;
  RunContext m_context;
  std::string m_where;
};

} // namespace sdpa_doctor::run
