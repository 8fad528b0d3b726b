// A journal someone changed: a finished one-cell check (the reference probe, a second or less)
// whose journal's check request is then edited, for what `check --resume` and `report` read.
#pragma once

#include "support/run_binary.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <string>

namespace sdpa_test {

// Runs that check in `run_dir` and gives its check request to `edit`; empty when it worked, else
// why not.
inline std::string edited_run(const std::string& run_dir,
                              const std::function<void(nlohmann::json&)>& edit) {
  const auto run = run_binary({doctor(), "check", "-q", "--probe", "reference", "--variant",
                               "ref-math", "--case", "dtype=fp32,b=1,h=1,l=8,d=8", "--run-dir",
                               run_dir});
  if (run.exit_code != 0) return "the check exited " + std::to_string(run.exit_code) + ": " + run.err;
  const std::string path = run_dir + "/journal.jsonl";
  const std::string journal = read_file(path);
  const size_t end = journal.find('\n');
  nlohmann::json start = nlohmann::json::parse(journal.substr(0, end), nullptr, false);
  if (!start.is_object() || !start.contains("header")) return "no start event in " + path;
  edit(start["header"]["check_request"]);
  write_file(path, start.dump() + journal.substr(end));
  return {};
}

} // namespace sdpa_test
