#include "compare/compare.hpp"
#include "report/common.hpp"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

namespace sdpa_doctor::compare {

using nlohmann::json;
using namespace report::detail;

namespace {

// Lines listed per section on the console and in Markdown; JSON carries every change.
constexpr size_t k_max_listed = 50;

constexpr ChangeKind k_kind_order[] = {ChangeKind::regression, ChangeKind::fix,
                                       ChangeKind::changed,    ChangeKind::slower,
                                       ChangeKind::faster,     ChangeKind::added,
                                       ChangeKind::removed};

using CellKey = std::tuple<std::string, std::string, std::string, std::string, std::string,
                           std::string>;

// Arch and device index, not the host: a baseline from one node checks another of its kind.
CellKey key_of(const DigestCell& c) {
  return {c.arch, c.device, c.probe, c.row(), c.dtype, c.case_id};
}

std::string label_of(const ReportDigest& r) {
  std::vector<std::string> parts;
  if (!r.hostname.empty()) parts.push_back(r.hostname);
  if (!r.tool_version.empty()) parts.push_back("sdpa-doctor " + r.tool_version);
  if (!r.started_at.empty()) parts.push_back(r.started_at);
  if (parts.empty()) parts.push_back("(unnamed report)");
  return fmt::format("{}", fmt::join(parts, " · "));
}

std::string_view section_title(ChangeKind k) {
  switch (k) {
  case ChangeKind::regression: return "Regressions";
  case ChangeKind::fix: return "Fixes";
  case ChangeKind::changed: return "Status changes";
  case ChangeKind::added: return "New cells";
  case ChangeKind::removed: return "Removed cells";
  case ChangeKind::slower: return "Slower";
  case ChangeKind::faster: return "Faster";
  }
  return "";
}

std::string where_of(const DigestCell& c) {
  return c.arch == c.device ? c.device : c.arch + " " + c.device;
}

// Every field comes from a report file: data, escaped for the terminal.
std::string cell_name(const DigestCell& c) {
  return escape_to_one_line(
      fmt::format("{} · {} · {} · {}", where_of(c), c.probe, c.row(), c.case_id));
}

std::string status_text(Status s, bool unicode) {
  return fmt::format("{} {}", status_symbol(s, unicode), status_label(s));
}

std::string what_text(const CellChange& ch, bool unicode) {
  const std::string arrow = unicode ? " → " : " -> ";
  switch (ch.kind) {
  case ChangeKind::added: return "new: " + status_text(*ch.new_status, unicode);
  case ChangeKind::removed: return "was: " + status_text(*ch.old_status, unicode);
  case ChangeKind::slower:
  case ChangeKind::faster: {
    const double ratio = *ch.new_time_ms / *ch.old_time_ms;
    return fmt::format("{}{}{} ({}{})", format_ms(*ch.old_time_ms), arrow,
                       format_ms(*ch.new_time_ms), unicode ? "×" : "x",
                       ratio < 1e4 ? fmt::format("{:.2f}", ratio) : fmt::format("{:.3g}", ratio));
  }
  default:
    return status_text(*ch.old_status, unicode) + arrow + status_text(*ch.new_status, unicode);
  }
}

std::string summary_line(const DiffResult& d) {
  std::vector<std::string> parts{count_of(size_t(d.compared), "cell") + " compared"};
  auto add = [&](ChangeKind k, std::string_view one, std::string_view many) {
    const int n = d.count(k);
    if (n || k == ChangeKind::regression) parts.push_back(fmt::format("{} {}", n, n == 1 ? one : many));
  };
  add(ChangeKind::regression, "regression", "regressions");
  add(ChangeKind::fix, "fix", "fixes");
  add(ChangeKind::changed, "other status change", "other status changes");
  add(ChangeKind::slower, "slower", "slower");
  add(ChangeKind::faster, "faster", "faster");
  add(ChangeKind::added, "new cell", "new cells");
  add(ChangeKind::removed, "removed cell", "removed cells");
  return fmt::format("Summary: {} · exit code {}", fmt::join(parts, " · "), d.exit_code);
}

} // namespace

std::string_view to_string(ChangeKind kind) {
  switch (kind) {
  case ChangeKind::regression: return "regression";
  case ChangeKind::fix: return "fix";
  case ChangeKind::changed: return "changed";
  case ChangeKind::added: return "new";
  case ChangeKind::removed: return "removed";
  case ChangeKind::slower: return "slower";
  case ChangeKind::faster: return "faster";
  }
  return "changed";
}

int DiffResult::count(ChangeKind kind) const {
  return static_cast<int>(
      std::count_if(changes.begin(), changes.end(), [&](const CellChange& c) { return c.kind == kind; }));
}

DiffResult diff(const ReportDigest& baseline, const ReportDigest& now, const DiffOptions& o) {
  DiffResult out;
  out.baseline_label = label_of(baseline);
  out.new_label = label_of(now);
  std::map<CellKey, const DigestCell*> old_cells;
  for (const DigestCell& c : baseline.cells) old_cells.emplace(key_of(c), &c);
  std::set<CellKey> seen;
  auto failing = [&](Status s) { return o.fail_on.count(s) != 0; };
  for (const DigestCell& c : now.cells) {
    const CellKey key = key_of(c);
    if (!seen.insert(key).second) continue; // a cell twice in one report: the first one counts
    auto it = old_cells.find(key);
    CellChange ch;
    ch.cell = c;
    ch.new_status = c.status;
    ch.new_time_ms = c.time_ms;
    ch.reason = c.reason;
    if (it == old_cells.end()) {
      ch.kind = ChangeKind::added;
      out.changes.push_back(std::move(ch));
      continue;
    }
    ++out.compared;
    const DigestCell& old = *it->second;
    ch.old_status = old.status;
    ch.old_time_ms = old.time_ms;
    if (old.status != c.status) {
      ch.kind = !failing(old.status) && failing(c.status)   ? ChangeKind::regression
                : failing(old.status) && !failing(c.status) ? ChangeKind::fix
                                                            : ChangeKind::changed;
      out.changes.push_back(std::move(ch));
      continue;
    }
    if (old.time_ms && c.time_ms && *old.time_ms > 0 && *c.time_ms > 0) {
      const double ratio = *c.time_ms / *old.time_ms;
      if (ratio >= o.time_threshold) {
        ch.kind = ChangeKind::slower;
        out.changes.push_back(std::move(ch));
      } else if (ratio <= 1.0 / o.time_threshold) {
        ch.kind = ChangeKind::faster;
        out.changes.push_back(std::move(ch));
      }
    }
  }
  for (const DigestCell& c : baseline.cells) {
    const CellKey key = key_of(c);
    if (seen.count(key)) continue;
    seen.insert(key);
    CellChange ch;
    ch.kind = ChangeKind::removed;
    ch.cell = c;
    ch.old_status = c.status;
    ch.old_time_ms = c.time_ms;
    out.changes.push_back(std::move(ch));
  }
  std::stable_sort(out.changes.begin(), out.changes.end(), [](const CellChange& a, const CellChange& b) {
    auto rank = [](ChangeKind k) {
      return std::find(std::begin(k_kind_order), std::end(k_kind_order), k) - std::begin(k_kind_order);
    };
    return rank(a.kind) < rank(b.kind);
  });
  const bool gate = out.count(ChangeKind::regression) > 0 ||
                    (o.fail_on_slower && out.count(ChangeKind::slower) > 0);
  out.exit_code = gate ? exit_code::failures : exit_code::ok;
  return out;
}

std::string render_diff_console(const DiffResult& d, bool unicode) {
  std::string out =
      fmt::format("sdpa-doctor diff\n  baseline  {}\n  new       {}\n",
                  escape_to_one_line(d.baseline_label), escape_to_one_line(d.new_label));
  for (ChangeKind k : k_kind_order) {
    std::vector<const CellChange*> rows;
    for (const CellChange& c : d.changes)
      if (c.kind == k) rows.push_back(&c);
    if (rows.empty()) continue;
    out += fmt::format("\n{} ({})\n", section_title(k), rows.size());
    size_t width = 0;
    std::vector<std::string> names;
    for (size_t i = 0; i < rows.size() && i < k_max_listed; ++i) {
      std::string name = cell_name(rows[i]->cell);
      width = std::max(width, display_width(name));
      names.push_back(std::move(name));
    }
    for (size_t i = 0; i < names.size(); ++i) {
      const CellChange& c = *rows[i];
      std::string line = "  " + names[i] +
                         std::string(width - display_width(names[i]) + 2, ' ') + what_text(c, unicode);
      if ((c.kind == ChangeKind::regression || c.kind == ChangeKind::changed) && !c.reason.empty())
        line += " · " + escape_to_one_line(c.reason);
      out += line + "\n";
    }
    if (rows.size() > k_max_listed)
      out += fmt::format("  ... and {} more (all of them in --json)\n", rows.size() - k_max_listed);
  }
  if (d.changes.empty()) out += "\nNo differences.\n";
  out += "\n" + summary_line(d) + "\n";
  return unicode ? out : ascii_dots(out);
}

std::string render_diff_markdown(const DiffResult& d) {
  auto cell = [](const std::string& s) { return markdown_cell(markdown_text(s)); };
  auto code = [](const std::string& s) { return markdown_cell(markdown_code(s)); };
  const int regressions = d.count(ChangeKind::regression);
  std::string out = fmt::format("## sdpa-doctor diff: {}\n\n",
                                regressions ? fmt::format("{} regression{}", regressions,
                                                          regressions == 1 ? "" : "s")
                                            : std::string("no regression"));
  out += fmt::format("- baseline: {}\n- new: {}\n", markdown_text(d.baseline_label),
                     markdown_text(d.new_label));
  for (ChangeKind k : k_kind_order) {
    std::vector<const CellChange*> rows;
    for (const CellChange& c : d.changes)
      if (c.kind == k) rows.push_back(&c);
    if (rows.empty()) continue;
    const bool fold = k != ChangeKind::regression && k != ChangeKind::fix;
    out += fmt::format("\n### {} ({})\n\n", section_title(k), rows.size());
    if (fold) out += "<details><summary>show</summary>\n\n";
    out += "| device | probe | variant | case | change | reason |\n|---|---|---|---|---|---|\n";
    for (size_t i = 0; i < rows.size() && i < k_max_listed; ++i) {
      const CellChange& c = *rows[i];
      out += fmt::format("| {} | {} | {} | {} | {} | {} |\n", cell(where_of(c.cell)),
                         cell(c.cell.probe), code(c.cell.row()), code(c.cell.case_id),
                         cell(what_text(c, true)),
                         cell(c.kind == ChangeKind::regression || c.kind == ChangeKind::changed
                                  ? c.reason
                                  : std::string()));
    }
    if (rows.size() > k_max_listed)
      out += fmt::format("\n... and {} more (all of them in the JSON diff)\n", rows.size() - k_max_listed);
    if (fold) out += "\n</details>\n";
  }
  if (d.changes.empty()) out += "\nNo differences.\n";
  out += "\n" + summary_line(d) + "\n";
  return out;
}

std::string render_diff_json(const DiffResult& d) {
  json changes = json::array();
  for (const CellChange& c : d.changes) {
    json j{{"kind", std::string(to_string(c.kind))},
           {"arch", c.cell.arch},
           {"device", c.cell.device},
           {"probe", c.cell.probe},
           {"variant", c.cell.variant},
           {"mode", c.cell.mode},
           {"dtype", c.cell.dtype},
           {"case_id", c.cell.case_id},
           {"reason", c.reason}};
    auto put_status = [&](const char* key, const std::optional<Status>& s) {
      j[key] = s ? json(std::string(to_string(*s))) : json(nullptr);
    };
    put_status("old_status", c.old_status);
    put_status("new_status", c.new_status);
    j["old_time_ms"] = c.old_time_ms ? json(*c.old_time_ms) : json(nullptr);
    j["new_time_ms"] = c.new_time_ms ? json(*c.new_time_ms) : json(nullptr);
    changes.push_back(std::move(j));
  }
  json counts = json::object();
  for (ChangeKind k : k_kind_order) counts[std::string(to_string(k))] = d.count(k);
  json doc{{"schema", std::string(k_diff_schema)},
           {"baseline", d.baseline_label},
           {"new", d.new_label},
           {"compared", d.compared},
           {"counts", counts},
           {"changes", changes},
           {"exit_code", d.exit_code}};
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

} // namespace sdpa_doctor::compare
