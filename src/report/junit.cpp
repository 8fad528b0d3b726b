#include "report/common.hpp"
#include "report/report.hpp"

#include <algorithm>
#include <fmt/format.h>

namespace sdpa_doctor::report {

using namespace detail;

namespace {

// XML 1.0 cannot carry most control characters even as references: drop them.
std::string xml_escape(std::string_view s, bool attribute) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (ch) {
    case '&': out += "&amp;"; break;
    case '<': out += "&lt;"; break;
    case '>': out += "&gt;"; break;
    case '"': out += attribute ? "&quot;" : "\""; break;
    case '\'': out += attribute ? "&apos;" : "'"; break;
    case '\n': out += attribute ? "&#10;" : "\n"; break;
    case '\t': out += attribute ? "&#9;" : "\t"; break;
    case '\r': break;
    default:
      if (c < 0x20 || c == 0x7f) break;
      out += ch;
    }
  }
  return out;
}

std::string attr(std::string_view s) { return xml_escape(s, true); }
std::string text(std::string_view s) { return xml_escape(s, false); }

// A decimal number, as JUnit readers expect; a time past a year (one read from a file may be
// any double) is written as a year rather than as hundreds of digits.
std::string seconds(double ms) {
  constexpr double k_year_s = 365.0 * 24 * 3600;
  return fmt::format("{:.6f}", std::min(ms / 1000.0, k_year_s));
}

struct Suite {
  std::string device;
  Probe probe;
  std::string variant;
  Mode mode = Mode::eager;
  std::vector<const CaseResult*> results;
};

std::string suite_name(const Report& report, const Suite& s) {
  std::string device = s.device;
  device.erase(std::remove(device.begin(), device.end(), ':'), device.end());
  std::string name = "sdpa." + device;
  if (const Device* d = device_for_target(report, s.device); d && !d->gfx_target.empty())
    name += "." + d->gfx_target;
  return fmt::format("{}.{}.{}{}", name, to_string(s.probe), s.variant,
                     s.mode == Mode::eager ? "" : ".compiled");
}

std::string failure_body(const Report& report, const CaseResult& r) {
  std::vector<std::string> lines;
  lines.push_back(fmt::format("status: {}", to_string(r.status)));
  if (!r.reason.empty()) lines.push_back("reason: " + r.reason);
  if (std::string end = process_end_text(r); !end.empty()) lines.push_back("process: " + end);
  if (r.metrics.max_abs_err) lines.push_back(fmt::format("max_abs_err: {:.6g}", *r.metrics.max_abs_err));
  if (r.metrics.rel_l2_err) lines.push_back(fmt::format("rel_l2_err: {:.6g}", *r.metrics.rel_l2_err));
  if (r.metrics.nan_count || r.metrics.inf_count)
    lines.push_back(fmt::format("nan_count: {} inf_count: {}", r.metrics.nan_count, r.metrics.inf_count));
  lines.push_back(fmt::format("tolerance: atol {:g} rtol {:g}", r.tolerance.atol, r.tolerance.rtol));
  if (!r.signatures.empty()) lines.push_back(fmt::format("signatures: {}", fmt::join(r.signatures, ", ")));
  for (const KnownIssueMatch* m : issues_for(report, r))
    lines.push_back(fmt::format("known issue: {} - {} {}", m->issue_id, m->title, m->link));
  if (!r.stderr_tail.empty()) lines.push_back("stderr:\n" + r.stderr_tail);
  return fmt::format("{}", fmt::join(lines, "\n"));
}

} // namespace

std::string render_junit(const Report& report) {
  std::vector<Suite> suites;
  for (const CaseResult& r : report.results) {
    auto it = std::find_if(suites.begin(), suites.end(), [&](const Suite& s) {
      return s.device == r.device && s.probe == r.probe && s.variant == r.variant &&
             s.mode == r.mode;
    });
    if (it == suites.end()) {
      suites.push_back(Suite{r.device, r.probe, r.variant, r.mode, {}});
      it = suites.end() - 1;
    }
    it->results.push_back(&r);
  }

  int total_tests = 0, total_failures = 0, total_skipped = 0;
  double total_ms = 0;
  std::string body;
  std::string hostname;
  if (auto h = report.host.find("hostname"); h != report.host.end()) hostname = h->second;
  for (const Suite& s : suites) {
    int failures = 0, skipped = 0;
    double ms = 0;
    std::string cases;
    const std::string name = suite_name(report, s);
    for (const CaseResult* r : s.results) {
      // The case's wall time in its worker (warm-up, timed runs, comparison), where the minutes
      // went; a report without it (older journals) falls back to the kernel time.
      const double t = r->wall_ms > 0 ? r->wall_ms : r->metrics.time_ms.value_or(0.0);
      ms += t;
      cases += fmt::format("    <testcase name=\"{}\" classname=\"{}\" time=\"{}\"", attr(r->case_id),
                           attr(name), seconds(t));
      if (r->status == Status::pass) {
        cases += "/>\n";
        continue;
      }
      cases += ">\n";
      if (is_failure_by_default(r->status)) {
        ++failures;
        std::string message = std::string(to_string(r->status));
        if (std::string end = process_end_text(*r); !end.empty()) message += ": " + end;
        else if (!r->reason.empty()) message += ": " + r->reason;
        cases += fmt::format("      <failure type=\"{}\" message=\"{}\">{}</failure>\n",
                             to_string(r->status), attr(message), text(failure_body(report, *r)));
      } else {
        ++skipped;
        std::string message = std::string(to_string(r->status));
        if (!r->reason.empty()) message += ": " + r->reason;
        cases += fmt::format("      <skipped message=\"{}\"/>\n", attr(message));
      }
      if (!r->stderr_tail.empty())
        cases += fmt::format("      <system-err>{}</system-err>\n", text(r->stderr_tail));
      cases += "    </testcase>\n";
    }
    std::string props;
    auto prop = [&](std::string_view k, std::string_view v) {
      if (!v.empty()) props += fmt::format("      <property name=\"{}\" value=\"{}\"/>\n", attr(k), attr(v));
    };
    prop("device", s.device);
    if (const Device* d = device_for_target(report, s.device)) {
      prop("gfx_target", d->gfx_target);
      prop("device_name", d->name);
    }
    prop("probe", to_string(s.probe));
    prop("variant", s.variant);
    if (s.mode != Mode::eager) prop("mode", std::string(to_string(s.mode)));
    for (const WorkerInfo& w : report.workers) {
      if (w.device == s.device && w.probe == s.probe && w.variant == s.variant &&
          w.mode == s.mode) {
        for (const auto& [k, v] : w.versions) prop("version." + k, v);
        if (w.restarts) prop("worker_restarts", std::to_string(w.restarts));
      }
    }
    body += fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" "
                        "skipped=\"{}\" time=\"{}\"",
                        attr(name), s.results.size(), failures, skipped, seconds(ms));
    if (!report.started_at.empty()) body += fmt::format(" timestamp=\"{}\"", attr(report.started_at));
    if (!hostname.empty()) body += fmt::format(" hostname=\"{}\"", attr(hostname));
    body += ">\n";
    if (!props.empty()) body += "    <properties>\n" + props + "    </properties>\n";
    body += cases + "  </testsuite>\n";
    total_tests += int(s.results.size());
    total_failures += failures;
    total_skipped += skipped;
    total_ms += ms;
  }
  return fmt::format("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                     "<testsuites name=\"sdpa-doctor\" tests=\"{}\" failures=\"{}\" errors=\"0\" "
                     "skipped=\"{}\" time=\"{}\">\n{}</testsuites>\n",
                     total_tests, total_failures, total_skipped,
                     seconds(std::max(total_ms, report.timings.total_ms)), body);
}

} // namespace sdpa_doctor::report
