#include "worker_process.hpp"

#include "support/run_binary.hpp"

#include "cases/cases.hpp"

#include "cases/tolerance.hpp"
#include "core/case.hpp"
#include "protocol/protocol.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

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

nlohmann::json WorkerRun::hello_facts() const {
  for (const auto& e : events)
    if (e.value("event", "") == "hello") return e.value("facts", nlohmann::json::object());
  return nlohmann::json::object();
}

std::vector<int> children_of(int pid) {
  std::vector<int> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == pid &&
        state != 'Z')
      out.push_back(std::stoi(entry.path().filename().string()));
  }
  return out;
}

std::vector<int> children_left(int pid) {
  std::vector<int> left = children_of(pid);
  for (int i = 0; i < 100 && !left.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    left = children_of(pid);
  }
  return left;
}

void write_one_case(const std::string& path) {
  using namespace sdpa_doctor;
  const Case c = *parse_case_spec("dtype=fp32,b=1,h=1,l=16,d=8");
  const Tolerance t = cases::default_tolerance(c.dtype);
  if (!protocol::write_cases_file(path, {protocol::make_case_line(c, t, cases::gradient_tolerance(t),
                                                                  "", 1, 1)}))
    throw std::runtime_error("cannot write " + path);
}

bool wait_for_socket(const std::string& path) {
  for (int i = 0; i < 200 && !std::filesystem::exists(path); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return std::filesystem::exists(path);
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
