// The machine-facing inputs of a run: which Python the python probe uses, where the run's files go.
#include "run/run.hpp"

#include "core/build_info.hpp"
#include "core/paths.hpp"
#include "isolate/isolate.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <unistd.h>

namespace sdpa_doctor::run {

namespace fs = std::filesystem;

namespace {

bool finds_torch_quickly(const std::string& python) {
  // find_spec does not import torch (seconds); it answers whether the import could work.
  isolate::Command cmd;
  cmd.argv = {python, "-c",
              "import importlib.util,sys; sys.exit(importlib.util.find_spec('torch') is None)"};
  auto run = isolate::run_simple(cmd, std::chrono::seconds(20));
  return run && !run->timed_out && run->end.exit_code == 0;
}

Expected<PythonChoice> requested_python(const std::string& requested) {
  fs::path p = requested;
  if (requested.find('/') == std::string::npos) {
    auto found = find_on_path(requested);
    if (!found) return make_error(fmt::format("--python: '{}' is not on PATH", requested));
    p = *found;
  }
  std::error_code ec;
  if (!fs::exists(p, ec)) return make_error(fmt::format("--python: '{}' does not exist", requested));
  if (fs::is_directory(p, ec) || ::access(p.c_str(), X_OK) != 0)
    return make_error(fmt::format("--python: '{}' is not an executable", requested));
  return PythonChoice{p.string(), ""};
}

} // namespace

Expected<PythonChoice> choose_python(const std::string& requested) {
  if (!requested.empty()) return requested_python(requested);
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("SDPA_DOCTOR_PYTHON"); env && *env) candidates.push_back(env);
  if (const char* venv = std::getenv("VIRTUAL_ENV"); venv && *venv)
    candidates.push_back(std::string(venv) + "/bin/python");
  if (auto p = find_on_path("python3")) candidates.push_back(p->string());
  if (*build_info::k_python) candidates.push_back(build_info::k_python);
  for (const auto& c : candidates)
    if (::access(c.c_str(), X_OK) == 0 && finds_torch_quickly(c)) return PythonChoice{c, ""};
  return PythonChoice{"", "no python3 that can import torch was found (use --python PATH)"};
}

Expected<std::string> make_run_dir(const std::string& requested) {
  std::error_code ec;
  if (!requested.empty()) {
    fs::create_directories(requested, ec);
    if (ec || !fs::is_directory(requested))
      return make_error(fmt::format("--run-dir {}: cannot create it: {}", requested, ec.message()));
    return requested;
  }
  std::string tmpl = (fs::temp_directory_path(ec) / "sdpa-doctor-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) return make_error("cannot create a run directory in the temp directory");
  return tmpl;
}

} // namespace sdpa_doctor::run
