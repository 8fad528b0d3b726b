// The machine-facing inputs of a run: which Python the python probe uses.
#include "run/run.hpp"

#include "core/build_info.hpp"
#include "core/paths.hpp"
#include "core/text.hpp"
#include "isolate/isolate.hpp"
#include "run/launch.hpp"
#include "workers/planted_fault.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
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

constexpr const char* k_preflight_mark = "sdpa-doctor-preflight";
// find_spec reads a few directories: an interpreter slower than this is not one to wait for.
constexpr std::chrono::milliseconds k_find_deadline{20'000};

// A JSON list of strings from a marked line; empty when it is not one.
std::vector<std::string> string_list(const std::string& json_text) {
  std::vector<std::string> out;
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, false);
  if (!j.is_array()) return out;
  for (const auto& e : j)
    if (e.is_string()) out.push_back(e.get<std::string>());
  return out;
}

// Where `python`'s torch keeps its libraries, found without importing torch (seconds): find_spec
// answers whether the import could work. nullopt when it has no torch, or did not answer within
// `deadline` (then `timed_out` says so).
std::optional<std::vector<std::string>> torch_lib_dirs(const std::string& python,
                                                       std::chrono::milliseconds deadline,
                                                       bool* timed_out = nullptr) {
  isolate::Command cmd;
  cmd.argv = {
      python, "-c",
      fmt::format("import importlib.util, glob, json, os, sys\n"
                  "s = importlib.util.find_spec('torch')\n"
                  "if s is None or not s.submodule_search_locations: sys.exit(1)\n"
                  "d = [os.path.join(list(s.submodule_search_locations)[0], 'lib')]\n"
                  "for p in sys.path:\n"
                  "    d += sorted(glob.glob(os.path.join(p or os.curdir, '_rocm_sdk_*', 'lib')))\n"
                  "d = [os.path.abspath(x) for x in d if os.path.isdir(x)]\n"
                  "print('{} dirs', json.dumps(list(dict.fromkeys(d))))\n",
                  k_preflight_mark)};
  auto run = isolate::run_simple(cmd, std::min(deadline, k_find_deadline));
  if (timed_out) *timed_out = run && run->timed_out;
  if (!run || run->timed_out || run->end.exit_code != 0) return std::nullopt;
  const std::string mark = std::string(k_preflight_mark) + " dirs ";
  for (const std::string& line : split_lines(run->out))
    if (line.rfind(mark, 0) == 0) return string_list(line.substr(mark.size()));
  return std::vector<std::string>{};
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

// An interpreter whose start-up step never returned cannot say hello to a worker either: it is
// unusable, and the reason names the step, so nothing of its hang is blamed on a backend.
PythonChoice hung_python(PythonChoice choice, std::string_view step,
                         std::chrono::milliseconds deadline) {
  choice.unusable = true;
  choice.unusable_path = choice.path;
  choice.reason = fmt::format("{}: {} did not return in {:g} s: a wedged GPU or driver does this",
                              choice.path, step, double(deadline.count()) / 1000.0);
  choice.path.clear();
  return choice;
}

} // namespace

// What the probe's pre-flight says (does `import torch` work, which version), as the verdict on
// `choice`, the GPUs that torch sees (the device the probes will use, whatever the doctor's own
// sources saw) and the HIP runtime it loaded.
PythonChoice preflight_python(PythonChoice choice, std::chrono::milliseconds deadline,
                              const std::string& server) {
  if (choice.path.empty()) return choice;
  if (choice.hung) // it did not even find torch in time: do not wait for it twice
    return hung_python(std::move(choice), "finding torch (importlib.util.find_spec)",
                       std::min(deadline, k_find_deadline));
  // The probe's own pre-flight (sdpa_probe/preflight.py): a child of the start-up server where
  // one runs, its torch already imported; else this interpreter imports torch itself.
  const auto script = python_probe_script();
  if (!script) {
    choice.unusable = true;
    choice.unusable_path = choice.path;
    choice.reason = k_no_python_probe;
    choice.path.clear();
    return choice;
  }
  isolate::Command cmd;
  cmd.argv = {choice.path, *script, "--preflight"};
  if (!server.empty()) cmd.env.emplace_back("SDPA_DOCTOR_PROBE_SERVER", server);
  auto run = isolate::run_simple(cmd, deadline);
  if (run && run->timed_out) {
    const bool imported = run->out.find(fmt::format("{} torch ", k_preflight_mark)) != std::string::npos;
    return hung_python(std::move(choice),
                       imported ? "listing torch's GPUs (torch.cuda)" : "import torch", deadline);
  }
  std::string answer;
  if (run)
    for (const std::string& line : split_lines(run->out)) {
      if (line.rfind(k_preflight_mark, 0) != 0) continue;
      const std::string said = line.substr(std::strlen(k_preflight_mark) + 1);
      if (said.rfind("gpus ", 0) == 0) choice.gpus = torch_gpus(said.substr(5));
      else if (said.rfind("gpus-error ", 0) == 0) choice.gpus_error = said.substr(11);
      else if (said.rfind("hip-runtimes ", 0) == 0)
        choice.torch_hip_runtimes = string_list(said.substr(13));
      else if (answer.empty()) answer = said;
    }
  if (answer.rfind("torch ", 0) == 0) {
    choice.torch_version = answer.substr(6);
    return choice;
  }
  choice.unusable = true;
  choice.unusable_path = choice.path;
  // A refused interpreter is no torch: nothing it printed (a script can print GPUs) is used.
  choice.gpus.clear();
  choice.gpus_error.clear();
  choice.torch_hip_runtimes.clear();
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

PythonSearch python_search_here() {
  PythonSearch s;
  if (const char* env = std::getenv("SDPA_DOCTOR_PYTHON")) s.env_python = env;
  s.exe_dir = executable_dir().string();
  if (const char* venv = std::getenv("VIRTUAL_ENV")) s.virtual_env = venv;
  if (auto p = find_on_path("python3")) s.path_python3 = p->string();
  s.build_python = build_info::k_python;
  return s;
}

std::vector<std::string> python_candidates(const PythonSearch& search) {
  std::vector<std::string> out;
  const auto add = [&out](std::string path) {
    if (!path.empty() && std::find(out.begin(), out.end(), path) == out.end())
      out.push_back(std::move(path));
  };
  add(search.env_python);
  std::error_code ec;
  if (!search.exe_dir.empty()) {
    // pip installs the doctor into <env>/bin beside that environment's interpreter: the torch it
    // was installed for, and the one its LibTorch worker was built against.
    const fs::path bin = search.exe_dir;
    const fs::path env = bin.parent_path();
    if (fs::exists(env / "pyvenv.cfg", ec) || fs::is_directory(env / "conda-meta", ec))
      for (const char* name : {"python3", "python"})
        if (::access((bin / name).c_str(), X_OK) == 0) {
          add((bin / name).string());
          break;
        }
  }
  if (!search.virtual_env.empty()) add(search.virtual_env + "/bin/python");
  add(search.path_python3);
  // An installed doctor does not reach back into the machine it was built on.
  if (!search.exe_dir.empty() && fs::exists(fs::path(search.exe_dir) / "CMakeCache.txt", ec))
    add(search.build_python);
  return out;
}

Expected<PythonChoice> locate_python(const std::string& requested,
                                     std::chrono::milliseconds deadline) {
  if (!requested.empty()) {
    auto chosen = requested_python(requested);
    if (chosen)
      chosen->torch_lib_dirs = torch_lib_dirs(chosen->path, deadline, &chosen->hung)
                                   .value_or(std::vector<std::string>{});
    return chosen;
  }
  for (const auto& c : python_candidates(python_search_here())) {
    if (::access(c.c_str(), X_OK) != 0) continue;
    if (auto dirs = torch_lib_dirs(c, deadline)) {
      PythonChoice choice;
      choice.path = c;
      choice.torch_lib_dirs = std::move(*dirs);
      return choice;
    }
  }
  PythonChoice none;
  none.reason = "no python3 that can import torch was found (use --python PATH)";
  return none;
}

Expected<std::string> planted_faults_in_environment() {
  auto faults = workers::planted_faults_from_environment();
  if (!faults) return make_error(faults.error().message);
  const char* text = std::getenv("SDPA_DOCTOR_TEST_FAULT");
  return faults->empty() || !text ? std::string{} : std::string(text);
}

} // namespace sdpa_doctor::run
