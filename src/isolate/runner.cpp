#include "isolate/isolate.hpp"
#include "core/io.hpp"
#include "core/model_json.hpp"
#include "core/paths.hpp"
#include "core/text.hpp"
#include "isolate/process.hpp"
#include "protocol/protocol.hpp"

#include <fmt/format.h>

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <map>

namespace sdpa_doctor::isolate {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
namespace fs = std::filesystem;

constexpr std::size_t k_capture = 64 * 1024;
constexpr std::size_t k_tail_bytes = 8 * 1024;
constexpr int k_tail_lines = 40;
constexpr milliseconds k_tick{100}; // the longest the runner sleeps: interrupts are seen this fast

std::string seconds(milliseconds d) { return fmt::format("{:g} s", static_cast<double>(d.count()) / 1000.0); }

// The last lines of `text`, bounded in lines and bytes, printable.
std::string tail_lines(std::string_view text) {
  if (text.size() > k_tail_bytes) text = text.substr(text.size() - k_tail_bytes);
  std::size_t pos = text.size();
  if (pos > 0 && text[pos - 1] == '\n') --pos;
  for (int lines = 0; lines < k_tail_lines && pos != std::string_view::npos && pos > 0; ++lines)
    pos = text.rfind('\n', pos - 1);
  if (pos != std::string_view::npos && pos < text.size() && text[pos] == '\n') ++pos;
  if (pos == std::string_view::npos) pos = 0;
  return sanitize_text(text.substr(pos));
}

// The cases file and logs live here; a directory we made ourselves is removed at the end.
class RunDir {
public:
  explicit RunDir(const std::string& given) {
    if (!given.empty()) {
      std::error_code ec;
      fs::create_directories(given, ec);
      m_path = given;
      return;
    }
    std::string pattern = temp_directory() + "/sdpa-doctor-run-XXXXXX";
    if (::mkdtemp(pattern.data())) {
      m_path = pattern;
      m_owned = true;
    } else {
      m_error = describe_write_failure(pattern, errno);
    }
  }
  ~RunDir() {
    if (!m_owned) return;
    std::error_code ec;
    fs::remove_all(m_path, ec);
  }
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;
  const std::string& path() const { return m_path; }
  const std::string& error() const { return m_error; } // why there is none

private:
  std::string m_path;
  std::string m_error;
  bool m_owned = false;
};

// Why one worker process stopped, as the runner saw it.
enum class StopCause { exited, case_deadline, startup_deadline, worker_deadline, broken_line,
                       results_closed, interrupted };

class Runner {
public:
  Runner(const WorkerCommand& cmd, const std::vector<PlannedCase>& cases,
         const RunnerOptions& options, RunObserver* observer)
      : m_cmd(cmd), m_cases(cases), m_options(options), m_observer(observer),
        m_dir(options.run_dir), m_done(cases.size(), false) {
    m_report.outcomes.resize(cases.size());
    for (std::size_t i = 0; i < cases.size(); ++i) {
      m_report.outcomes[i].case_id = cases[i].id;
      m_index.emplace(cases[i].id, i);
    }
    if (!options.run_dir.empty()) {
      m_report.stderr_log_path = m_dir.path() + "/" + options.name + ".stderr.log";
      m_stderr_log = std::make_unique<detail::LogSink>(m_report.stderr_log_path, options.log_cap_bytes);
      m_stdout_log = std::make_unique<detail::LogSink>(m_dir.path() + "/" + options.name + ".stdout.log",
                                                       options.log_cap_bytes);
    }
  }

  WorkerRunReport run() {
    int attempt = 0;
    while (std::size_t remaining = count_remaining()) {
      (void)remaining;
      if (interrupted()) {
        skip_rest("interrupted", SkipCause::interrupted);
        break;
      }
      if (!run_attempt(attempt)) break;
      if (count_remaining() == 0) break;
      if (m_report.restarts >= m_options.max_restarts) {
        skip_rest(fmt::format("restart budget spent after {}", m_last_culprit),
                  SkipCause::restart_budget_spent, m_last_culprit);
        break;
      }
      ++m_report.restarts;
      ++attempt;
    }
    return std::move(m_report);
  }

private:
  bool interrupted() const {
    return m_options.interrupted && m_options.interrupted->load(std::memory_order_relaxed);
  }

  std::size_t count_remaining() const {
    std::size_t n = 0;
    for (bool d : m_done) n += d ? 0 : 1;
    return n;
  }

  void record(std::size_t index, CaseOutcome outcome) {
    if (m_done[index]) return;
    outcome.case_id = m_cases[index].id;
    m_done[index] = true;
    m_report.outcomes[index] = std::move(outcome);
    if (m_observer) m_observer->on_outcome(m_report.outcomes[index]);
  }

  void skip_rest(const std::string& reason, SkipCause cause, const std::string& culprit = {}) {
    for (std::size_t i = 0; i < m_cases.size(); ++i) {
      if (m_done[i]) continue;
      CaseOutcome o;
      o.status = Status::skipped;
      o.reason = reason;
      o.cause = cause;
      o.culprit = culprit;
      record(i, std::move(o));
    }
  }

  // Every remaining case gets the same verdict: the worker failed before it could run any.
  void fail_rest(Status status, const std::string& reason, SkipCause cause,
                 const std::optional<ProcessEnd>& end, const std::vector<std::string>& signatures,
                 const std::string& tail, int attempt) {
    for (std::size_t i = 0; i < m_cases.size(); ++i) {
      if (m_done[i]) continue;
      CaseOutcome o;
      o.status = status;
      o.reason = reason;
      o.cause = cause;
      o.process_end = end;
      o.signatures = signatures;
      o.stderr_tail = tail;
      o.attempt = attempt;
      record(i, std::move(o));
    }
  }

  // The remaining cases, one line each, in a file for the worker; an error when it cannot be
  // written (a full disk), naming the file system.
  Expected<std::string> write_remaining_cases(int attempt) {
    if (m_dir.path().empty())
      return make_error("cannot create a temporary directory: " + m_dir.error());
    std::string path = fmt::format("{}/{}.cases.{}.jsonl", m_dir.path(), m_options.name, attempt);
    std::vector<std::string> lines;
    for (std::size_t i = 0; i < m_cases.size(); ++i)
      if (!m_done[i]) lines.push_back(m_cases[i].line);
    if (auto written = protocol::write_cases_file(path, lines); !written) return written.error();
    return path;
  }

  // Runs one worker process over the remaining cases. false: stop, nothing more will be started.
  bool run_attempt(int attempt);

  // false: the device is unhealthy and the remaining cases were skipped. `culprit` is the case
  // that crashed or timed out; empty: the worker's start.
  bool check_health(const std::string& culprit) {
    if (!m_options.health_check) return true;
    auto run = run_simple(*m_options.health_check, m_options.health_deadline);
    const bool healthy = run && !run->timed_out && !run->end.signal &&
                         (run->end.exit_code == exit_code::ok ||
                          run->end.exit_code == exit_code::health_unknown);
    if (healthy) return true;
    m_report.device_unhealthy = true;
    skip_rest(fmt::format("device unhealthy after {}", culprit.empty() ? "worker start" : culprit),
              SkipCause::device_unhealthy, culprit);
    return false;
  }

  class Attempt;

  const WorkerCommand& m_cmd;
  const std::vector<PlannedCase>& m_cases;
  const RunnerOptions& m_options;
  RunObserver* m_observer;
  RunDir m_dir;
  std::vector<bool> m_done;
  std::map<std::string, std::size_t> m_index;
  WorkerRunReport m_report;
  std::unique_ptr<detail::LogSink> m_stderr_log, m_stdout_log;
  std::string m_last_culprit;
};

// One started worker process: reads its protocol events as they come, stops it at the first
// deadline, and turns its end into outcomes for the cases it left.
class Runner::Attempt {
public:
  Attempt(Runner& runner, detail::Child& child, int attempt)
      : m_runner(runner), m_options(runner.m_options), m_child(child), m_attempt(attempt),
        m_out(k_capture), m_err(k_capture), m_splitter(m_options.max_line_bytes),
        m_last_activity(Clock::now()), m_spawn_time(m_last_activity) {}
  Attempt(const Attempt&) = delete;
  Attempt& operator=(const Attempt&) = delete;

  // false: stop, nothing more will be started.
  bool run() {
    StopCause cause = wait_for_stop();
    if (cause != StopCause::exited && cause != StopCause::results_closed) m_accepting = false;
    bool reaped = true;
    if (cause != StopCause::exited) {
      if (m_runner.interrupted()) m_child.signal_group(SIGKILL); // the user is waiting: no grace
      reaped = m_child.terminate(m_options.grace, m_options.kill_wait, m_sink);
    }
    m_elapsed_running = m_running ? ms_since(m_begin_time) : 0.0;
    if (!reaped) {
      give_up_wedged();
      return false;
    }
    m_end = m_child.finish(detail::k_drain, m_sink);
    if (m_accepting) m_splitter.finish(m_handler);
    if (cause == StopCause::exited && !m_broken_problem.empty()) cause = StopCause::broken_line;
    if (cause == StopCause::interrupted) {
      m_runner.skip_rest("interrupted", SkipCause::interrupted);
      return false;
    }
    m_cause = cause;
    return conclude();
  }

private:
  struct Culprit {
    std::string case_id;
    Status status;
  };

  // Pumps the pipes until the worker exits, breaks the protocol or a deadline passes.
  StopCause wait_for_stop() {
    for (;;) {
      if (m_runner.interrupted()) return StopCause::interrupted;
      if (!m_broken_problem.empty()) return StopCause::broken_line;
      if (m_child.exited()) return StopCause::exited;
      const auto now = Clock::now();
      const auto [until, on_expiry] = next_deadline(now);
      if (now >= until) return on_expiry;
      m_err_fresh = false;
      m_child.pump(std::min(std::chrono::duration_cast<milliseconds>(until - now), k_tick), m_sink);
    }
  }

  // The earliest deadline in force and the cause it stops the worker with.
  std::pair<Clock::time_point, StopCause> next_deadline(Clock::time_point now) {
    Clock::time_point until = m_running ? m_begin_time + m_runner.m_cases[*m_running].deadline
                                        : m_last_activity + m_options.startup_deadline;
    StopCause on_expiry = m_running ? StopCause::case_deadline : StopCause::startup_deadline;
    if (m_options.worker_deadline.count() > 0 && m_spawn_time + m_options.worker_deadline < until) {
      until = m_spawn_time + m_options.worker_deadline;
      on_expiry = StopCause::worker_deadline;
    }
    if (!m_child.stream_open(detail::Stream::results)) {
      // The worker closed its results channel but lives on: it gets a grace period to exit.
      if (!m_eof_deadline) m_eof_deadline = now + m_options.grace;
      if (*m_eof_deadline < until) {
        until = *m_eof_deadline;
        on_expiry = StopCause::results_closed;
      }
    }
    return {until, on_expiry};
  }

  void on_output(detail::Stream s, std::string_view data) {
    switch (s) {
    case detail::Stream::out:
      m_out.append(data);
      if (m_runner.m_stdout_log) m_runner.m_stdout_log->write(data);
      break;
    case detail::Stream::err:
      if (!m_err_fresh) m_fresh_err_start = m_err.total();
      m_err_fresh = true;
      m_err.append(data);
      if (m_runner.m_stderr_log) m_runner.m_stderr_log->write(data);
      break;
    case detail::Stream::results:
      m_splitter.feed(data, m_handler);
      break;
    }
  }

  void on_line(std::string_view line, bool too_long) {
    if (!m_accepting) return;
    protocol::Event ev = too_long ? protocol::Event{protocol::EventKind::broken, {}, {},
                                                fmt::format("line longer than {} bytes: {}",
                                                            m_options.max_line_bytes,
                                                            excerpt(line, 60))}
                                : protocol::parse_event(line);
    // A worker sends what it measured; the verdict is the doctor's, written in before any read.
    if (m_options.judge &&
        (ev.kind == protocol::EventKind::result || ev.kind == protocol::EventKind::phase))
      m_options.judge(ev.body);
    switch (ev.kind) {
    case protocol::EventKind::hello:
      if (!m_runner.m_report.hello) m_runner.m_report.hello = ev.body;
      if (m_runner.m_observer) m_runner.m_observer->on_hello(ev.body);
      break;
    case protocol::EventKind::begin:
      if (auto index = pending_case(ev.case_id)) on_begin(*index, ev.case_id);
      break;
    case protocol::EventKind::phase:
      if (auto index = pending_case(ev.case_id); index && m_running == index) m_phase = ev.body;
      break;
    case protocol::EventKind::result:
      if (auto index = pending_case(ev.case_id)) on_result(*index, ev);
      break;
    case protocol::EventKind::bye:
      m_saw_bye = true;
      break;
    case protocol::EventKind::unknown:
    case protocol::EventKind::blank:
      break; // newer workers may send events this runner does not know; they change nothing
    case protocol::EventKind::broken:
      if (m_broken_problem.empty()) m_broken_problem = ev.problem;
      m_accepting = false; // a channel that carried garbage cannot be trusted for the rest
      break;
    }
  }

  // The plan index of `case_id` while it still waits for an outcome; nullopt: not ours, ignored.
  std::optional<std::size_t> pending_case(const std::string& case_id) const {
    auto it = m_runner.m_index.find(case_id);
    if (it == m_runner.m_index.end() || m_runner.m_done[it->second]) return std::nullopt;
    return it->second;
  }

  void on_begin(std::size_t index, const std::string& case_id) {
    if (m_running && *m_running != index) {
      CaseOutcome o;
      o.status = Status::error;
      o.reason = fmt::format("worker began '{}' without a result for this case", case_id);
      o.attempt = m_attempt;
      o.elapsed_ms = ms_since(m_begin_time);
      m_runner.record(*m_running, std::move(o));
      ++m_finished_here;
      m_begin_offset = m_err.total();
    }
    m_running = index;
    m_phase.reset();
    m_begin_time = Clock::now();
    if (m_runner.m_observer) m_runner.m_observer->on_begin(case_id);
  }

  void on_result(std::size_t index, const protocol::Event& ev) {
    CaseOutcome o;
    o.attempt = m_attempt;
    o.result = ev.body;
    const std::string status_text = ev.body.value("status", std::string{});
    auto status = status_from_string(status_text);
    if (status && is_worker_status(*status)) {
      o.status = *status;
      if (auto r = ev.body.find("reason"); r != ev.body.end() && r->is_string())
        o.reason = excerpt(r->get<std::string>(), 2000);
    } else {
      o.status = Status::error;
      o.reason = fmt::format("worker reported an invalid status '{}'", excerpt(status_text));
    }
    if (m_running == index) {
      const std::string since = m_err.since(m_begin_offset);
      // The two pipes are unordered, so this window may overlap the next case's first
      // output; a pass carries no signatures rather than someone else's.
      if (o.status != Status::pass) o.signatures = match_signatures(since);
      o.stderr_tail = tail_lines(since);
      o.elapsed_ms = ms_since(m_begin_time);
      m_running.reset();
      m_phase.reset();
    }
    m_runner.record(index, std::move(o));
    ++m_finished_here;
    m_last_finished = m_runner.m_cases[index].id;
    m_last_activity = Clock::now();
    m_begin_offset = m_err_fresh ? m_fresh_err_start : m_err.total();
  }

  // The verdict on the case that was running when the worker stopped.
  CaseOutcome running_outcome(Status status, std::string reason) const {
    CaseOutcome o;
    o.status = status;
    o.reason = std::move(reason);
    if (m_phase) {
      o.phase = m_phase;
      o.reason = fmt::format("in {}: {}", excerpt(json_text(*m_phase, "phase"), 40), o.reason);
    }
    o.signatures = match_signatures(m_err.since(m_begin_offset));
    o.stderr_tail = tail_lines(m_err.str());
    o.attempt = m_attempt;
    o.elapsed_ms = m_elapsed_running;
    return o;
  }

  // The worker survived SIGKILL: nothing more can run on this device.
  void give_up_wedged() {
    m_runner.m_report.device_wedged = true;
    const std::string what = m_running ? m_runner.m_cases[*m_running].id : "worker start";
    if (m_running)
      m_runner.record(*m_running,
                      running_outcome(Status::timeout, "no result; the worker did not die after "
                                                       "SIGKILL (stuck in the driver?)"));
    m_runner.skip_rest(fmt::format("device wedged after {}", what), SkipCause::device_wedged,
                       m_running ? what : std::string());
  }

  // A deadline is a timeout; a signal the doctor did not send is a crash.
  Status status_by_end(Status otherwise) const {
    if (m_cause == StopCause::case_deadline || m_cause == StopCause::startup_deadline ||
        m_cause == StopCause::worker_deadline)
      return Status::timeout;
    if (m_end.signal && !m_end.killed_by_doctor) return Status::crash;
    return otherwise;
  }

  std::string why() const {
    const std::string desc = describe(m_end);
    switch (m_cause) {
    case StopCause::case_deadline:
      return fmt::format("no result within the case deadline of {}; worker {}",
                         seconds(m_runner.m_cases[*m_running].deadline), desc);
    case StopCause::startup_deadline:
      return fmt::format("worker sent no begin within {}; worker {}",
                         seconds(m_options.startup_deadline), desc);
    case StopCause::worker_deadline:
      return fmt::format("the worker deadline of {} passed; worker {}",
                         seconds(m_options.worker_deadline), desc);
    case StopCause::broken_line:
      return fmt::format("broken protocol line ({}); worker {}", m_broken_problem, desc);
    case StopCause::results_closed:
      return fmt::format("worker closed its results channel without bye; worker {}", desc);
    case StopCause::exited:
    case StopCause::interrupted:
      break;
    }
    if (m_end.signal) return fmt::format("worker {}", desc);
    if (m_end.exit_code && *m_end.exit_code != 0) return fmt::format("worker {}", desc);
    return m_saw_bye ? std::string("worker said bye without a result")
                     : fmt::format("worker {} without a result", desc);
  }

  // What the worker's end means for the cases it left. false: stop.
  bool conclude() {
    std::optional<Culprit> culprit;
    if (m_running) {
      culprit = blame_running();
    } else if (m_runner.count_remaining() > 0 &&
               (m_finished_here == 0 ||
                (m_saw_bye && m_cause == StopCause::exited && m_end.exit_code == 0))) {
      fail_remaining();
      return false;
    } else if (m_runner.count_remaining() > 0) {
      // Died between cases after making progress: resume without blaming a case.
      culprit = Culprit{m_last_finished, status_by_end(Status::error)};
    }
    if (culprit && !culprit->case_id.empty()) m_runner.m_last_culprit = culprit->case_id;
    if (m_runner.count_remaining() == 0) return false;
    if (culprit && (culprit->status == Status::crash || culprit->status == Status::timeout))
      return m_runner.check_health(culprit->case_id);
    return true;
  }

  Culprit blame_running() {
    CaseOutcome o = running_outcome(status_by_end(Status::error), why());
    o.process_end = m_end;
    Culprit culprit{m_runner.m_cases[*m_running].id, o.status};
    m_runner.record(*m_running, std::move(o));
    return culprit;
  }

  // Nothing to blame on one case, and a fresh worker would fail the same way.
  void fail_remaining() {
    const std::string all = m_err.str();
    const Status status = status_by_end(Status::error);
    const bool at_start = m_finished_here == 0;
    const std::string reason = at_start
                                   ? fmt::format("worker failed before its first case: {}", why())
                                   : "worker said bye without running this case";
    m_runner.fail_rest(status, reason,
                       at_start ? SkipCause::worker_failed_at_start : SkipCause::worker_left_case,
                       m_end, match_signatures(all), tail_lines(all), m_attempt);
    if ((status == Status::crash || status == Status::timeout) && m_options.health_check)
      m_runner.check_health(at_start ? std::string() : m_last_finished);
  }

  Runner& m_runner;
  const RunnerOptions& m_options;
  detail::Child& m_child;
  const int m_attempt;
  detail::TailBuffer m_out, m_err;
  protocol::LineSplitter m_splitter;
  const protocol::LineSplitter::Handler m_handler = [this](std::string_view line, bool too_long) {
    on_line(line, too_long);
  };
  const detail::Sink m_sink = [this](detail::Stream s, std::string_view data) {
    on_output(s, data);
  };
  std::optional<std::size_t> m_running; // plan index of the case between begin and result
  std::optional<nlohmann::json> m_phase; // the running case's `phase` event, if it sent one
  Clock::time_point m_begin_time{}, m_last_activity;
  const Clock::time_point m_spawn_time;
  std::optional<Clock::time_point> m_eof_deadline; // set once the results channel closed
  // Stderr since the previous case ended belongs to the next one: what a case prints can be
  // read before its `begin` line, the two pipes are not ordered against each other.
  std::size_t m_begin_offset = 0;
  // Where the newest stderr chunk began, while no pump has passed since it was read: such a
  // chunk may have been written before the result that follows it in our reading order.
  std::size_t m_fresh_err_start = 0;
  bool m_err_fresh = false;
  std::size_t m_finished_here = 0; // outcomes this worker gave
  bool m_saw_bye = false;
  bool m_accepting = true; // false once the results channel can no longer be trusted
  std::string m_broken_problem;
  std::string m_last_finished;
  double m_elapsed_running = 0; // of the running case, when the worker was stopped
  StopCause m_cause = StopCause::exited;
  ProcessEnd m_end;
};

bool Runner::run_attempt(int attempt) {
  const auto cases = write_remaining_cases(attempt);
  if (!cases) {
    // The doctor's own disk, not the worker: nothing ran, nothing is blamed on it.
    m_report.write_error = cases.error().message;
    skip_rest(cases.error().message, SkipCause::run_dir_unwritable);
    return false;
  }
  const std::string& cases_path = *cases;
  detail::SpawnSpec spec;
  spec.argv = m_cmd.argv;
  spec.argv.insert(spec.argv.end(), {"--results-fd", std::to_string(m_options.results_fd),
                                     "--cases", cases_path});
  spec.env = child_environment(m_cmd, environ);
  spec.results_fd = m_options.results_fd;
  spec.keep_core_dumps = m_options.keep_core_dumps;
  auto spawned = detail::Child::spawn(spec);
  if (!spawned) {
    fail_rest(Status::error, fmt::format("cannot start worker: {}", spawned.error().message),
              SkipCause::worker_spawn_failed, std::nullopt, {}, {}, attempt);
    return false;
  }
  detail::Child& child = *spawned.value();
  m_report.worker_pgids.push_back(child.pid());
  if (m_stderr_log) m_stderr_log->note(fmt::format("attempt {}: pid {}", attempt, child.pid()));
  Attempt current(*this, child, attempt);
  return current.run();
}

} // namespace

WorkerRunReport run_worker(const WorkerCommand& cmd, const std::vector<PlannedCase>& cases,
                           const RunnerOptions& options, RunObserver* observer) {
  Runner runner(cmd, cases, options, observer);
  return runner.run();
}

} // namespace sdpa_doctor::isolate
