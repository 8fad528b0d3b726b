#include "report/common.hpp"
#include "report/report.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <set>

namespace sdpa_doctor::report {

using namespace detail;

namespace {

// Report text in a table cell, and inline code in one.
std::string cell_text(std::string_view s) { return markdown_cell(markdown_text(s)); }
std::string cell_code(std::string_view s) { return markdown_cell(markdown_code(s)); }

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

std::string header_line(const Report& report) {
  std::vector<std::string> parts{"sdpa-doctor " + markdown_text(report.tool_version)};
  if (!report.git_revision.empty()) parts.back() += " (" + markdown_text(report.git_revision) + ")";
  if (!report.started_at.empty()) parts.push_back("started " + markdown_text(report.started_at));
  if (!report.suite.empty()) parts.push_back("suite " + markdown_code(report.suite));
  if (!report.model.empty()) parts.push_back("model " + markdown_code(report.model));
  parts.push_back(exit_code_text(report));
  if (report.interrupted) parts.push_back("**interrupted**");
  return fmt::format("{}\n\n", fmt::join(parts, " · "));
}

std::string environment_section(const Report& report) {
  std::string out;
  out += "## Environment\n\n| | |\n|---|---|\n";
  for (const auto& [label, value] : environment_lines(report))
    out += fmt::format("| {} | {} |\n", label, cell_text(value));
  out += "\n";
  if (!report.environment.empty()) {
    out += "<details><summary>Environment variables (allow-listed)</summary>\n\n";
    out += "| variable | value |\n|---|---|\n";
    for (const auto& [k, v] : report.environment)
      out += fmt::format("| {} | {} |\n", cell_code(k),
                         v.empty() ? std::string("(empty)") : cell_code(v));
    out += "\n</details>\n\n";
  }
  return out;
}

std::string devices_section(const Report& report) {
  std::string out;
  out += "## Devices\n\n";
  for (const Device& d : report.inventory.devices) {
    const std::string target = d.index >= 0 ? fmt::format("cuda:{}", d.index) : "(no HIP index)";
    out += fmt::format("- {} {}\n", markdown_code(target),
                       markdown_text(device_title(report, target)));
  }
  if (std::none_of(report.inventory.devices.begin(), report.inventory.devices.end(),
                   [](const Device& d) { return is_amd_gpu(d) || is_nvidia_gpu(d); }))
    out += fmt::format("No GPU found: {}\n",
                       report.inventory.no_gpu_reason.empty()
                           ? "no reason recorded"
                           : markdown_text(report.inventory.no_gpu_reason));
  for (const Finding& f : report.inventory.findings) {
    if (f.severity != Severity::ok)
      out += fmt::format("- **{}** {}: {}\n", to_string(f.severity), markdown_code(f.id),
                         markdown_text(f.message));
  }
  return out;
}

std::string results_section(const Report& report) {
  std::string out;
  out += "\n## Results\n\n";
  for (const DeviceMatrix& m : build_matrices(report)) {
    out += fmt::format("### {}\n\n", markdown_text(device_title(report, m.device)));
    if (const std::string gfx = gfx_line(report, m.device); !gfx.empty())
      out += fmt::format("{}\n\n", markdown_text(gfx));
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
      out += fmt::format("| {} | {} |", to_string(r.probe), cell_code(variant_row(r.variant, r.mode)));
      for (DType d : m.dtypes) {
        auto it = r.counts.find(d);
        out += fmt::format(" {} |", it == r.counts.end() ? "·" : matrix_cell(it->second));
      }
      out += "\n";
    }
    out += "\n";
    for (const NotRun& n : workers_not_run(report, m.device)) {
      std::vector<std::string> variants;
      for (const std::string& v : n.variants) variants.push_back(markdown_code(v));
      out += fmt::format("> {} {} not run: {}\n\n", to_string(n.probe), fmt::join(variants, ", "),
                         markdown_text(n.reason));
    }
  }
  return out;
}

std::string id_list(const std::vector<const CaseResult*>& results) {
  std::vector<std::string> ids;
  for (const CaseResult* r : results) ids.push_back(markdown_code(r->case_id));
  return fmt::format("{}", fmt::join(ids, ", "));
}

// The repro script under its title, fenced; for a result whose fields the doctor does not know
// (a report from elsewhere), the reason there is no script, as text.
std::string repro_block(const Report& report, const std::string& title, const CaseResult& r) {
  auto script = render_repro(r, compile_backend_of(report, r));
  if (!script) return fmt::format("\nNo repro script: {}.\n", markdown_code(script.error().message));
  return fmt::format("\n{}\n\n{}", title, markdown_fence(*script, "python"));
}

// One cause: its cells, one example's evidence and repro, what it stopped, the remedy, and the
// shrunk rule with the smallest failing case's repro (the one to hand out).
std::string cause_detail(const Report& report, const Cause& c) {
  const CaseResult& r = c.example();
  const bool single = c.results.size() == 1;
  std::string out = fmt::format(
      "<details><summary>{} {} · {} · {} · {} · {}</summary>\n\n", status_symbol(r.status, true),
      status_label(r.status), html_text(r.device), to_string(r.probe),
      html_text(fmt::format("{}", fmt::join(c.variants, ", "))),
      single ? html_text(r.case_id) : count_of(c.results.size(), "case"));
  if (!single) {
    out += fmt::format("- cases: {}\n", id_list(c.results));
    out += fmt::format("- example: {}\n", markdown_code(r.case_id));
  }
  if (std::string end = process_end_text(r); !end.empty())
    out += fmt::format("- process: {}\n", markdown_text(end));
  if (!r.reason.empty()) out += fmt::format("- reason: {}\n", markdown_text(r.reason));
  if (r.masked_rows) out += fmt::format("- fully masked rows: {}\n", to_string(*r.masked_rows));
  if (r.metrics.max_abs_err)
    out += fmt::format("- max_abs_err {:.3g}, rel_l2_err {}, tolerance atol {:g} rtol {:g}\n",
                       *r.metrics.max_abs_err,
                       r.metrics.rel_l2_err ? fmt::format("{:.3g}", *r.metrics.rel_l2_err) : "n/a",
                       r.tolerance.atol, r.tolerance.rtol);
  if (r.metrics.nan_count || r.metrics.inf_count)
    out += fmt::format("- {} NaN, {} Inf in the output\n", r.metrics.nan_count,
                       r.metrics.inf_count);
  if (!r.signatures.empty()) {
    std::vector<std::string> sigs;
    for (const std::string& s : r.signatures) sigs.push_back(markdown_code(s));
    out += fmt::format("- signature: {}\n", fmt::join(sigs, ", "));
  }
  for (const KnownIssueMatch* m : issues_for(report, r))
    out += fmt::format("- known issue: {} — {}\n", markdown_link(m->issue_id, m->link),
                       markdown_text(m->title));
  for (const std::string& line : not_run_lines(c)) out += "- " + markdown_text(line) + "\n";
  if (c.finding && !c.finding->remedy.empty())
    out += fmt::format("- remedy ({}): {}\n", markdown_code(c.finding->id),
                       markdown_text(c.finding->remedy));
  if (!r.stderr_tail.empty())
    out += "\nstderr (last lines):\n\n" + markdown_fence(escape_lines(r.stderr_tail), "text");
  out +=
      repro_block(report, "Repro (save as `repro.py`, run with `python3 repro.py`; needs only torch):", r);
  for (const Shrink& sh : report.shrinks) {
    const bool of_this = std::any_of(c.results.begin(), c.results.end(), [&](const CaseResult* x) {
      return sh.device == x->device && sh.probe == x->probe && sh.variant == x->variant &&
             sh.mode == x->mode && sh.original_case == x->case_id;
    });
    if (!of_this) continue;
    out += fmt::format("\nShrunk: {} ({}, {:.1f} s).\n", markdown_text(shrink_title(report, sh)),
                       count_of(sh.tried.size(), "case"), sh.seconds);
    if (sh.minimal) {
      CaseResult smallest = r;
      smallest.kase = *sh.minimal;
      smallest.case_id = sh.minimal->id();
      out += repro_block(report, fmt::format("Smallest failing case {}:", markdown_code(smallest.case_id)),
                         smallest);
    }
  }
  out += "\n</details>\n\n";
  return out;
}

std::string failures_section(const Report& report) {
  std::string out;
  const auto fails = failures(report);
  if (!fails.empty()) {
    out += fmt::format("## Failures ({})\n\n", fails.size());
    for (const Cause& c : failure_causes(report)) out += cause_detail(report, c);
  }
  // Cells skipped with no failure to blame: one line per reason.
  const std::vector<Cause> skipped = skip_causes(report);
  if (!skipped.empty()) {
    size_t cells = 0;
    for (const Cause& c : skipped) cells += c.results.size();
    out += fmt::format("## Not run ({})\n\n", cells);
    for (const Cause& c : skipped) {
      const CaseResult& r = c.example();
      std::vector<std::string> variants;
      for (const std::string& v : c.variants) variants.push_back(markdown_code(v));
      out += fmt::format("- {} {} · {} · {} · {}: {}\n", status_symbol(r.status, true),
                         status_label(r.status), markdown_code(r.device), to_string(r.probe),
                         fmt::join(variants, ", "),
                         c.results.size() == 1 ? markdown_code(r.case_id)
                                               : count_of(c.results.size(), "case"),
                         markdown_text(r.reason.empty() ? "no reason recorded" : r.reason));
    }
    out += "\n";
  }
  return out;
}

std::string findings_section(const Report& report) {
  std::string out;
  const std::vector<Cause> causes = failure_causes(report);
  for (const Finding& f : report.findings) {
    if (f.severity == Severity::ok || told_by_causes(f, causes)) continue;
    out += fmt::format("- **{}** {}{}: {}", to_string(f.severity), markdown_code(f.id),
                       f.device.empty() ? "" : " (" + markdown_text(f.device) + ")",
                       markdown_text(f.message));
    if (!f.remedy.empty()) out += " — " + markdown_text(f.remedy);
    out += "\n";
  }
  return out.empty() ? out : "## Findings\n\n" + out + "\n";
}

std::string known_issues_section(const Report& report) {
  std::string out;
  if (!report.known_issues.empty()) {
    out += "## Known issues\n\n";
    for (const KnownIssueMatch& m : report.known_issues) {
      out += fmt::format(
          "- {} on {}{} ({}): {}\n",
          m.link.empty() ? markdown_code(m.issue_id) : markdown_link(m.issue_id, m.link),
          markdown_code(m.device), m.variant.empty() ? "" : " " + markdown_code(m.variant),
          count_of(m.case_ids.size(), "case"), markdown_text(m.title));
      if (!m.advice.empty()) out += fmt::format("  - advice: {}\n", markdown_text(m.advice));
      if (!m.fixed_in.empty()) out += fmt::format("  - fixed in: {}\n", markdown_text(m.fixed_in));
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
      out += fmt::format("### {}: {}{}\n\n{}\n\n", markdown_code(r.device), markdown_code(r.id),
                         r.workload.empty() ? "" : " (for " + markdown_text(r.workload) + ")",
                         markdown_text(r.summary));
      for (const RejectedRecommendation& x : r.rejected)
        out += fmt::format("- instead of {}, whose re-run failed: {}\n", markdown_code(x.id),
                           markdown_text(x.reason));
      if (r.verification)
        out += fmt::format("- {}\n", markdown_text(verification_line(*r.verification)));
      if (r.verification || !r.rejected.empty()) out += "\n";
      // The code is the tool's own, to paste as it is: fenced, never escaped.
      if (!r.python.empty()) out += "Python:\n\n" + markdown_fence(r.python, "python") + "\n";
      if (!r.environment.empty())
        out += "Environment:\n\n" + markdown_fence(r.environment, "sh") + "\n";
      if (!r.cpp.empty()) out += "C++:\n\n" + markdown_fence(r.cpp, "cpp") + "\n";
      if (!r.transformers.empty()) out += "- Transformers: " + markdown_code(r.transformers) + "\n";
      if (!r.vllm.empty()) out += "- vLLM: " + markdown_text(r.vllm) + "\n";
      if (!r.cost.empty()) out += "- Cost: " + markdown_text(r.cost) + "\n";
      out += "\n";
    }
  }
  return out;
}

std::string summary_line(const Report& report) {
  std::string out;
  std::map<Status, int> totals;
  for (const CaseResult& r : report.results) ++totals[r.status];
  out += fmt::format("**Summary:** {} · {} · {}\n", cells_summary(report), summary_counts(totals),
                     exit_code_text(report));
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
