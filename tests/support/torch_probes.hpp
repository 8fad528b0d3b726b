// The torch probes an end-to-end test can run here, from its target's definitions:
// SDPA_TEST_PYTHON (the configured Python) and SDPA_TEST_HAVE_TORCH_WORKER (the LibTorch plugin
// was built). Header-only and per test binary: each target defines its own.
#pragma once

#include "support/run_binary.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace sdpa_test {

#ifdef SDPA_TEST_HAVE_TORCH_WORKER
static constexpr bool k_torch_worker = true;
#else
static constexpr bool k_torch_worker = false;
#endif

#ifdef SDPA_TEST_PYTHON
static const std::string k_test_python = SDPA_TEST_PYTHON;

static inline bool python_has_torch() { return imports_torch(k_test_python); }

// "python", "libtorch" or "python,libtorch" for `check --probe`; empty where neither runs here.
static inline std::string runnable_torch_probes() {
  std::string probes = python_has_torch() ? "python" : "";
  if (k_torch_worker) probes += probes.empty() ? "libtorch" : ",libtorch";
  return probes;
}

// Runs a Python snippet with the probe package (src/workers/python) importable, as a test of the
// probe's side of a switch or a format.
static inline RunResult run_probe_snippet(const std::string& script) {
  RunOptions o;
  o.set_env = {{"PYTHONPATH", source_path("src/workers/python")}};
  return run_binary({k_test_python, "-c", script}, o);
}

struct CheckedRun {
  RunResult run;
  nlohmann::json report;
};

// `sdpa-doctor check` of these cases, probes and variants with the test's Python, its report and
// run folder in `dir`, with SDPA_DOCTOR_TEST_FAULT set to `fault` unless it is empty.
static inline CheckedRun check_cases(const std::vector<std::string>& specs,
                                     const std::string& probes, const std::string& variants,
                                     const std::string& fault, const TempDir& dir) {
  std::vector<std::string> argv = {doctor(), "check",  "--probe",  probes,
                                   "--variant", variants, "--python", k_test_python};
  for (const std::string& s : specs) argv.insert(argv.end(), {"--case", s});
  argv.insert(argv.end(), {"--json", dir.file("r.json"), "--run-dir", dir.file("run")});
  RunOptions o;
  o.set_env = {{"NO_COLOR", "1"}};
  if (!fault.empty()) o.set_env["SDPA_DOCTOR_TEST_FAULT"] = fault;
  o.timeout_s = 600;
  CheckedRun out{run_binary(argv, o), nlohmann::json()};
  out.report = nlohmann::json::parse(read_file(dir.file("r.json")));
  return out;
}
#endif

} // namespace sdpa_test
