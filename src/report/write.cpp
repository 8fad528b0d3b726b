#include "report/report.hpp"
#include "core/io.hpp"
#include "core/text.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <fmt/format.h>
#include <unistd.h>

namespace sdpa_doctor::report {

namespace {

std::string upper(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return char(std::toupper(c)); });
  return out;
}

} // namespace

namespace {

Error write_error(const std::string& path, int err) {
  return Error{fmt::format("cannot write '{}': {}", path, std::strerror(err))};
}

// Straight into what is already there: a device, a FIFO, a terminal.
Expected<Written> write_in_place(const std::string& path, std::string_view text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return write_error(path, errno);
  bool ok = write_all(fd, text);
  int saved = errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    saved = errno;
  }
  if (!ok) return write_error(path, saved);
  return Written{path};
}

Expected<Written> write_to_stdout(std::string_view text) {
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    return make_error(fmt::format("cannot write the report to stdout: {}", std::strerror(errno)));
  if (!write_all(STDOUT_FILENO, text))
    return make_error(fmt::format("cannot write the report to stdout: {}", std::strerror(errno)));
  return Written{"-"};
}

} // namespace

Expected<Written> write_atomically(const std::string& path, std::string_view text) {
  if (path == "-") return write_to_stdout(text);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    return write_in_place(path, text);
  auto written = write_file_atomically(path, text, /*durable=*/true);
  if (!written) return make_error("cannot write " + written.error().message);
  return Written{path};
}

bool is_reportable_variable(std::string_view name) {
  const std::string u = upper(name);
  for (std::string_view secret : {"TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL"}) {
    if (u.find(secret) != std::string::npos) return false;
  }
  static constexpr std::string_view k_prefixes[] = {"HIP_",  "HSA_",     "ROCR_",  "ROCM_",
                                                    "AMD_",  "PYTORCH_", "TORCH_", "AOTRITON_"};
  static constexpr std::string_view k_names[] = {"CUDA_VISIBLE_DEVICES", "HF_HUB_OFFLINE",
                                                 "OMP_NUM_THREADS"};
  for (std::string_view p : k_prefixes) {
    if (name.substr(0, p.size()) == p) return true;
  }
  return std::find(std::begin(k_names), std::end(k_names), name) != std::end(k_names);
}

std::map<std::string, std::string>
reportable_environment(const std::map<std::string, std::string>& environment) {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : environment) {
    if (is_reportable_variable(k)) out[k] = v;
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> redactions(const Report& report) {
  std::vector<std::pair<std::string, std::string>> words;
  // Short names ("a", "ci") would shred unrelated text; only redact what can be told apart.
  for (const auto& [key, placeholder] : {std::pair{"hostname", "<host>"}, {"user", "<user>"}})
    if (auto it = report.host.find(key); it != report.host.end() && it->second.size() >= 3)
      words.emplace_back(it->second, placeholder);
  // Longest first, so "ws1.lab" goes before "ws1".
  std::sort(words.begin(), words.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  return words;
}

Report redact(Report report) {
  const auto words = redactions(report);
  report.host.erase("hostname");
  report.host.erase("user");
  const auto scrub = [&words](std::string& text) { replace_words(text, words); };
  if (words.empty()) return report;
  for (auto& [k, v] : report.host) scrub(v);
  for (auto& [k, v] : report.environment) scrub(v);
  for (CaseResult& r : report.results) {
    scrub(r.reason);
    scrub(r.stderr_tail);
    for (std::string& w : r.warnings) scrub(w);
  }
  for (WorkerInfo& w : report.workers) {
    scrub(w.available);
    for (auto& [k, v] : w.facts) scrub(v);
  }
  for (auto* list : {&report.findings, &report.inventory.findings}) {
    for (Finding& f : *list) {
      scrub(f.message);
      scrub(f.remedy);
    }
  }
  scrub(report.inventory.no_gpu_reason);
  for (auto& [k, v] : report.inventory.sources_status) scrub(v);
  return report;
}

} // namespace sdpa_doctor::report
