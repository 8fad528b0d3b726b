#include "worker_process.hpp"

#include "support/run_binary.hpp"

#include "cases/cases.hpp"

#include <sstream>

namespace sdpa_test {

nlohmann::json WorkerRun::result(const std::string& case_id) const {
  for (const auto& e : events)
    if (e.value("event", "") == "result" && e.value("case", "") == case_id) return e;
  return nullptr;
}

std::vector<nlohmann::json> WorkerRun::results() const {
  std::vector<nlohmann::json> found;
  for (const auto& e : events)
    if (e.value("event", "") == "result") found.push_back(e);
  return found;
}

WorkerRun run_worker_process(const std::vector<std::string>& argv,
                             const std::map<std::string, std::string>& set_env,
                             const std::vector<std::string>& unset_env, int timeout_s) {
  RunOptions options;
  options.set_env = set_env;
  options.unset_env = unset_env;
  options.timeout_s = timeout_s;
  options.results_fd = true;
  const RunResult done = run_binary(argv, options);
  WorkerRun run;
  run.exit_code = done.exit_code;
  run.signal = done.signal;
  run.timed_out = done.timed_out;
  run.out = done.out;
  run.err = done.err;
  std::istringstream lines(done.results);
  std::string line;
  while (std::getline(lines, line)) {
    try {
      nlohmann::json event = nlohmann::json::parse(line);
      // The events as the doctor reads them: a worker measures, the doctor's judge gives the
      // verdict (isolate::RunnerOptions::judge).
      sdpa_doctor::cases::judge_worker_event(event);
      run.events.push_back(std::move(event));
    } catch (const nlohmann::json::exception&) {
      run.broken.push_back(line);
    }
  }
  return run;
}

} // namespace sdpa_test
