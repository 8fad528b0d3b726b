#include "run/journal.hpp"

#include "core/io.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace sdpa_doctor::run {

Journal::Journal(const std::string& path) {
  m_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (m_fd < 0) spdlog::warn("cannot open the journal {}: {}", path, std::strerror(errno));
}

Journal::~Journal() {
  if (m_fd >= 0) ::close(m_fd);
}

void Journal::append(nlohmann::json event) {
  if (m_fd < 0) return;
  event["v"] = 1;
  event["t_ms"] = ms_since(m_start); // lets a reader time spawn, import and each case
  std::string line = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  std::lock_guard lock(m_mutex);
  write_all(m_fd, line);
}

void Progress::update(const std::string& where, const std::string& case_id, bool finished) {
  if (!m_enabled) return;
  std::lock_guard lock(m_mutex);
  if (finished) ++m_done;
  const double s = ms_since(m_start) / 1000;
  std::string line = fmt::format("[{:>5.1f}s] {}/{} {} {}", s, m_done, m_total, where, case_id);
  if (line.size() > 99) line.resize(99);
  fmt::print(stderr, "\r\033[K{}", line);
  std::fflush(stderr);
}

void Progress::clear() {
  if (!m_enabled) return;
  std::lock_guard lock(m_mutex);
  fmt::print(stderr, "\r\033[K");
  std::fflush(stderr);
}

RunJournal::RunJournal(Journal& journal, Progress& progress, RunContext context)
    : m_journal(journal), m_progress(progress), m_context(std::move(context)),
      m_where(fmt::format("{} {}/{}", m_context.target, to_string(m_context.probe),
                          m_context.variant)) {}

void RunJournal::on_begin(const std::string& case_id) {
  m_journal.append(base("begin", case_id));
  m_progress.update(m_where, case_id, false);
}

void RunJournal::on_outcome(const isolate::CaseOutcome& outcome) {
  nlohmann::json e = base("outcome", outcome.case_id);
  e["status"] = to_string(outcome.status);
  e["reason"] = outcome.reason;
  e["attempt"] = outcome.attempt;
  e["elapsed_ms"] = outcome.elapsed_ms;
  if (outcome.result) e["result"] = *outcome.result;
  if (!outcome.signatures.empty()) e["signatures"] = outcome.signatures;
  if (outcome.process_end) e["process_end"] = isolate::describe(*outcome.process_end);
  m_journal.append(std::move(e));
  m_progress.update(m_where, outcome.case_id, true);
}

void RunJournal::on_unrun(const CaseResult& r) {
  nlohmann::json e = base("outcome", r.case_id);
  e["status"] = to_string(r.status);
  e["reason"] = r.reason;
  m_journal.append(std::move(e));
  m_progress.update(m_where, r.case_id, true);
}

nlohmann::json RunJournal::base(const char* event, const std::string& case_id) const {
  return {{"event", event},
          {"target", m_context.target},
          {"probe", to_string(m_context.probe)},
          {"variant", m_context.variant},
          {"case", case_id}};
}

} // namespace sdpa_doctor::run
