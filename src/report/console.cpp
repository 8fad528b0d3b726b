#include "report/common.hpp"
#include "report/inventory.hpp"
#include "report/report.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>

namespace sdpa_doctor::report {

using namespace detail;

namespace {

// Lines of a single failing case's stderr tail; a cause of several cases shows its example's last.
constexpr size_t k_stderr_lines = 6;

struct Segment {
  Status status;
  std::string text; // visible text, no colour
};

struct Box {
  std::string_view h, v, tl, tm, tr, ml, mm, mr, bl, bm, br;
};
constexpr Box k_unicode_box{"─", "│", "┌", "┬", "┐", "├", "┼", "┤", "└", "┴", "┘"};
constexpr Box k_ascii_box{"-", "|", "+", "+", "+", "+", "+", "+", "+", "+", "+"};

std::string repeat(std::string_view s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

std::string pad(const std::string& visible_text, size_t width) {
  const size_t w = display_width(visible_text);
  return w >= width ? visible_text : visible_text + std::string(width - w, ' ');
}

// Byte offset of the `n`th codepoint.
size_t byte_offset(std::string_view s, size_t n) {
  size_t cp = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (cp == n) return i;
      ++cp;
    }
  }
  return s.size();
}

// Breaks `text` into lines of at most `width` columns, preferring to break after a space or a
// comma or before '[' so variant names split where a reader expects.
std::vector<std::string> wrap(std::string text, size_t width) {
  std::vector<std::string> lines;
  if (width == 0) width = 1;
  while (display_width(text) > width) {
    const size_t limit = byte_offset(text, width);
    size_t cut = std::string::npos;
    for (size_t i = limit; i > 0; --i) {
      const char c = text[i - 1];
      if (c == ' ' || c == ',') {
        cut = i;
        break;
      }
      if (text[i] == '[' && i < limit + 1) {
        cut = i;
        break;
      }
    }
    if (cut == std::string::npos || cut == 0) cut = limit;
    std::string head = text.substr(0, cut);
    while (!head.empty() && head.back() == ' ') head.pop_back();
    lines.push_back(head);
    text = text.substr(cut);
    while (!text.empty() && text.front() == ' ') text.erase(0, 1);
  }
  if (!text.empty() || lines.empty()) lines.push_back(text);
  return lines;
}

// Word-wraps `text` to `width` columns: the first line after `first`, the others after `rest`.
// The text is data (hostnames, reasons, messages), so it is escaped to one line first: no control
// byte of it reaches the terminal.
std::string wrap_paragraph(const std::string& text, size_t width, const std::string& first,
                           const std::string& rest) {
  auto avail = [&](const std::string& prefix) {
    const size_t p = display_width(prefix);
    return width > p + 10 ? width - p : size_t(10);
  };
  std::vector<std::string> lines = wrap(escape_to_one_line(text), avail(first));
  std::string out = first + lines.front() + "\n";
  if (lines.size() > 1) {
    // What did not fit the first line is re-wrapped at the continuation width.
    std::string remainder;
    for (size_t i = 1; i < lines.size(); ++i) remainder += (i > 1 ? " " : "") + lines[i];
    for (const std::string& line : wrap(remainder, avail(rest))) out += rest + line + "\n";
  }
  return out;
}

std::vector<Segment> cell_segments(const std::map<Status, int>& counts, bool unicode) {
  std::vector<std::pair<Status, int>> items(counts.begin(), counts.end());
  std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
    return status_order(a.first) < status_order(b.first);
  });
  int total = 0;
  for (const auto& [s, n] : items) total += n;
  std::vector<Segment> out;
  for (const auto& [s, n] : items) {
    const std::string count = items.size() == 1 ? fmt::format("{}/{}", n, total)
                                                : std::to_string(n);
    out.push_back({s, fmt::format("{} {} {}", status_symbol(s, unicode), status_label(s), count)});
  }
  return out;
}

// Lines of a cell at `width`: segments joined by " · ", a new line where the next one would not
// fit. Each line keeps its segments so colour can be applied after padding is known.
std::vector<std::vector<Segment>> cell_lines(const std::vector<Segment>& segs, size_t width,
                                             std::string_view sep) {
  std::vector<std::vector<Segment>> lines;
  size_t used = 0;
  for (const Segment& s : segs) {
    const size_t w = display_width(s.text);
    if (!lines.empty() && used + display_width(sep) + w <= width) {
      lines.back().push_back(s);
      used += display_width(sep) + w;
    } else {
      lines.push_back({s});
      used = w;
    }
  }
  return lines;
}

std::string render_line(const std::vector<Segment>& line, std::string_view sep, bool color,
                        size_t width) {
  std::string visible, painted;
  for (size_t i = 0; i < line.size(); ++i) {
    if (i) {
      visible += sep;
      painted += sep;
    }
    visible += line[i].text;
    painted += color ? fmt::format("{}{}\x1b[0m", status_ansi(line[i].status), line[i].text)
                     : line[i].text;
  }
  const size_t w = display_width(visible);
  return painted + (w < width ? std::string(width - w, ' ') : std::string{});
}

// One line of the matrix table before layout: a probe group header, or a variant with its cells.
struct TableRow {
  bool header = false;
  std::string label;
  std::vector<std::vector<Segment>> cells; // one per dtype column
};

std::vector<TableRow> table_rows(const DeviceMatrix& m, bool unicode) {
  std::vector<TableRow> rows;
  Probe current = Probe::fault;
  bool first = true;
  for (const MatrixRow& r : m.rows) {
    if (first || r.probe != current) {
      rows.push_back({true, std::string(to_string(r.probe)), {}});
      current = r.probe;
      first = false;
    }
    const std::string name = unicode || r.mode == Mode::eager
                                 ? variant_row(r.variant, r.mode)
                                 : r.variant + " - " + std::string(to_string(r.mode));
    TableRow row{false, "  " + escape_to_one_line(name), {}};
    for (DType d : m.dtypes) {
      auto it = r.counts.find(d);
      row.cells.push_back(it == r.counts.end() ? std::vector<Segment>{}
                                               : cell_segments(it->second, unicode));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

struct TableWidths {
  size_t label = 0;
  std::vector<size_t> columns;
};

// Natural and minimum widths; shrink the widest cell column first, then the labels, until the
// table fits `width` or nothing can shrink any more.
TableWidths fit_widths(const DeviceMatrix& m, const std::vector<TableRow>& rows,
                       std::string_view sep, int width) {
  const size_t n = m.dtypes.size();
  size_t label_w = display_width("variant"), label_min = 12;
  std::vector<size_t> col_w(n, 4), col_min(n, 4);
  for (size_t c = 0; c < n; ++c) col_w[c] = col_min[c] = display_width(to_string(m.dtypes[c]));
  for (const TableRow& r : rows) {
    label_w = std::max(label_w, display_width(r.label));
    for (size_t c = 0; c < r.cells.size(); ++c) {
      size_t natural = 0;
      for (size_t i = 0; i < r.cells[c].size(); ++i) {
        const size_t w = display_width(r.cells[c][i].text);
        natural += w + (i ? display_width(sep) : 0);
        col_min[c] = std::max(col_min[c], w);
      }
      col_w[c] = std::max(col_w[c], natural);
    }
  }
  label_min = std::min(label_min, label_w);
  auto total = [&] {
    size_t t = label_w + 3 + 1;
    for (size_t w : col_w) t += w + 3;
    return t;
  };
  const size_t target = size_t(std::max(width, 20));
  while (total() > target) {
    size_t widest = n;
    for (size_t c = 0; c < n; ++c) {
      if (col_w[c] > col_min[c] && (widest == n || col_w[c] > col_w[widest])) widest = c;
    }
    if (widest != n) {
      --col_w[widest];
    } else if (label_w > label_min) {
      --label_w;
    } else {
      break; // narrower than the shortest cells: let it overflow rather than garble them
    }
  }
  return {label_w, col_w};
}

// A variant label wrapped to the column, continuation lines indented under the name.
std::vector<std::string> label_lines(const TableRow& r, size_t label_w) {
  std::vector<std::string> lines = wrap(r.label, label_w);
  if (r.header) return lines;
  for (size_t i = 1; i < lines.size(); ++i) lines[i] = "    " + lines[i];
  // Re-wrap when the continuation indent pushed a line past the column.
  std::vector<std::string> fixed;
  for (const std::string& l : lines)
    for (const std::string& part : wrap(l, label_w)) fixed.push_back(part);
  return fixed;
}

std::string render_table_row(const TableRow& r, const TableWidths& w, const Box& box,
                             std::string_view sep, const ConsoleOptions& o) {
  const size_t n = w.columns.size();
  const std::vector<std::string> labels = label_lines(r, w.label);
  std::vector<std::vector<std::vector<Segment>>> cells;
  size_t height = labels.size();
  for (size_t c = 0; c < n; ++c) {
    cells.push_back(c < r.cells.size() ? cell_lines(r.cells[c], w.columns[c], sep)
                                       : std::vector<std::vector<Segment>>{});
    height = std::max(height, cells.back().size());
  }
  std::string out;
  for (size_t line = 0; line < height; ++line) {
    std::string s =
        fmt::format("{} {} ", box.v, pad(line < labels.size() ? labels[line] : "", w.label));
    for (size_t c = 0; c < n; ++c) {
      std::string content;
      if (r.header) {
        content = std::string(w.columns[c], ' ');
      } else if (cells[c].empty()) {
        content = pad(line == 0 ? (o.unicode ? "·" : ".") : "", w.columns[c]);
      } else if (line < cells[c].size()) {
        content = render_line(cells[c][line], sep, o.color, w.columns[c]);
      } else {
        content = std::string(w.columns[c], ' ');
      }
      s += fmt::format("{} {} ", box.v, content);
    }
    out += s + std::string(box.v) + "\n";
  }
  return out;
}

std::string render_one_matrix(const DeviceMatrix& m, const ConsoleOptions& o) {
  const Box& box = o.unicode ? k_unicode_box : k_ascii_box;
  const std::string_view sep = o.unicode ? " · " : ", ";
  const std::vector<TableRow> rows = table_rows(m, o.unicode);
  const TableWidths w = fit_widths(m, rows, sep, o.width);

  auto rule = [&](std::string_view l, std::string_view mid, std::string_view r) {
    std::string s(l);
    s += repeat(box.h, w.label + 2);
    for (size_t cw : w.columns) {
      s += mid;
      s += repeat(box.h, cw + 2);
    }
    s += r;
    return s + "\n";
  };

  std::string out = rule(box.tl, box.tm, box.tr);
  std::string head = fmt::format("{} {} ", box.v, pad("variant", w.label));
  for (size_t c = 0; c < m.dtypes.size(); ++c)
    head += fmt::format("{} {} ", box.v, pad(std::string(to_string(m.dtypes[c])), w.columns[c]));
  out += head + std::string(box.v) + "\n";
  for (const TableRow& r : rows) {
    if (r.header) out += rule(box.ml, box.mm, box.mr);
    out += render_table_row(r, w, box, sep, o);
  }
  out += rule(box.bl, box.bm, box.br);
  return out;
}

std::string legend(const ConsoleOptions& o) {
  std::vector<std::string> parts;
  for (Status s : {Status::pass, Status::mismatch, Status::nonfinite, Status::error, Status::crash,
                   Status::timeout, Status::unsupported, Status::skipped}) {
    const std::string name = s == Status::unsupported ? "unsupported (refused cleanly)"
                                                      : std::string(to_string(s));
    parts.push_back(fmt::format("{} {}", status_symbol(s, o.unicode), name));
  }
  return wrap_paragraph(fmt::format("{}", fmt::join(parts, "   ")), size_t(o.width), "", "");
}

// One line that must not wrap (an example's stderr line): cut to the width, marked when cut.
std::string one_line(const std::string& text, size_t width, bool unicode) {
  const std::string line = escape_to_one_line(text);
  if (display_width(line) <= width) return line;
  const std::string_view more = unicode ? "…" : "...";
  return std::string(fit_to_width(line, width - display_width(more))) + std::string(more);
}

// As many case ids as fit one line, then "and N more".
std::string case_list(const Cause& c, size_t width) {
  std::string line;
  for (size_t i = 0; i < c.results.size(); ++i) {
    const std::string id = escape_to_one_line(c.results[i]->case_id);
    const std::string rest =
        i + 1 < c.results.size() ? fmt::format(" and {} more", c.results.size() - i - 1) : "";
    const std::string next = line.empty() ? id : line + ", " + id;
    if (i > 0 && display_width(next) + display_width(rest) > width)
      return fmt::format("{} and {} more", line, c.results.size() - i);
    line = next;
  }
  return line;
}

// "✗ CRASH", coloured when asked.
std::string status_head(Status s, const ConsoleOptions& o) {
  const std::string head = fmt::format("{} {}", status_symbol(s, o.unicode), status_label(s));
  return o.color ? fmt::format("{}{}\x1b[0m", status_ansi(s), head) : head;
}

// One block per cause: what failed and how often, the cases, one example's evidence, what it
// stopped, the remedy. A single case keeps its whole evidence (stderr included).
std::string cause_block(const Report& report, const Cause& c, const ConsoleOptions& o) {
  const std::string_view dot = o.unicode ? " · " : " | ";
  const size_t width = size_t(std::max(o.width, 40));
  const CaseResult& r = c.example();
  const bool single = c.results.size() == 1;
  const std::string head = status_head(r.status, o);
  std::vector<std::string> what{r.device, std::string(to_string(r.probe)),
                                fmt::format("{}", fmt::join(c.variants, ", "))};
  what.push_back(single ? r.case_id : count_of(c.results.size(), "case"));
  const std::string end = process_end_text(r);
  if (!single && !end.empty()) what.push_back(end);
  std::string out = wrap_paragraph(fmt::format("{}", fmt::join(what, dot)), width,
                                   "  " + head + "  ", "      ");
  if (!single) out += "      cases: " + case_list(c, width > 13 ? width - 13 : 10) + "\n";
  std::vector<std::string> facts;
  if (single && !end.empty()) facts.push_back(end);
  if (single && r.attempt > 0) facts.push_back(fmt::format("worker attempt {}", r.attempt + 1));
  if (r.status == Status::mismatch || r.status == Status::nonfinite) {
    if (r.metrics.max_abs_err) facts.push_back(fmt::format("max_abs_err {:.3g}", *r.metrics.max_abs_err));
    if (r.metrics.frac_outside_tol)
      facts.push_back(fmt::format("{:.1f}% outside atol {:.0e} rtol {:.0e}",
                                  100 * *r.metrics.frac_outside_tol, r.tolerance.atol,
                                  r.tolerance.rtol));
    if (r.metrics.nan_count || r.metrics.inf_count)
      facts.push_back(fmt::format("{} NaN, {} Inf", r.metrics.nan_count, r.metrics.inf_count));
  }
  if (r.masked_rows)
    facts.push_back(fmt::format("fully masked rows: {}", to_string(*r.masked_rows)));
  if (!facts.empty())
    out +=
        wrap_paragraph(fmt::format("{}{}", single ? "" : r.case_id + ": ", fmt::join(facts, dot)),
                       width, "      ", "      ");
  if (!r.reason.empty()) out += wrap_paragraph(r.reason, width, "      reason: ", "        ");
  if (!r.signatures.empty())
    out += wrap_paragraph(fmt::format("{}", fmt::join(r.signatures, ", ")), width,
                          "      signature: ", "        ");
  for (const KnownIssueMatch* m : issues_for(report, r)) {
    out += wrap_paragraph(fmt::format("{} {} {}", m->issue_id, o.unicode ? "—" : "-", m->title),
                          width, "      known issue: ", "        ");
    if (!m->link.empty()) out += "        " + escape_to_one_line(m->link) + "\n";
  }
  const auto tail = last_lines(r.stderr_tail, single ? k_stderr_lines : 1);
  if (!single && !tail.empty()) {
    out += "      stderr: " + one_line(tail.back(), width - 14, o.unicode) + "\n";
  } else if (!tail.empty()) {
    out += fmt::format("      stderr (last {}):\n", count_of(tail.size(), "line"));
    for (const std::string& line : tail) {
      for (const std::string& part : wrap(escape_to_one_line(line), width > 12 ? width - 10 : 10))
        out += "        | " + part + "\n";
    }
  }
  for (const std::string& line : not_run_lines(c))
    out += wrap_paragraph(line, width, "      ", "        ");
  if (c.finding && !c.finding->remedy.empty())
    out += wrap_paragraph(c.finding->id + ": " + c.finding->remedy, width,
                          o.unicode ? "      → " : "      -> ", "        ");
  return out;
}

// Cells skipped with no failure to blame, one line per reason.
std::string skip_block(const Cause& c, const ConsoleOptions& o) {
  const std::string_view dot = o.unicode ? " · " : " | ";
  const CaseResult& r = c.example();
  const std::string head = status_head(r.status, o);
  const std::string what = fmt::format(
      "{}{}{}{}{}{}{}: {}", r.device, dot, to_string(r.probe), dot, fmt::join(c.variants, ", "),
      dot, c.results.size() == 1 ? r.case_id : count_of(c.results.size(), "case"),
      r.reason.empty() ? "no reason recorded" : r.reason);
  return wrap_paragraph(what, size_t(std::max(o.width, 40)), "  " + head + "  ", "      ");
}

std::string block(const std::string& title, const std::string& body) {
  return body.empty() ? std::string{} : title + "\n" + body + "\n";
}

std::string indent_lines(const std::string& text, const std::string& prefix) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    out += prefix + text.substr(start, nl - start) + "\n";
    start = nl + 1;
  }
  return out;
}

// The shared helpers join with "·"; an ASCII console gets plain separators instead.
std::string ascii_only(std::string text) {
  static const std::pair<std::string_view, std::string_view> k_map[] = {
      {"·", "|"}, {"—", "-"}, {"→", "->"}, {"…", "..."}, {"×", "x"}};
  for (const auto& [from, to] : k_map) {
    for (size_t p = 0; (p = text.find(from, p)) != std::string::npos; p += to.size())
      text.replace(p, from.size(), to);
  }
  return text;
}

} // namespace

std::string render_matrix(const Report& report, const ConsoleOptions& o) {
  std::string out;
  for (const DeviceMatrix& m : build_matrices(report)) {
    out += wrap_paragraph(device_title(report, m.device), size_t(std::max(o.width, 20)), "", "  ");
    if (const std::string gfx = gfx_line(report, m.device); !gfx.empty())
      out += wrap_paragraph(gfx, size_t(std::max(o.width, 40)), "  ", "    ");
    if (m.rows.empty()) {
      out += "  no cases ran on this device\n";
    } else {
      out += render_one_matrix(m, o);
    }
    for (const NotRun& n : workers_not_run(report, m.device))
      out += wrap_paragraph(fmt::format("{} {} not run: {}", to_string(n.probe),
                                        fmt::join(n.variants, ", "), n.reason),
                            size_t(std::max(o.width, 40)), "  note: ", "    ");
    out += "\n";
  }
  return o.unicode ? out : ascii_only(std::move(out));
}

std::string render_console(const Report& report, const ConsoleOptions& o) {
  const size_t width = size_t(std::max(o.width, 40));
  const std::string_view dot = o.unicode ? " · " : " | ";
  std::string out;
  {
    std::string title = fmt::format("sdpa-doctor {}", report.tool_version);
    if (!report.git_revision.empty()) title += fmt::format(" ({})", report.git_revision);
    if (!report.started_at.empty()) title += fmt::format("{}started {}", dot, report.started_at);
    if (!report.suite.empty()) title += fmt::format("{}suite {}", dot, report.suite);
    out += wrap_paragraph(title, width, "", "  ");
  }
  // `check --model`: its own line, so the shape is never wrapped away from the name.
  if (!report.model.empty())
    out += wrap_paragraph(report.model, width, fmt::format("  {:<9} ", "model"),
                          std::string(12, ' '));
  for (const auto& [label, value] : environment_lines(report)) {
    out += wrap_paragraph(value, width, fmt::format("  {:<9} ", label), std::string(12, ' '));
  }
  out += "\n";
  {
    InventoryConsoleOptions inv;
    inv.color = o.color;
    inv.show_ok = false;
    inv.show_sources = false;
    inv.show_arch_verdict = false; // under each device's matrix instead
    out += render_inventory_console(report.inventory, inv) + "\n";
  }

  std::string matrices = render_matrix(report, o);
  out += matrices;
  if (!report.results.empty()) out += legend(o) + "\n";

  // Each cause once, however many cells it explains.
  const std::vector<Cause> causes = failure_causes(report);
  {
    std::string body;
    for (const Cause& c : causes) body += cause_block(report, c, o);
    out += block(fmt::format("Failures ({})", failures(report).size()), body);
  }
  {
    std::string body;
    size_t cells = 0;
    for (const Cause& c : skip_causes(report)) {
      body += skip_block(c, o);
      cells += c.results.size();
    }
    out += block(fmt::format("Not run ({})", cells), body);
  }

  {
    // Each failure's boundary and its smallest failing case (check --shrink); empty block otherwise.
    std::string body;
    for (const Shrink& s : report.shrinks) {
      body += wrap_paragraph(fmt::format("{} ({}, {:.1f} s{})", shrink_title(report, s),
                                         count_of(s.tried.size(), "case"), s.seconds,
                                         s.budget_exhausted ? ", budget spent" : ""),
                             width, "  ", "    ");
      if (s.minimal) body += wrap_paragraph(s.minimal->id(), width, "    smallest failing case: ", "      ");
    }
    out += block("Shrunk", body);
  }

  {
    std::string body;
    for (const Finding& f : report.findings) {
      if (f.severity == Severity::ok || told_by_causes(f, causes)) continue;
      body += wrap_paragraph(fmt::format("{}{}: {}", f.id, f.device.empty() ? "" : " (" + f.device + ")",
                                         f.message),
                             width, fmt::format("  [{}] ", to_string(f.severity)), "      ");
      if (!f.remedy.empty())
        body += wrap_paragraph(f.remedy, width, o.unicode ? "      → " : "      -> ", "        ");
    }
    out += block("Findings", body);
  }

  {
    std::string body;
    for (const KnownIssueMatch& m : report.known_issues) {
      body += wrap_paragraph(fmt::format("{} on {}{} ({}): {}", m.issue_id, m.device,
                                         m.variant.empty() ? "" : " " + m.variant,
                                         count_of(m.case_ids.size(), "case"), m.title),
                             width, "  ", "    ");
      if (!m.link.empty()) body += "    " + escape_to_one_line(m.link) + "\n";
      if (!m.advice.empty()) body += wrap_paragraph(m.advice, width, "    advice: ", "      ");
      if (!m.fixed_in.empty()) body += wrap_paragraph(m.fixed_in, width, "    fixed in: ", "      ");
    }
    out += block("Known issues", body);
  }

  {
    std::string body;
    for (const Recommendation& r : report.recommendations) {
      body += fmt::format("  {} {}: {}{}\n", o.unicode ? "▶" : ">", escape_to_one_line(r.device),
                          escape_to_one_line(r.id),
                          r.workload.empty() ? "" : " (for " + escape_to_one_line(r.workload) + ")");
      body += wrap_paragraph(r.summary, width, "    ", "    ");
      for (const RejectedRecommendation& x : r.rejected)
        body += wrap_paragraph(fmt::format("instead of {}, whose re-run failed: {}", x.id, x.reason),
                               width, "    ", "      ");
      if (r.verification) body += wrap_paragraph(verification_line(*r.verification), width, "    ", "      ");
      auto section = [&](const char* name, const std::string& text) {
        if (text.empty()) return;
        body += fmt::format("    {}:\n", name);
        body += indent_lines(escape_lines(text), "      ");
      };
      section("Python", r.python);
      section("Environment", r.environment);
      section("C++", r.cpp);
      if (!r.transformers.empty())
        body += wrap_paragraph(r.transformers, width, "    Transformers: ", "      ");
      if (!r.vllm.empty()) body += wrap_paragraph(r.vllm, width, "    vLLM: ", "      ");
      if (!r.cost.empty()) body += wrap_paragraph(r.cost, width, "    Cost: ", "      ");
    }
    out += block("Recommendations", body);
  }

  std::map<Status, int> totals;
  for (const CaseResult& r : report.results) ++totals[r.status];
  std::string summary = fmt::format("Summary: {}{}{}{}{}", cells_summary(report), dot,
                                    summary_counts(totals), dot, exit_code_text(report));
  if (report.interrupted) summary += fmt::format("{}interrupted", dot);
  out += wrap_paragraph(summary, width, "", "  ");
  if (!o.unicode) out = ascii_only(std::move(out));
  return out;
}

} // namespace sdpa_doctor::report
