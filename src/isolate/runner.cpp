#include "isolate/isolate.hpp"
#include "isolate/process.hpp"
#include "isolate/protocol.hpp"

#include <fmt/format.h>

#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

namespace sdpa_doctor::isolate {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
namespace fs = std::filesystem;

constexpr std::size_t k_capture = 64 * 1024;
constexpr std::size_t k_tail_bytes = 8 * 1024;
constexpr int k_tail_lines = 40;
constexpr milliseconds k_drain{1'000};
constexpr milliseconds k_tick{100}; // the longest the runner sleeps: interrupts are seen this fast

std::string seconds(milliseconds d) { return fmt::format("{:g} s", static_cast<double>(d.count()) / 1000.0); }

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// The last lines of `text`, bounded in lines and bytes, printable.
std::string tail_lines(std::string_view text) {
  if (text.size() > k_tail_bytes) text = text.substr(text.size() - k_tail_bytes);
  std::size_t pos = text.size();
  if (pos > 0 && text[pos - 1] == '\n') --pos;
  for (int lines = 0; lines < k_tail_lines && pos != std::string_view::npos && pos > 0; ++lines)
    pos = text.rfind('\n', pos - 1);
  if (pos != std::string_view::npos && pos < text.size() && text[pos] == '\n') ++pos;
  if (pos == std::string_view::npos) pos = 0;
  return detail::sanitize_text(text.substr(pos));
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
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/sdpa-doctor-run-XXXXXX";
    if (::mkdtemp(pattern.data())) {
      m_path = pattern;
      m_owned = true;
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

private:
  std::string m_path;
  bool m_owned = false;
};

bool is_worker_status(Status s) {
  return s == Status::pass || s == Status::mismatch || s == Status::nonfinite ||
         s == Status::unsupported || s == Status::error;
}

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
        skip_rest("interrupted");
        break;
      }
      if (!run_attempt(attempt)) break;
      if (count_remaining() == 0) break;
      if (m_report.restarts >= m_options.max_restarts) {
        skip_rest(fmt::format("restart budget spent after {}", m_last_culprit));
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

  void skip_rest(const std::string& reason) {
    for (std::size_t i = 0; i < m_cases.size(); ++i) {
      if (m_done[i]) continue;
      CaseOutcome o;
      o.status = Status::skipped;
      o.reason = reason;
      record(i, std::move(o));
    }
  }

  // Every remaining case gets the same verdict: the worker failed before it could run any.
  void fail_rest(Status status, const std::string& reason, const std::optional<ProcessEnd>& end,
                 const std::vector<std::string>& signatures, const std::string& tail, int attempt) {
    for (std::size_t i = 0; i < m_cases.size(); ++i) {
      if (m_done[i]) continue;
      CaseOutcome o;
      o.status = status;
      o.reason = reason;
      o.process_end = end;
      o.signatures = signatures;
      o.stderr_tail = tail;
      o.attempt = attempt;
      record(i, std::move(o));
    }
  }

  std::string write_cases_file(int attempt) {
    std::string path = fmt::format("{}/{}.cases.{}.jsonl", m_dir.path(), m_options.name, attempt);
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    for (std::size_t i = 0; i < m_cases.size(); ++i)
      if (!m_done[i]) file << m_cases[i].line << '\n';
    file.flush();
    if (!file) return {};
    return path;
  }

  // Runs one worker process over the remaining cases. false: stop, nothing more will be started.
  bool run_attempt(int attempt) {
    const std::string cases_path = m_dir.path().empty() ? std::string{} : write_cases_file(attempt);
    if (cases_path.empty()) {
      fail_rest(Status::error, "cannot write the cases file for the worker", std::nullopt, {}, {},
                attempt);
      return false;
    }
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
                std::nullopt, {}, {}, attempt);
      return false;
    }
    detail::Child& child = *spawned.value();
    m_report.worker_pgids.push_back(child.pid());
    if (m_stderr_log) m_stderr_log->note(fmt::format("attempt {}: pid {}", attempt, child.pid()));

    // Per-process state.
    detail::TailBuffer out(k_capture), err(k_capture);
    detail::LineSplitter splitter(m_options.max_line_bytes);
    std::optional<std::size_t> running;
    Clock::time_point begin_time{}, last_activity = Clock::now();
    const Clock::time_point spawn_time = last_activity;
    // Stderr since the previous case ended belongs to the next one: what a case prints can be
    // read before its `begin` line, the two pipes are not ordered against each other.
    std::size_t begin_offset = 0;
    // Where the newest stderr chunk began, while no pump has passed since it was read: such a
    // chunk may have been written before the result that follows it in our reading order.
    std::size_t fresh_err_start = 0;
    bool err_fresh = false;
    std::size_t finished_here = 0;
    bool saw_bye = false;
    bool accepting = true;
    std::string broken_problem;
    std::string last_finished;

    auto finish_running_with_result = [&](std::size_t index, const detail::Event& ev) {
      CaseOutcome o;
      o.attempt = attempt;
      o.result = ev.body;
      const std::string status_text = ev.body.value("status", std::string{});
      auto status = status_from_string(status_text);
      if (status && is_worker_status(*status)) {
        o.status = *status;
        if (auto r = ev.body.find("reason"); r != ev.body.end() && r->is_string())
          o.reason = detail::excerpt(r->get<std::string>(), 2000);
      } else {
        o.status = Status::error;
        o.reason = fmt::format("worker reported an invalid status '{}'", detail::excerpt(status_text));
      }
      if (running == index) {
        const std::string since = err.since(begin_offset);
        // The two pipes are unordered, so this window may overlap the next case's first
        // output; a pass carries no signatures rather than someone else's.
        if (o.status != Status::pass) o.signatures = match_signatures(since);
        o.stderr_tail = tail_lines(since);
        o.elapsed_ms = ms_since(begin_time);
        running.reset();
      }
      record(index, std::move(o));
      ++finished_here;
      last_finished = m_cases[index].id;
      last_activity = Clock::now();
      begin_offset = err_fresh ? fresh_err_start : err.total();
    };

    auto on_line = [&](std::string_view line, bool too_long) {
      if (!accepting) return;
      detail::Event ev = too_long ? detail::Event{detail::EventKind::broken, {}, {},
                                                  fmt::format("line longer than {} bytes: {}",
                                                              m_options.max_line_bytes,
                                                              detail::excerpt(line, 60))}
                                  : detail::parse_event(line);
      switch (ev.kind) {
      case detail::EventKind::hello:
        if (!m_report.hello) m_report.hello = ev.body;
        if (m_observer) m_observer->on_hello(ev.body);
        break;
      case detail::EventKind::begin: {
        auto it = m_index.find(ev.case_id);
        if (it == m_index.end() || m_done[it->second]) break; // not ours to run: ignored
        if (running && *running != it->second) {
          CaseOutcome o;
          o.status = Status::error;
          o.reason = fmt::format("worker began '{}' without a result for this case", ev.case_id);
          o.attempt = attempt;
          o.elapsed_ms = ms_since(begin_time);
          record(*running, std::move(o));
          ++finished_here;
          begin_offset = err.total();
        }
        running = it->second;
        begin_time = Clock::now();
        if (m_observer) m_observer->on_begin(ev.case_id);
        break;
      }
      case detail::EventKind::result: {
        auto it = m_index.find(ev.case_id);
        if (it == m_index.end() || m_done[it->second]) break;
        finish_running_with_result(it->second, ev);
        break;
      }
      case detail::EventKind::bye:
        saw_bye = true;
        break;
      case detail::EventKind::unknown:
      case detail::EventKind::blank:
        break; // newer workers may send events this runner does not know; they change nothing
      case detail::EventKind::broken:
        if (broken_problem.empty()) broken_problem = ev.problem;
        accepting = false; // a channel that carried garbage cannot be trusted for the rest
        break;
      }
    };

    detail::Sink sink = [&](detail::Stream s, std::string_view data) {
      switch (s) {
      case detail::Stream::out:
        out.append(data);
        if (m_stdout_log) m_stdout_log->write(data);
        break;
      case detail::Stream::err:
        if (!err_fresh) fresh_err_start = err.total();
        err_fresh = true;
        err.append(data);
        if (m_stderr_log) m_stderr_log->write(data);
        break;
      case detail::Stream::results:
        splitter.feed(data, on_line);
        break;
      }
    };

    StopCause cause = StopCause::exited;
    std::optional<Clock::time_point> eof_deadline;
    for (;;) {
      if (interrupted()) { cause = StopCause::interrupted; break; }
      if (!broken_problem.empty()) { cause = StopCause::broken_line; break; }
      if (child.exited()) { cause = StopCause::exited; break; }
      const auto now = Clock::now();
      Clock::time_point until = running ? begin_time + m_cases[*running].deadline
                                        : last_activity + m_options.startup_deadline;
      StopCause on_expiry = running ? StopCause::case_deadline : StopCause::startup_deadline;
      if (m_options.worker_deadline.count() > 0 && spawn_time + m_options.worker_deadline < until) {
        until = spawn_time + m_options.worker_deadline;
        on_expiry = StopCause::worker_deadline;
      }
      if (!child.stream_open(detail::Stream::results)) {
        // The worker closed its results channel but lives on: it gets a grace period to exit.
        if (!eof_deadline) eof_deadline = now + m_options.grace;
        if (*eof_deadline < until) {
          until = *eof_deadline;
          on_expiry = StopCause::results_closed;
        }
      }
      if (now >= until) { cause = on_expiry; break; }
      err_fresh = false;
      child.pump(std::min(std::chrono::duration_cast<milliseconds>(until - now), k_tick), sink);
    }

    if (cause != StopCause::exited && cause != StopCause::results_closed) accepting = false;
    bool reaped = true;
    if (cause != StopCause::exited) {
      if (interrupted()) child.signal_group(SIGKILL); // the user is waiting: no grace
      reaped = child.terminate(m_options.grace, m_options.kill_wait, sink);
    }
    const double elapsed_running = running ? ms_since(begin_time) : 0.0;
    if (!reaped) {
      m_report.device_wedged = true;
      const std::string what = running ? m_cases[*running].id : std::string("worker start");
      if (running) {
        CaseOutcome o;
        o.status = Status::timeout;
        o.reason = "no result; the worker did not die after SIGKILL (stuck in the driver?)";
        o.signatures = match_signatures(err.since(begin_offset));
        o.stderr_tail = tail_lines(err.str());
        o.attempt = attempt;
        o.elapsed_ms = elapsed_running;
        record(*running, std::move(o));
      }
      skip_rest(fmt::format("device wedged after {}", what));
      return false;
    }
    ProcessEnd end = child.finish(k_drain, sink);
    if (accepting) splitter.finish(on_line);
    if (cause == StopCause::exited && !broken_problem.empty()) cause = StopCause::broken_line;

    if (cause == StopCause::interrupted) {
      skip_rest("interrupted");
      return false;
    }

    const std::string desc = describe(end);
    auto status_by_end = [&](Status otherwise) {
      if (cause == StopCause::case_deadline || cause == StopCause::startup_deadline ||
          cause == StopCause::worker_deadline)
        return Status::timeout;
      if (end.signal && !end.killed_by_doctor) return Status::crash;
      return otherwise;
    };
    auto why = [&]() -> std::string {
      switch (cause) {
      case StopCause::case_deadline:
        return fmt::format("no result within the case deadline of {}; worker {}",
                           seconds(m_cases[*running].deadline), desc);
      case StopCause::startup_deadline:
        return fmt::format("worker sent no begin within {}; worker {}",
                           seconds(m_options.startup_deadline), desc);
      case StopCause::worker_deadline:
        return fmt::format("the worker deadline of {} passed; worker {}",
                           seconds(m_options.worker_deadline), desc);
      case StopCause::broken_line:
        return fmt::format("broken protocol line ({}); worker {}", broken_problem, desc);
      case StopCause::results_closed:
        return fmt::format("worker closed its results channel without bye; worker {}", desc);
      case StopCause::exited:
      case StopCause::interrupted:
        break;
      }
      if (end.signal) return fmt::format("worker {}", desc);
      if (end.exit_code && *end.exit_code != 0) return fmt::format("worker {}", desc);
      return saw_bye ? std::string("worker said bye without a result")
                     : fmt::format("worker {} without a result", desc);
    };

    bool worker_failed = false;
    std::string culprit;
    Status culprit_status = Status::error;
    if (running) {
      CaseOutcome o;
      o.status = status_by_end(Status::error);
      o.reason = why();
      o.process_end = end;
      o.signatures = match_signatures(err.since(begin_offset));
      o.stderr_tail = tail_lines(err.str());
      o.attempt = attempt;
      o.elapsed_ms = elapsed_running;
      culprit = m_cases[*running].id;
      culprit_status = o.status;
      record(*running, std::move(o));
      worker_failed = true;
    } else if (count_remaining() > 0 &&
               (finished_here == 0 || (saw_bye && cause == StopCause::exited && end.exit_code == 0))) {
      // Nothing to blame on one case, and a fresh worker would fail the same way.
      const std::string all = err.str();
      const Status status = status_by_end(Status::error);
      const std::string reason = finished_here == 0
                                     ? fmt::format("worker failed before its first case: {}", why())
                                     : "worker said bye without running this case";
      fail_rest(status, reason, end, match_signatures(all), tail_lines(all), attempt);
      if ((status == Status::crash || status == Status::timeout) && m_options.health_check)
        check_health(finished_here == 0 ? std::string("worker start") : last_finished);
      return false;
    } else if (count_remaining() > 0) {
      // Died between cases after making progress: resume without blaming a case.
      culprit = last_finished;
      culprit_status = status_by_end(Status::error);
      worker_failed = true;
    }
    if (!culprit.empty()) m_last_culprit = culprit;

    if (count_remaining() == 0) return false;
    if (worker_failed && (culprit_status == Status::crash || culprit_status == Status::timeout)) {
      if (!check_health(culprit)) return false;
    }
    return true;
  }

  // false: the device is unhealthy and the remaining cases were skipped.
  bool check_health(const std::string& after) {
    if (!m_options.health_check) return true;
    auto run = run_simple(*m_options.health_check, m_options.health_deadline);
    const bool healthy = run && !run->timed_out && !run->end.signal && run->end.exit_code == 0;
    if (healthy) return true;
    m_report.device_unhealthy = true;
    skip_rest(fmt::format("device unhealthy after {}", after));
    return false;
  }

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

} // namespace

WorkerRunReport run_worker(const WorkerCommand& cmd, const std::vector<PlannedCase>& cases,
                           const RunnerOptions& options, RunObserver* observer) {
  Runner runner(cmd, cases, options, observer);
  return runner.run();
}

} // namespace sdpa_doctor::isolate
