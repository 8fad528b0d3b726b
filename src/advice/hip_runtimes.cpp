// two-hip-runtimes: a worker that found more than one HIP runtime mapped in its own process (its
// hello facts `hip_runtime_count` and `hip_runtimes`, read from /proc/self/maps once torch or our
// kernels were loaded). Said once per set of files, naming every worker that saw it. Pure.
#include "advice/advice.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace sdpa_doctor::advice {

void mapped_runtime_findings(const Report& report, std::vector<Finding>& out) {
  std::map<std::string, std::vector<std::string>> workers_by_files; // files -> "probe on device"
  for (const WorkerInfo& w : report.workers) {
    const auto count = w.facts.find("hip_runtime_count");
    const auto files = w.facts.find("hip_runtimes");
    if (count == w.facts.end() || files == w.facts.end() || count->second == "0" ||
        count->second == "1")
      continue;
    auto& names = workers_by_files[files->second];
    const std::string name = fmt::format("{} {} on {}", to_string(w.probe), w.variant, w.device);
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  for (const auto& [files, names] : workers_by_files) {
    Finding f;
    f.id = "two-hip-runtimes";
    f.severity = Severity::problem;
    f.message = fmt::format("more than one HIP runtime mapped in one worker process ({}): {}",
                            fmt::join(names, "; "), files);
    f.remedy = "two HIP runtimes in one process fight over the same devices (crashes, double "
               "frees at exit, pytorch/pytorch#141014): keep one on the library path (check "
               "LD_PRELOAD, LD_LIBRARY_PATH and what was linked against /opt/rocm)";
    out.push_back(std::move(f));
  }
}

} // namespace sdpa_doctor::advice
