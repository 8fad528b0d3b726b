#include "report/common.hpp"
#include "report/report.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <set>

namespace sdpa_doctor::report {

using namespace detail;

namespace {

std::string cell_escape(std::string_view s) { return markdown_cell(s); }

// Inline code that survives backticks inside the text.
std::string code(std::string_view s) {
  return s.find('`') == std::string_view::npos ? fmt::format("`{}`", s)
                                               : fmt::format("`` {} ``", s);
}

std::string fenced(std::string_view body, std::string_view lang) {
  size_t longest = 0, run = 0;
  for (char c : body) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  const std::string fence(std::max<size_t>(3, longest + 1), '`');
  std::string out = fence + std::string(lang) + "\n" + std::string(body);
  if (out.back() != '\n') out += "\n";
  return out + fence + "\n";
}

// The repro script under its heading, fenced; for a result whose fields the doctor does not know
// (a report from elsewhere), the reason there is no script, as text.
std::string repro_block(const CaseResult& r, std::string_view heading) {
  auto script = render_repro(r);
  if (!script) return fmt::format("\nNo repro script: {}.\n", code(script.error().message));
  return std::string(heading) + fenced(*script, "python");
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
    case '<': out += "&lt;"; break;
    case '>': out += "&gt;"; break;
    case '&': out += "&amp;"; break;
    default: out += c;
    }
  }
  return out;
}

std::string matrix_cell(const std::map<Status, int>& counts) {
  std::vector<std::pair<Status, int>> items(counts.begin(), counts.end());
  std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
    return status_order(a.first) < status_order(b.first);
  });
  int total = 0;
  for (const auto& [s, n] : items) total += n;
  std::vector<std::string> parts;
  for (const auto& [s, n] : items) {
    parts.push_back(items.size() == 1
                        ? fmt::format("{} {} {}/{}", status_symbol(s, true), status_label(s), n, total)
                        : fmt::format("{} {} {}", status_symbol(s, true), status_label(s), n));
  }
  return fmt::format("{}", fmt::join(parts, " · "));
}

using FirstInCell = std::map<std::tuple<std::string, int, std::string, int, int>, std::string>;

std::string header_line(const Report& report) {
  std::vector<std::string> parts{fmt::format("sdpa-doctor {}", report.tool_version)};
  if (!report.git_revision.empty()) parts.back() += fmt::format(" ({})", report.git_revision);
  if (!report.started_at.empty()) parts.push_back("started " + report.started_at);
  if (!report.suite.empty()) parts.push_back("suite " + code(report.suite));
  if (!report.model.empty()) parts.push_back("model " + code(report.model));
  parts.push_back(fmt::format("exit code {}", report.exit_code));
  if (report.interrupted) parts.push_back("**interrupted**");
  return fmt::format("{}\n\n", fmt::join(parts, " · "));
}

std::string environment_section(const Report& report) {
  std::string out;
  out += "## Environment\n\n| | |\n|---|---|\n";
  for (const auto& [label, value] : environment_lines(report))
    out += fmt::format("| {} | {} |\n", label, cell_escape(value));
  out += "\n";
  if (!report.environment.empty()) {
    out += "<details><summary>Environment variables (allow-listed)</summary>\n\n";
    out += "| variable | value |\n|---|---|\n";
    for (const auto& [k, v] : report.environment)
      out += fmt::format("| {} | {} |\n", code(k), cell_escape(v.empty() ? "(empty)" : code(v)));
    out += "\n</details>\n\n";
  }
  return out;
}

std::string devices_section(const Report& report) {
  std::string out;
  out += "## Devices\n\n";
  for (const Device& d : report.inventory.devices) {
    const std::string target = d.index >= 0 ? fmt::format("cuda:{}", d.index) : "(no HIP index)";
    out += fmt::format("- {} {}\n", code(target), cell_escape(device_title(report, target)));
  }
  if (std::none_of(report.inventory.devices.begin(), report.inventory.devices.end(), is_amd_gpu))
    out += fmt::format("No AMD GPU found: {}\n",
                       report.inventory.no_gpu_reason.empty() ? "no reason recorded"
                                                              : report.inventory.no_gpu_reason);
  for (const Finding& f : report.inventory.findings) {
    if (f.severity != Severity::ok)
      out += fmt::format("- **{}** {}: {}\n", to_string(f.severity), code(f.id), f.message);
  }
  return out;
}

std::string results_section(const Report& report) {
  std::string out;
  out += "\n## Results\n\n";
  for (const DeviceMatrix& m : build_matrices(report)) {
    out += fmt::format("### {}\n\n", device_title(report, m.device));
    if (const std::string gfx = gfx_line(report, m.device); !gfx.empty())
      out += fmt::format("{}\n\n", cell_escape(gfx));
    if (m.rows.empty()) {
      out += "No cases ran on this device.\n\n";
      continue;
    }
    out += "| probe | variant |";
    for (DType d : m.dtypes) out += fmt::format(" {} |", to_string(d));
    out += "\n|---|---|";
    for (size_t i = 0; i < m.dtypes.size(); ++i) out += "---|";
    out += "\n";
    for (const MatrixRow& r : m.rows) {
      out += fmt::format("| {} | {} |", to_string(r.probe), code(r.variant));
      for (DType d : m.dtypes) {
        auto it = r.counts.find(d);
        out += fmt::format(" {} |", it == r.counts.end() ? "·" : matrix_cell(it->second));
      }
      out += "\n";
    }
    out += "\n";
    for (const WorkerInfo& w : report.workers) {
      if (w.device == m.device && !w.available.empty())
        out += fmt::format("> {} {} not run: {}\n\n", to_string(w.probe), code(w.variant),
                           w.available);
    }
  }
  return out;
}

// One failing case: what happened, the evidence, and a repro for the first case of its cell.
std::string failure_detail(const Report& report, const CaseResult* r,
                           FirstInCell& first_in_cell) {
  std::string out;
  const auto key = std::make_tuple(r->device, static_cast<int>(r->probe), r->variant,
                             static_cast<int>(r->kase.dtype), static_cast<int>(r->status));
  out += fmt::format("<details><summary>{} {} · {} · {} · {} · {}</summary>\n\n",
                     status_symbol(r->status, true), status_label(r->status),
                     html_escape(r->device), to_string(r->probe), html_escape(r->variant),
                     html_escape(r->case_id));
  if (std::string end = process_end_text(*r); !end.empty())
    out += fmt::format("- process: {}\n", end);
  if (!r->reason.empty()) out += fmt::format("- reason: {}\n", html_escape(r->reason));
  if (r->metrics.max_abs_err)
    out += fmt::format("- max_abs_err {:.3g}, rel_l2_err {}, tolerance atol {:g} rtol {:g}\n",
                       *r->metrics.max_abs_err,
                       r->metrics.rel_l2_err ? fmt::format("{:.3g}", *r->metrics.rel_l2_err)
                                             : "n/a",
                       r->tolerance.atol, r->tolerance.rtol);
  if (r->metrics.nan_count || r->metrics.inf_count)
    out += fmt::format("- {} NaN, {} Inf in the output\n", r->metrics.nan_count,
                       r->metrics.inf_count);
  if (!r->signatures.empty()) {
    std::vector<std::string> sigs;
    for (const std::string& s : r->signatures) sigs.push_back(code(s));
    out += fmt::format("- signature: {}\n", fmt::join(sigs, ", "));
  }
  for (const KnownIssueMatch* m : issues_for(report, *r)) {
    out += m->link.empty()
               ? fmt::format("- known issue: {} — {}\n", code(m->issue_id), m->title)
               : fmt::format("- known issue: [{}]({}) — {}\n", m->issue_id, m->link, m->title);
  }
  if (!r->stderr_tail.empty())
    out += "\nstderr (last lines):\n\n" + fenced(r->stderr_tail, "text");
  auto [it, fresh] = first_in_cell.emplace(key, r->case_id);
  if (fresh) {
    out += repro_block(*r, "\nRepro (save as `repro.py`, run with `python3 repro.py`; needs only "
                           "torch):\n\n");
  } else {
    out += fmt::format("\nSame cell as {}: use its repro with this case's shape.\n",
                       code(it->second));
  }
  // The shrunk rule and the smallest failing case: its repro is the one to hand out.
  for (const Shrink& sh : report.shrinks) {
    if (sh.device != r->device || sh.probe != r->probe || sh.variant != r->variant ||
        sh.original_case != r->case_id)
      continue;
    out += fmt::format("\nShrunk: {} ({} cases, {:.1f} s).\n", sh.rule, sh.tried.size(), sh.seconds);
    if (sh.minimal) {
      CaseResult smallest = *r;
      smallest.kase = *sh.minimal;
      smallest.case_id = sh.minimal->id();
      out += repro_block(smallest,
                         fmt::format("\nSmallest failing case {}:\n\n", code(smallest.case_id)));
    }
  }
  out += "\n</details>\n\n";
  return out;
}

std::string failures_section(const Report& report) {
  std::string out;
  const auto fails = failures(report);
  if (fails.empty()) return out;
  out += fmt::format("## Failures ({})\n\n", fails.size());
  // One repro per failing cell (device, probe, variant, dtype, status); the other cases of the
  // cell differ only in CASE.
  FirstInCell first_in_cell;
  for (const CaseResult* r : fails) out += failure_detail(report, r, first_in_cell);
  return out;
}

std::string findings_section(const Report& report) {
  std::string out;
  if (!report.findings.empty()) {
    out += "## Findings\n\n";
    for (const Finding& f : report.findings) {
      if (f.severity == Severity::ok) continue;
      out += fmt::format("- **{}** {}{}: {}", to_string(f.severity), code(f.id),
                         f.device.empty() ? "" : " (" + f.device + ")", f.message);
      if (!f.remedy.empty()) out += " — " + f.remedy;
      out += "\n";
    }
    out += "\n";
  }
  return out;
}

std::string known_issues_section(const Report& report) {
  std::string out;
  if (!report.known_issues.empty()) {
    out += "## Known issues\n\n";
    for (const KnownIssueMatch& m : report.known_issues) {
      out += fmt::format("- {} on {}{} ({} case{}): {}\n",
                         m.link.empty() ? code(m.issue_id) : fmt::format("[{}]({})", m.issue_id, m.link),
                         code(m.device), m.variant.empty() ? "" : " " + code(m.variant),
                         m.case_ids.size(), m.case_ids.size() == 1 ? "" : "s", m.title);
      if (!m.advice.empty()) out += fmt::format("  - advice: {}\n", m.advice);
      if (!m.fixed_in.empty()) out += fmt::format("  - fixed in: {}\n", m.fixed_in);
    }
    out += "\n";
  }
  return out;
}

std::string recommendations_section(const Report& report) {
  std::string out;
  if (!report.recommendations.empty()) {
    out += "## Recommendations\n\n";
    for (const Recommendation& r : report.recommendations) {
      out += fmt::format("### {}: {}\n\n{}\n\n", code(r.device), code(r.id), r.summary);
      for (const RejectedRecommendation& x : r.rejected)
        out += fmt::format("- instead of {}, whose re-run failed: {}\n", code(x.id), x.reason);
      if (r.verification) out += fmt::format("- {}\n", verification_line(*r.verification));
      if (r.verification || !r.rejected.empty()) out += "\n";
      if (!r.python.empty()) out += "Python:\n\n" + fenced(r.python, "python") + "\n";
      if (!r.environment.empty()) out += "Environment:\n\n" + fenced(r.environment, "sh") + "\n";
      if (!r.cpp.empty()) out += "C++:\n\n" + fenced(r.cpp, "cpp") + "\n";
      if (!r.transformers.empty()) out += "- Transformers: " + code(r.transformers) + "\n";
      if (!r.vllm.empty()) out += "- vLLM: " + r.vllm + "\n";
      if (!r.cost.empty()) out += "- Cost: " + r.cost + "\n";
      out += "\n";
    }
  }
  return out;
}

std::string summary_line(const Report& report) {
  std::string out;
  std::map<Status, int> totals;
  for (const CaseResult& r : report.results) ++totals[r.status];
  out += fmt::format("**Summary:** {} · {} · exit code {}\n", cells_summary(report),
                     summary_counts(totals), report.exit_code);
  return out;
}

} // namespace

std::string render_markdown(const Report& report) {
  std::string out = "# sdpa-doctor report\n\n";
  for (auto* section : {header_line, environment_section, devices_section, results_section,
                        failures_section, findings_section, known_issues_section,
                        recommendations_section, summary_line})
    out += section(report);
  return out;
}

} // namespace sdpa_doctor::report
