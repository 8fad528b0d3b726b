// The machine-facing inputs of a run: which Python the python probe uses, where the run's files go.
#include "run/run.hpp"

#include "core/build_info.hpp"
#include "core/paths.hpp"
#include "core/text.hpp"
#include "isolate/isolate.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <unistd.h>

namespace sdpa_doctor::run {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

std::string first_line(const std::string& text) {
  const auto lines = split_lines(text);
  for (const auto& l : lines)
    if (!l.empty()) return escape_to_one_line(l);
  return {};
}

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
  PythonChoice choice;
  choice.path = p.string();
  return choice;
}

constexpr const char* k_preflight_mark = "sdpa-doctor-preflight";

// The GPUs the pre-flight's torch listed: one JSON object each.
std::vector<Device> torch_gpus(const std::string& json_text) {
  std::vector<Device> out;
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, false);
  if (!j.is_array()) return out;
  for (const auto& g : j) {
    if (!g.is_object() || !g.contains("index") || !g.at("index").is_number_integer()) continue;
    Device d;
    d.index = g.at("index").get<int>();
    d.name = g.value("name", "");
    d.gfx_arch_name = g.value("arch", "");
    d.pci_bdf = g.value("pci", "");
    if (const auto m = g.find("memory"); m != g.end() && m->is_number_integer() && *m > 0)
      d.vram_total_bytes = m->get<int64_t>();
    out.push_back(std::move(d));
  }
  return out;
}

// What `python -c "import torch"` says, as the pre-flight's verdict on `choice`, and the GPUs that
// torch sees (the device the probes will use, whatever the doctor's own sources saw).
PythonChoice preflight(PythonChoice choice, std::chrono::milliseconds deadline) {
  isolate::Command cmd;
  cmd.argv = {choice.path, "-W", "ignore", "-c",
              fmt::format("import sys, json\n"
                          "try:\n"
                          "    import torch\n"
                          "except BaseException as e:\n"
                          "    print('{0} error', str(e) or type(e).__name__); sys.exit(0)\n"
                          "print('{0} torch', torch.__version__, flush=True)\n"
                          "import os\n"
                          "print('{0} torch-lib', os.path.join(os.path.dirname(torch.__file__), 'lib'))\n"
                          "gpus = []\n"
                          "try:\n"
                          "    for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):\n"
                          "        p = torch.cuda.get_device_properties(i)\n"
                          "        a = str(getattr(p, 'gcnArchName', '') or '')\n"
                          "        g = {{'index': i, 'name': p.name, 'memory': int(p.total_memory),\n"
                          "             'arch': a if a.startswith('gfx') else ''}}\n"
                          "        if hasattr(p, 'pci_bus_id'):\n"
                          "            g['pci'] = '%04x:%02x:%02x.0' % (getattr(p, 'pci_domain_id', 0),\n"
                          "                                             p.pci_bus_id, p.pci_device_id)\n"
                          "        gpus.append(g)\n"
                          "except BaseException as e:\n"
                          "    print('{0} gpus-error', str(e).splitlines()[0] if str(e) else type(e).__name__)\n"
                          "print('{0} gpus', json.dumps(gpus))\n",
                          k_preflight_mark)};
  auto run = isolate::run_simple(cmd, deadline);
  if (run && run->timed_out) {
    spdlog::info("{}: `import torch` did not answer within {} ms; running its workers anyway",
                 choice.path, deadline.count());
    return choice;
  }
  std::string answer;
  if (run)
    for (const std::string& line : split_lines(run->out)) {
      if (line.rfind(k_preflight_mark, 0) != 0) continue;
      const std::string said = line.substr(std::strlen(k_preflight_mark) + 1);
      if (said.rfind("gpus ", 0) == 0) choice.gpus = torch_gpus(said.substr(5));
      else if (said.rfind("torch-lib ", 0) == 0) choice.torch_lib_dir = said.substr(10);
      else if (said.rfind("gpus-error ", 0) == 0) choice.gpus_error = said.substr(11);
      else if (answer.empty()) answer = said;
    }
  if (answer.rfind("torch ", 0) == 0) {
    choice.torch_version = answer.substr(6);
    return choice;
  }
  choice.unusable = true;
  choice.unusable_path = choice.path;
  if (answer.rfind("error ", 0) == 0) {
    choice.reason = fmt::format("{} cannot import torch: {}", choice.path, answer.substr(6));
  } else {
    std::string said = run ? first_line(run->out.empty() ? run->err : run->out) : run.error().message;
    if (said.size() > 120) said = said.substr(0, 117) + "...";
    choice.reason = fmt::format("not a Python interpreter: {} {}", choice.path,
                                said.empty() ? (run ? isolate::describe(run->end) : std::string("did not run"))
                                             : "printed '" + said + "'");
  }
  choice.path.clear();
  return choice;
}

} // namespace

Expected<PythonChoice> choose_python(const std::string& requested,
                                     std::chrono::milliseconds preflight_deadline) {
  if (!requested.empty()) {
    auto chosen = requested_python(requested);
    if (!chosen) return chosen;
    return preflight(*chosen, preflight_deadline);
  }
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("SDPA_DOCTOR_PYTHON"); env && *env) candidates.push_back(env);
  if (const char* venv = std::getenv("VIRTUAL_ENV"); venv && *venv)
    candidates.push_back(std::string(venv) + "/bin/python");
  if (auto p = find_on_path("python3")) candidates.push_back(p->string());
  if (*build_info::k_python) candidates.push_back(build_info::k_python);
  for (const auto& c : candidates)
    if (::access(c.c_str(), X_OK) == 0 && finds_torch_quickly(c)) {
      PythonChoice choice;
      choice.path = c;
      return preflight(std::move(choice), preflight_deadline);
    }
  PythonChoice none;
  none.reason = "no python3 that can import torch was found (use --python PATH)";
  return none;
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
