// Test helper: runs a probe worker as a real child with its results on a pipe (fd 3), the way
// the runner does, and collects the protocol lines.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace sdpa_test {

struct WorkerRun {
  int exit_code = -1; // -1 when killed by a signal
  int signal = 0;
  bool timed_out = false;
  std::string out, err;
  std::vector<nlohmann::json> events; // every results line, parsed
  std::vector<std::string> broken;    // lines that did not parse

  // The result event of a case, or null.
  nlohmann::json result(const std::string& case_id) const;
  std::vector<nlohmann::json> results() const;
  // The hello's facts (an empty object when it said none).
  nlohmann::json hello_facts() const;
};

// The live (not zombie) children of process `pid`: the workers a start-up server forked that
// still run.
std::vector<int> children_of(int pid);
// Those still there after up to 2 s: a killed worker's child goes with it.
std::vector<int> children_left(int pid);

// A cases file with one small fp32 case (what a start-up server's workers run).
void write_one_case(const std::string& path);

// Waits up to 2 s for a start-up server's socket: it binds before it loads what is slow to load.
bool wait_for_socket(const std::string& path);

// argv[0] must be a path. `set_env` is added to the test's environment; `unset_env` removed.
WorkerRun run_worker_process(const std::vector<std::string>& argv,
                             const std::map<std::string, std::string>& set_env = {},
                             const std::vector<std::string>& unset_env = {}, int timeout_s = 300);

} // namespace sdpa_test
