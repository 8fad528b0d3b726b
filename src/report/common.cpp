#include "report/common.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <fmt/format.h>

namespace sdpa_doctor::report::detail {

std::string_view status_label(Status s) {
  switch (s) {
  case Status::pass: return "PASS";
  case Status::mismatch: return "MISMATCH";
  case Status::nonfinite: return "NONFINITE";
  case Status::unsupported: return "UNSUP";
  case Status::error: return "ERROR";
  case Status::crash: return "CRASH";
  case Status::timeout: return "TIMEOUT";
  case Status::skipped: return "SKIP";
  }
  return "?";
}

std::string_view status_symbol(Status s, bool unicode) {
  switch (s) {
  case Status::pass: return unicode ? "✓" : "+";
  case Status::mismatch: return unicode ? "≠" : "x";
  case Status::nonfinite: return unicode ? "∞" : "n";
  case Status::unsupported: return unicode ? "–" : "-";
  case Status::error: return "!";
  case Status::crash: return unicode ? "✗" : "X";
  case Status::timeout: return "~";
  case Status::skipped: return "?";
  }
  return "?";
}

std::string_view status_ansi(Status s) {
  switch (s) {
  case Status::pass: return "\x1b[32m";
  case Status::mismatch:
  case Status::nonfinite: return "\x1b[35m";
  case Status::unsupported: return "\x1b[2m";
  case Status::error: return "\x1b[33m";
  case Status::crash:
  case Status::timeout: return "\x1b[1;31m";
  case Status::skipped: return "\x1b[36m";
  }
  return "";
}

int status_order(Status s) {
  switch (s) {
  case Status::crash: return 0;
  case Status::timeout: return 1;
  case Status::error: return 2;
  case Status::nonfinite: return 3;
  case Status::mismatch: return 4;
  case Status::pass: return 5;
  case Status::unsupported: return 6;
  case Status::skipped: return 7;
  }
  return 8;
}

std::vector<DeviceMatrix> build_matrices(const Report& report) {
  std::vector<DeviceMatrix> out;
  auto matrix_for = [&](const std::string& device) -> DeviceMatrix& {
    for (DeviceMatrix& m : out) {
      if (m.device == device) return m;
    }
    out.push_back(DeviceMatrix{device, {}, {}, {}});
    return out.back();
  };
  for (const std::string& t : report.targets) matrix_for(t);
  for (const CaseResult& r : report.results) {
    DeviceMatrix& m = matrix_for(r.device);
    auto row = std::find_if(m.rows.begin(), m.rows.end(), [&](const MatrixRow& x) {
      return x.probe == r.probe && x.variant == r.variant && x.mode == r.mode;
    });
    if (row == m.rows.end()) {
      m.rows.push_back(MatrixRow{r.probe, r.variant, r.mode, {}});
      row = m.rows.end() - 1;
    }
    ++row->counts[r.kase.dtype][r.status];
    ++m.totals[r.status];
    if (std::find(m.dtypes.begin(), m.dtypes.end(), r.kase.dtype) == m.dtypes.end())
      m.dtypes.push_back(r.kase.dtype);
  }
  for (DeviceMatrix& m : out) {
    std::sort(m.dtypes.begin(), m.dtypes.end());
    // Stable: within a probe, variants keep the order the plan ran them in.
    std::stable_sort(m.rows.begin(), m.rows.end(), [](const MatrixRow& a, const MatrixRow& b) {
      return static_cast<int>(a.probe) < static_cast<int>(b.probe);
    });
  }
  return out;
}

const Device* device_for_target(const Report& report, const std::string& target) {
  if (target.rfind("cuda:", 0) != 0) return nullptr;
  const int index = std::atoi(target.c_str() + 5);
  for (const Device& d : report.inventory.devices) {
    if (d.index == index) return &d;
  }
  return nullptr;
}

std::vector<NotRun> workers_not_run(const Report& report, const std::string& device) {
  std::vector<NotRun> out;
  for (const WorkerInfo& w : report.workers) {
    if (w.device != device || w.available.empty()) continue;
    const auto same = std::find_if(out.begin(), out.end(), [&](const NotRun& n) {
      return n.probe == w.probe && n.reason == w.available;
    });
    if (same == out.end()) out.push_back({w.probe, {w.variant}, w.available});
    else if (std::find(same->variants.begin(), same->variants.end(), w.variant) == same->variants.end())
      same->variants.push_back(w.variant);
  }
  return out;
}

std::string gfx_line(const Report& report, const std::string& device) {
  const Device* d = device_for_target(report, device);
  if (!d || !d->gfx) return {};
  const GfxTruth& g = *d->gfx;
  const auto list = [](const std::vector<std::string>& v) {
    return v.empty() ? std::string("?") : fmt::format("{}", fmt::join(v, ","));
  };
  // An NVIDIA GPU's arch is an sm_XY: same verdict words, its own label.
  std::string line = fmt::format("{}: physical {} · effective {}",
                                 g.physical.rfind("sm_", 0) == 0 ? "arch" : "gfx",
                                 g.physical.empty() ? "?" : g.physical,
                                 g.effective.empty() ? "?" : g.effective);
  if (!g.override_env.empty() && g.effective != g.physical) line += " (" + g.override_env + ")";
  line += " · torch built for " + list(g.compiled_for);
  if (!g.aotriton_images.empty()) line += " · AOTriton images " + list(g.aotriton_images);
  if (g.ck_sdpa == "yes" || g.ck_sdpa == "no") line += " · CK SDPA " + g.ck_sdpa;
  return line + fmt::format(" → {}: {}", g.verdict, g.detail);
}

std::string format_ms(double ms) {
  if (!std::isfinite(ms)) return "n/a";
  // A time read from a file may be any double: past a day, three significant digits (1e+305 s).
  if (ms >= 1e8) return fmt::format("{:.3g} s", ms / 1000);
  if (ms >= 1000) return fmt::format("{:.2f} s", ms / 1000);
  if (ms >= 10) return fmt::format("{:.0f} ms", ms);
  return fmt::format("{:.2f} ms", ms);
}

std::string device_title(const Report& report, const std::string& device) {
  if (device == "cpu") return "cpu · host CPU";
  std::vector<std::string> parts{device};
  if (const Device* d = device_for_target(report, device)) {
    if (!d->name.empty()) parts.push_back(d->name);
    if (!d->gfx_target.empty())
      parts.push_back(d->family.empty() || d->family == "unknown"
                          ? d->gfx_target
                          : fmt::format("{} ({})", d->gfx_target, d->family));
    if (!d->sm_target.empty())
      parts.push_back(d->family.empty() ? d->sm_target
                                        : fmt::format("{} ({})", d->sm_target, d->family));
    if (d->vram_total_bytes) parts.push_back(format_bytes(*d->vram_total_bytes));
    if (!d->pci_bdf.empty()) parts.push_back(d->pci_bdf);
  }
  return fmt::format("{}", fmt::join(parts, " · "));
}

namespace {

std::string get(const std::map<std::string, std::string>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? std::string{} : it->second;
}

std::string worker_version(const Report& report, Probe probe, const std::string& key) {
  for (const WorkerInfo& w : report.workers) {
    if (w.probe != probe) continue;
    std::string v = get(w.versions, key);
    if (!v.empty()) return v;
  }
  return {};
}

} // namespace

std::vector<std::pair<std::string, std::string>> environment_lines(const Report& report) {
  std::vector<std::pair<std::string, std::string>> out;
  auto join_nonempty = [](std::vector<std::string> parts) {
    parts.erase(std::remove(parts.begin(), parts.end(), std::string{}), parts.end());
    return parts.empty() ? std::string("unknown") : fmt::format("{}", fmt::join(parts, " · "));
  };
  const auto& h = report.host;
  const auto& v = report.versions;
  std::string kernel = get(h, "kernel");
  out.emplace_back("host", join_nonempty({get(h, "hostname"), get(h, "os"),
                                          kernel.empty() ? "" : "kernel " + kernel}));

  std::string driver = get(v, "amdgpu");
  if (driver.empty()) driver = get(report.inventory.runtime, "amdgpu_driver_version");
  if (driver.empty()) {
    for (const Device& d : report.inventory.devices) {
      if (!d.driver_version.empty() && !is_nvidia_gpu(d)) {
        driver = d.driver_version;
        break;
      }
    }
  }
  const auto& runtime = report.inventory.runtime;
  // NVIDIA's driver, as NVML names it, with the newest CUDA it runs.
  std::string nvidia = get(runtime, "nvidia_driver_version");
  if (!nvidia.empty()) {
    const std::string cuda = get(runtime, "nvidia_driver_cuda_version");
    nvidia = "NVIDIA " + nvidia + (cuda.empty() ? "" : " (CUDA " + cuda + ")");
  }
  out.emplace_back("driver", join_nonempty({driver.empty() ? "" : "amdgpu " + driver, nvidia}));

  // What the torch under test was built for: it decides which vendor's stack the header speaks of.
  const std::string build = get(runtime, "torch_build");
  const bool cuda_torch = build.rfind("CUDA", 0) == 0;
  const bool rocm_torch = build.rfind("ROCm", 0) == 0;
  std::string rocm = get(v, "rocm");
  std::string hip = get(v, "hip_runtime");
  if (hip.empty()) hip = get(runtime, "hip_runtime_version");
  if (hip.empty()) hip = get(v, "hip");
  if (!cuda_torch || !rocm.empty() || !hip.empty())
    out.emplace_back("rocm", join_nonempty({rocm.empty() ? "" : "ROCm " + rocm,
                                            hip.empty() ? "" : "HIP runtime " + hip}));
  if (const std::string api = get(runtime, "cuda_driver_api_version"); cuda_torch || !api.empty())
    out.emplace_back("cuda", api.empty() ? "no CUDA driver (libcuda.so.1)" : "driver API " + api);

  std::string cpp = get(v, "torch_cpp");
  if (cpp.empty()) cpp = worker_version(report, Probe::torch, "torch");
  std::string py = get(v, "torch_python");
  if (py.empty()) py = worker_version(report, Probe::python, "torch");
  if (cpp.empty() && py.empty()) py = get(v, "torch");
  std::string python = get(v, "python");
  if (python.empty()) python = worker_version(report, Probe::python, "python");
  std::string aot = get(v, "aotriton");
  if (aot.empty()) aot = worker_version(report, Probe::python, "aotriton");
  if (aot.empty()) aot = worker_version(report, Probe::torch, "aotriton");
  out.emplace_back("torch", join_nonempty({cpp.empty() ? "" : "C++ " + cpp,
                                           py.empty() ? "" : "Python " + py,
                                           python.empty() ? "" : "python " + python,
                                           build.empty() ? "" : build + " build"}));
  // The run-time compiler of our own GPU kernels: the torch's vendor's, else whichever was found.
  const auto compiler = [&](const char* key, const char* name) -> std::string {
    const std::string file = get(runtime, std::string(key) + "_library");
    if (file.empty()) return {};
    const std::string version = get(runtime, std::string(key) + "_version");
    return fmt::format("{}{} ({})", name, version.empty() ? "" : " " + version, file);
  };
  const std::string nvrtc = compiler("nvrtc", "NVRTC"), hiprtc = compiler("hiprtc", "hipRTC");
  std::string gpu_compiler;
  if (cuda_torch) gpu_compiler = nvrtc.empty() ? "no NVRTC found: our kernels run on the CPU only" : nvrtc;
  else if (rocm_torch) gpu_compiler = hiprtc.empty() ? "no hipRTC found: our kernels run on the CPU only" : hiprtc;
  else gpu_compiler = join_nonempty({hiprtc, nvrtc});
  if (!gpu_compiler.empty() && gpu_compiler != "unknown") out.emplace_back("compiler", gpu_compiler);
  if (!cuda_torch || !aot.empty()) // AOTriton is ROCm's: nothing to say of a CUDA torch
    out.emplace_back("aotriton", aot.empty() ? "unknown" : aot);
  if (!report.planted_faults.empty())
    out.emplace_back("planted", fmt::format("SDPA_DOCTOR_TEST_FAULT={}: faults planted on purpose, "
                                            "so this is not a measurement of the backends",
                                            escape_to_one_line(report.planted_faults)));
  return out;
}

std::vector<const KnownIssueMatch*> issues_for(const Report& report, const CaseResult& r) {
  std::vector<const KnownIssueMatch*> out;
  for (const KnownIssueMatch& m : report.known_issues) {
    if (m.device != r.device) continue;
    if (!m.variant.empty() && m.variant != r.variant) continue;
    if (std::find(m.case_ids.begin(), m.case_ids.end(), r.case_id) != m.case_ids.end())
      out.push_back(&m);
  }
  return out;
}

std::vector<const CaseResult*> failures(const Report& report) {
  std::vector<const CaseResult*> out;
  for (const CaseResult& r : report.results) {
    if (is_failure_by_default(r.status)) out.push_back(&r);
  }
  return out;
}

std::string process_end_text(const CaseResult& r) {
  if (!r.process_end) return {};
  const ProcessEnd& e = *r.process_end;
  std::vector<std::string> parts;
  if (e.signal) {
    parts.push_back(fmt::format("signal {}", e.signal_name.empty() ? std::to_string(*e.signal)
                                                                   : e.signal_name));
    if (e.core_dumped) parts.push_back("(core dumped)");
  } else if (e.exit_code) {
    parts.push_back(fmt::format("exit {}", *e.exit_code));
  }
  if (e.killed_by_doctor) parts.push_back("killed by the doctor");
  return fmt::format("{}", fmt::join(parts, " "));
}

std::vector<std::string> last_lines(std::string_view text, size_t n) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    std::string line(text.substr(start, nl - start));
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) lines.push_back(std::move(line));
    start = nl + 1;
  }
  if (lines.size() > n) lines.erase(lines.begin(), lines.end() - std::ptrdiff_t(n));
  return lines;
}

std::string summary_counts(const std::map<Status, int>& totals) {
  std::vector<std::pair<Status, int>> items(totals.begin(), totals.end());
  std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
    return status_order(a.first) < status_order(b.first);
  });
  std::vector<std::string> parts;
  for (const auto& [s, n] : items) {
    if (n > 0) parts.push_back(fmt::format("{} {}", n, to_string(s)));
  }
  return parts.empty() ? std::string("no cases") : fmt::format("{}", fmt::join(parts, " · "));
}

std::string exit_code_text(const Report& report) {
  const bool rerun_failed =
      std::any_of(report.recommendations.begin(), report.recommendations.end(),
                  [](const Recommendation& r) {
                    return !r.rejected.empty() || (r.verification && r.verification->ran &&
                                                   !r.verification->verified());
                  });
  if (report.exit_code == exit_code::failures && rerun_failed && failures(report).empty())
    return "exit code 1 (a re-run under the recommended flags failed)";
  return fmt::format("exit code {}", report.exit_code);
}

std::string cells_summary(const Report& report) {
  std::set<std::string> cases, devices;
  std::set<std::pair<Probe, std::string>> variants;
  size_t compiled = 0; // the compile family's cells, beside the eager product
  for (const CaseResult& r : report.results) {
    if (r.mode == Mode::compiled) {
      ++compiled;
      continue;
    }
    cases.insert(r.case_id);
    devices.insert(r.device);
    variants.insert({r.probe, r.variant});
  }
  const size_t cells = report.results.size();
  const size_t eager = cells - compiled;
  const auto plural = [](size_t n, const char* word) { return count_of(n, word); };
  if (eager <= 1 || cases.size() * variants.size() * devices.size() != eager)
    return plural(cells, "cell");
  std::string out = plural(cases.size(), "case") + " × " + plural(variants.size(), "variant");
  if (devices.size() > 1) out += " × " + plural(devices.size(), "device");
  if (compiled > 0) out += " + " + plural(compiled, "compiled cell");
  return out + " = " + plural(cells, "cell");
}

std::string count_of(size_t n, std::string_view noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

namespace {

size_t longest_backtick_run(std::string_view s) {
  size_t longest = 0, run = 0;
  for (char c : s) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return longest;
}

bool alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

} // namespace

std::string markdown_text(std::string_view text) {
  const std::string line = escape_to_one_line(text);
  std::string out;
  out.reserve(line.size());
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    switch (c) {
    case '<': out += "&lt;"; break; // no tag can open without it, so '>' may stay
    case '&': out += "&amp;"; break;
    case '\\':
    case '`':
    case '*':
    case '~':
      out += '\\';
      out += c;
      break;
    case ']':
      // Only "](" makes a link (the document defines no reference), so "flash[ck]" stays as it is.
      if (i + 1 < line.size() && line[i + 1] == '(') out += '\\';
      out += c;
      break;
    case '_':
      // Inside a word (mem_efficient) '_' is never emphasis: left as it is, so names read.
      if (i == 0 || i + 1 == line.size() || !alnum(line[i - 1]) || !alnum(line[i + 1])) out += '\\';
      out += c;
      break;
    default: out += c;
    }
  }
  return out;
}

std::string markdown_code(std::string_view text) {
  const std::string line = escape_to_one_line(text);
  if (line.empty()) return "` `";
  const std::string fence(longest_backtick_run(line) + 1, '`');
  // A space each side keeps a leading or trailing backtick (or space) from touching the fence.
  const bool pad = line.front() == '`' || line.back() == '`' || line.front() == ' ' ||
                   line.back() == ' ';
  return pad ? fence + " " + line + " " + fence : fence + line + fence;
}

std::string markdown_cell(std::string_view markdown) {
  std::string out;
  for (char c : markdown) {
    if (c == '|') out += "\\|";
    else if (c == '\n' || c == '\r') out += ' ';
    else out += c;
  }
  return out;
}

std::string markdown_fence(std::string_view body, std::string_view lang) {
  const std::string fence(std::max<size_t>(3, longest_backtick_run(body) + 1), '`');
  std::string out = fence + std::string(lang) + "\n" + std::string(body);
  if (out.back() != '\n') out += "\n";
  return out + fence + "\n";
}

std::string html_text(std::string_view text) {
  std::string out;
  for (char c : escape_to_one_line(text)) {
    switch (c) {
    case '<': out += "&lt;"; break;
    case '>': out += "&gt;"; break;
    case '&': out += "&amp;"; break;
    case '"': out += "&quot;"; break;
    default: out += c;
    }
  }
  return out;
}

std::string markdown_link(std::string_view text, std::string_view url) {
  const bool web = url.rfind("https://", 0) == 0 || url.rfind("http://", 0) == 0;
  const bool plain = std::all_of(url.begin(), url.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u > 0x20 && u < 0x7F && std::string_view("<>()\"'`\\").find(c) == std::string_view::npos;
  });
  if (web && plain) return fmt::format("[{}]({})", markdown_text(text), url);
  if (url.empty()) return markdown_text(text);
  return markdown_text(text) + " " + markdown_code(url);
}

std::string ascii_dots(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 2, "\u00b7") == 0) {
      out += '-';
      ++i;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::string verification_line(const Verification& v) {
  if (!v.ran) return fmt::format("not verified: {}", v.note);
  const std::string how = fmt::format("{}, {:.1f} s", v.how, v.seconds);
  if (v.verified())
    return fmt::format("verified: {}/{} under these flags ({})", v.passed,
                       count_of(size_t(v.total), "case"), how);
  return fmt::format("NOT verified: {}/{} passed under these flags ({}): {}", v.passed,
                     count_of(size_t(std::max(v.total, 0)), "case"), how, v.note);
}

} // namespace sdpa_doctor::report::detail
