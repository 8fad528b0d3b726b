#include "run/journal.hpp"

#include "core/io.hpp"
#include "core/model_json.hpp"
#include "core/text.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <vector>
#include <fcntl.h>
#include <unistd.h>

namespace sdpa_doctor::run {

namespace {

// Every string in `j` (keys aside) with the redactions applied.
void redact_strings(nlohmann::json& j, const Journal::Redactions& redactions) {
  if (j.is_string()) {
    replace_words(j.get_ref<std::string&>(), redactions);
  } else if (j.is_structured()) {
    for (auto& item : j) redact_strings(item, redactions);
  }
}

} // namespace

Journal::Journal(const std::string& path, Redactions redactions, bool append)
    : m_path(path), m_redactions(std::move(redactions)) {
  // A new run's journal holds that run alone: `report` reads the first start's plan.
  m_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (append ? 0 : O_TRUNC),
                0644);
  if (m_fd < 0) m_failure = "cannot open the journal " + describe_write_failure(path, errno);
}

Journal::~Journal() {
  if (m_fd >= 0) ::close(m_fd);
}

void Journal::append(nlohmann::json event) {
  event["v"] = 1;
  event["t_ms"] = ms_since(m_start); // lets a reader time spawn, import and each case
  if (!m_redactions.empty()) redact_strings(event, m_redactions);
  std::string line = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  std::lock_guard lock(m_mutex);
  if (m_fd < 0 || !m_failure.empty()) return;
  if (!write_own_file(m_fd, line, m_path))
    m_failure = "cannot write the journal " + describe_write_failure(m_path, errno);
}

std::string Journal::failure() const {
  std::lock_guard lock(m_mutex);
  return m_failure;
}

Progress::Progress(ProgressMode mode, std::size_t total, std::chrono::milliseconds interval)
    : m_mode(mode), m_total(total), m_interval(interval), m_dot(utf8_locale() ? " · " : " | ") {
  if (m_mode == ProgressMode::none) return;
  // A dumb terminal takes no escape sequence: it gets the log's plain lines instead.
  if (m_mode == ProgressMode::terminal && dumb_terminal()) m_mode = ProgressMode::log;
  if (m_mode == ProgressMode::terminal) m_interval = std::chrono::seconds(1);
  if (m_interval.count() <= 0) m_interval = std::chrono::seconds(10);
  m_ticker = std::thread([this] { tick(); });
}

Progress::~Progress() { clear(); }

// "[12s] 180/432 cells, eta 20s · oracle 30/36 · cpu python/math fp16-..."
std::string Progress::line_locked() const {
  const double s = ms_since(m_start) / 1000;
  std::string line = fmt::format("[{:.0f}s] {}/{} cells", s, m_done, m_total);
  if (m_done > 0 && m_done < m_total)
    line += fmt::format(", eta {:.0f}s", s / double(m_done) * double(m_total - m_done));
  if (m_oracle_total && m_oracle_done < m_oracle_total)
    line += fmt::format("{}oracle {}/{}", m_dot, m_oracle_done, m_oracle_total);
  if (!m_where.empty()) line += m_dot + m_where;
  return line;
}

void Progress::draw_locked() {
  std::string line = line_locked();
  if (m_mode == ProgressMode::terminal) {
    // One column short of the width: a line that reaches the last column wraps on some
    // terminals, and "\r\033[K" then clears only its second row. Asked at each draw, so a
    // resized window is followed.
    const int columns = terminal_columns(STDERR_FILENO);
    const size_t fit = columns > 1 ? size_t(columns - 1) : 79;
    fmt::print(stderr, "\r\033[K{}", fit_to_width(line, fit));
  } else {
    fmt::print(stderr, "{}\n", line);
  }
  std::fflush(stderr);
}

void Progress::tick() {
  std::unique_lock lock(m_mutex);
  while (!m_wake.wait_for(lock, m_interval, [&] { return m_stop; })) draw_locked();
}

void Progress::update(const std::string& where, const std::string& case_id, bool finished) {
  if (m_mode == ProgressMode::none) return;
  std::lock_guard lock(m_mutex);
  if (finished) ++m_done;
  m_where = escape_to_one_line(where + " " + case_id);
  if (m_mode == ProgressMode::terminal) draw_locked(); // a log gets the ticker's lines only
}

void Progress::oracle(std::size_t done, std::size_t total) {
  if (m_mode == ProgressMode::none) return;
  std::lock_guard lock(m_mutex);
  m_oracle_done = done;
  m_oracle_total = total;
}

void Progress::clear() {
  if (m_mode == ProgressMode::none) return;
  {
    std::lock_guard lock(m_mutex);
    if (m_stop) return;
    m_stop = true;
  }
  m_wake.notify_all();
  if (m_ticker.joinable()) m_ticker.join();
  if (m_mode == ProgressMode::terminal) {
    fmt::print(stderr, "\r\033[K");
    std::fflush(stderr);
  }
}

RunJournal::RunJournal(Journal& journal, Progress& progress, RunContext context)
    : m_journal(journal), m_progress(progress), m_context(std::move(context)),
      m_where(fmt::format("{} {}/{}", m_context.target, to_string(m_context.probe),
                          variant_row(m_context.variant, m_context.mode))) {}

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

void RunJournal::on_result(const CaseResult& r) {
  m_journal.append({{"event", "result"}, {"result", to_json(r)}});
}

nlohmann::json RunJournal::base(const char* event, const std::string& case_id) const {
  return {{"event", event},
          {"target", m_context.target},
          {"probe", to_string(m_context.probe)},
          {"variant", m_context.variant},
          {"mode", to_string(m_context.mode)},
          {"case", case_id}};
}

std::string cell_key(const std::string& target, Probe probe, const std::string& variant, Mode mode,
                     const std::string& case_id) {
  return fmt::format("{}|{}|{}|{}", target, to_string(probe), variant_row(variant, mode), case_id);
}

std::string cell_key(const CaseResult& r) {
  return cell_key(r.device, r.probe, r.variant, r.mode, r.case_id);
}

namespace {

// Appends what the check decided after its run; a failed write is the run directory's.
void append_after_run(ExecuteResult& run, nlohmann::json event) {
  if (!run.journal) return;
  run.journal->append(std::move(event));
  if (run.write_error.empty()) run.write_error = run.journal->failure();
}

} // namespace

void journal_shrinks(ExecuteResult& run, const std::vector<Shrink>& shrinks) {
  nlohmann::json all = nlohmann::json::array();
  for (const Shrink& s : shrinks) all.push_back(to_json(s));
  append_after_run(run, {{"event", "shrinks"}, {"shrinks", std::move(all)}});
}

void journal_verified_advice(ExecuteResult& run, const VerifiedAdvice& verified) {
  nlohmann::json recommendations = nlohmann::json::array(), findings = nlohmann::json::array(),
                 statuses = nlohmann::json::array();
  for (const Recommendation& r : verified.recommendations) recommendations.push_back(to_json(r));
  for (const Finding& f : verified.findings) findings.push_back(to_json(f));
  for (Status s : verified.statuses) statuses.push_back(std::string(to_string(s)));
  append_after_run(run, {{"event", "verified-advice"},
                         {"recommendations", std::move(recommendations)},
                         {"findings", std::move(findings)},
                         {"statuses", std::move(statuses)}});
}

bool is_measured(const CaseResult& r) {
  // A journal written before results carried their cause says "interrupted" in words only.
  const bool interrupted = r.cause == SkipCause::interrupted ||
                           (r.cause == SkipCause::none && r.reason == "interrupted");
  return !(r.status == Status::skipped && interrupted);
}

namespace {

// Every element of the array e[key] read by `from_json`; nullopt when one is unreadable.
template <typename T>
std::optional<std::vector<T>> read_all(const nlohmann::json& e, const char* key,
                                       Expected<T> (*from_json)(const nlohmann::json&)) {
  const auto it = e.find(key);
  if (it == e.end() || !it->is_array()) return std::nullopt;
  std::vector<T> out;
  for (const nlohmann::json& item : *it) {
    auto value = from_json(item);
    if (!value) return std::nullopt;
    out.push_back(std::move(*value));
  }
  return out;
}

// Applies one journal line; false when it is not a journal event (torn, foreign, malformed).
// `start_error`: why the first start event's plan did not read (an unknown variant, say), kept
// for the error when no start reads.
// `refused`: why a whole line that is an event (no torn write) cannot be taken, e.g. a result
// whose case id is not its case's.
bool apply_event(const nlohmann::json& e, JournalContents& out, bool& started,
                 std::string& start_error, std::map<std::string, CaseResult>& results,
                 std::map<std::string, WorkerInfo>& workers, std::string& refused) {
  if (!e.is_object() || !e.contains("event") || !e["event"].is_string()) return false;
  const std::string event = e["event"].get<std::string>();
  if (event == "start") {
    if (!started) {
      auto plan = plan_from_json(e.value("plan", nlohmann::json::object()));
      if (!plan) {
        if (start_error.empty()) start_error = plan.error().message;
        return false;
      }
      out.plan = std::move(*plan);
      out.header = e.value("header", nlohmann::json());
      started = true;
    }
    out.finished = false;
    out.shrinks.reset();
    out.verified.reset();
  } else if (event == "end") {
    out.finished = true;
  } else if (event == "result") {
    auto r = case_result_from_json(e.value("result", nlohmann::json()));
    if (!r) {
      refused = r.error().message;
      return false;
    }
    const std::string key = cell_key(*r);
    results.insert_or_assign(key, std::move(*r));
  } else if (event == "worker") {
    auto w = worker_info_from_json(e.value("worker", nlohmann::json()));
    if (!w) return false;
    const std::string key = cell_key(w->device, w->probe, w->variant, w->mode, "");
    workers.insert_or_assign(key, std::move(*w));
  } else if (event == "shrinks") {
    auto shrinks = read_all(e, "shrinks", shrink_from_json);
    if (!shrinks) return false;
    out.shrinks = std::move(*shrinks);
  } else if (event == "verified-advice") {
    auto recommendations = read_all(e, "recommendations", recommendation_from_json);
    auto findings = read_all(e, "findings", finding_from_json);
    if (!recommendations || !findings) return false;
    VerifiedAdvice verified{std::move(*recommendations), std::move(*findings), {}};
    for (const auto& s : e.value("statuses", nlohmann::json::array())) {
      auto status = s.is_string() ? status_from_string(s.get<std::string>()) : std::nullopt;
      if (!status) return false;
      verified.statuses.insert(*status);
    }
    out.verified = std::move(verified);
  } else if (event == "finding") {
    auto f = finding_from_json(e.value("finding", nlohmann::json()));
    if (!f) return false;
    const auto same = [&](const Finding& g) {
      return g.id == f->id && g.device == f->device && g.message == f->message;
    };
    if (std::none_of(out.findings.begin(), out.findings.end(), same))
      out.findings.push_back(std::move(*f));
  }
  return true; // begin, outcome, run, ...: read for the timeline, not needed here
}

// A journal's bytes through its descriptor, a chunk at a time (the file may be gigabytes).
class JournalReader {
public:
  explicit JournalReader(int fd) : m_fd(fd) {}
  ~JournalReader() { ::close(m_fd); }
  JournalReader(const JournalReader&) = delete;
  JournalReader& operator=(const JournalReader&) = delete;

  // The next byte, or -1 at the end or on an error (error() then says which).
  int next() {
    if (m_pos == m_end && !fill()) return -1;
    return static_cast<unsigned char>(m_chunk[m_pos++]);
  }
  int error() const { return m_error; }

private:
  bool fill() {
    while (true) {
      const ssize_t n = ::read(m_fd, m_chunk, sizeof m_chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) m_error = errno;
      if (n <= 0) return false;
      m_pos = 0;
      m_end = static_cast<std::size_t>(n);
      return true;
    }
  }
  int m_fd;
  int m_error = 0;
  char m_chunk[1 << 16];
  std::size_t m_pos = 0, m_end = 0;
};

// The next line of `in` (without its newline) into `line`; false at the end. A line longer than
// `max` comes back cut, with `too_long` set: the rest is skipped, never held.
bool next_line(JournalReader& in, std::string& line, std::size_t max, bool& too_long) {
  line.clear();
  too_long = false;
  for (int c = in.next(); c >= 0; c = in.next()) {
    if (c == '\n') return true;
    if (line.size() < max) line.push_back(static_cast<char>(c));
    else too_long = true;
  }
  return !line.empty() || too_long;
}

// Why a result or worker the journal names is no cell of its plan, or empty. Such a line is no
// torn write but another run's or a hand's: the report would show rows the run never had.
std::string outside_plan(const Plan& plan, const std::string& target, Probe probe,
                         const std::string& variant, Mode mode, const std::string* case_id) {
  const auto run = std::find_if(plan.runs.begin(), plan.runs.end(), [&](const PlannedRun& r) {
    return r.target == target && r.probe == probe && r.variant.name() == variant && r.mode == mode;
  });
  if (run == plan.runs.end())
    return fmt::format("the variant '{}' of the {} probe on '{}', which the run's plan does not "
                       "hold",
                       escape_to_one_line(shortened(variant_row(variant, mode))), to_string(probe),
                       escape_to_one_line(shortened(target)));
  if (case_id && std::none_of(plan.cases.begin(), plan.cases.end(), [&](const Case& c) {
        return c.id() == *case_id && run->takes(c);
      }))
    return fmt::format("the case '{}', which the run's plan does not hold",
                       escape_to_one_line(shortened(*case_id)));
  return {};
}

} // namespace

Expected<JournalContents> read_journal(const std::string& path) {
  std::error_code ec;
  const std::string file = std::filesystem::is_directory(path, ec)
                               ? (std::filesystem::path(path) / "journal.jsonl").string()
                               : path;
  // Regular files only: a FIFO or /dev/zero would never end.
  const auto fd = open_regular_file(file, escape_to_one_line(file),
                                    static_cast<int64_t>(k_max_journal_bytes));
  if (!fd) return fd.error();
  JournalReader in(*fd);
  JournalContents out;
  bool started = false;
  std::string start_error;
  std::map<std::string, CaseResult> results;
  std::map<std::string, WorkerInfo> workers;
  std::string line, refused;
  bool too_long = false;
  for (int64_t number = 1; next_line(in, line, k_max_journal_line, too_long); ++number) {
    if (line.empty()) continue;
    if (too_long) {
      ++out.lines_ignored;
      continue;
    }
    const auto e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_discarded() ||
        !apply_event(e, out, started, start_error, results, workers, refused))
      ++out.lines_ignored;
    if (!refused.empty())
      return make_error(fmt::format("{}:{}: {}", escape_to_one_line(file), number, refused));
  }
  if (in.error() != 0)
    return make_error(fmt::format("cannot read {}: {}", escape_to_one_line(file),
                                  std::strerror(in.error())));
  if (!started && !start_error.empty())
    return make_error(fmt::format("{}: its start event's plan does not read: {}", file,
                                  start_error));
  if (!started) return make_error(fmt::format("{}: not an sdpa-doctor journal (no start event)", file));
  for (const auto& [key, r] : results)
    if (auto why = outside_plan(out.plan, r.device, r.probe, r.variant, r.mode, &r.case_id); !why.empty())
      return make_error(fmt::format("{}: a result names {}", file, why));
  for (const auto& [key, w] : workers)
    if (auto why = outside_plan(out.plan, w.device, w.probe, w.variant, w.mode, nullptr); !why.empty())
      return make_error(fmt::format("{}: a worker names {}", file, why));
  for (auto& [key, r] : results) out.results.push_back(std::move(r));
  for (auto& [key, w] : workers) out.workers.push_back(std::move(w));
  sort_by_plan(out.plan, out.results);
  return out;
}

} // namespace sdpa_doctor::run
