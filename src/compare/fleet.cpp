#include "compare/compare.hpp"
#include "report/common.hpp"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace sdpa_doctor::compare {

using nlohmann::json;
using namespace report::detail;

namespace {

// Node names listed in one odd-node line before "and N more".
constexpr size_t k_max_named = 10;
// Facts named in one odd-node line (JSON carries all of them).
constexpr size_t k_max_facts = 3;

// Facts most likely to explain a fault come first: firmware and driver, then the ROCm stack,
// then torch, then the OS.
int fact_rank(const std::string& fact) {
  static const std::vector<std::string> k_order = {
      "driver",          "vbios",       "amdgpu",      "hip_driver_version", "hip_driver",
      "rocm",            "hip_runtime", "hip_runtime_version", "hip",        "torch",
      "torch_cpp",       "torch_python", "aotriton",   "python",             "kernel",
      "os",              "gpu"};
  auto it = std::find(k_order.begin(), k_order.end(), fact);
  return it == k_order.end() ? static_cast<int>(k_order.size()) : static_cast<int>(it - k_order.begin());
}

std::string_view verb_for(const std::map<Status, int>& statuses) {
  if (statuses.size() != 1) return "fails";
  switch (statuses.begin()->first) {
  case Status::crash: return "crashes";
  case Status::timeout: return "times out";
  case Status::mismatch: return "gives wrong results";
  case Status::nonfinite: return "returns NaN/Inf";
  case Status::error: return "errors";
  case Status::unsupported: return "is unsupported";
  case Status::skipped: return "is skipped";
  case Status::pass: break;
  }
  return "fails";
}

std::string joined(const std::set<std::string>& values) {
  return fmt::format("{}", fmt::join(values, "/"));
}

std::string cell_text(const FleetCell& c, bool unicode) {
  const int fail = static_cast<int>(c.failing_nodes.size());
  const int pass = static_cast<int>(c.passing_nodes.size());
  const int n = fail + pass + c.other_nodes;
  if (n == 0) return "";
  if (fail) return fmt::format("{} {}/{} fail", status_symbol(Status::crash, unicode), fail, n);
  if (pass) return fmt::format("{} {}/{} pass", status_symbol(Status::pass, unicode), pass, n);
  return fmt::format("{} {}/{} n/a", status_symbol(Status::unsupported, unicode), c.other_nodes, n);
}

// Columns of one arch's table: the dtypes seen in its rows, fp16, bf16, fp32 first.
std::vector<std::string> dtype_columns(const std::vector<const FleetRow*>& rows) {
  std::set<std::string> seen;
  for (const FleetRow* r : rows)
    for (const auto& [dtype, cell] : r->by_dtype) seen.insert(dtype);
  std::vector<std::string> out;
  for (const char* d : {"fp16", "bf16", "fp32"}) {
    if (seen.erase(d)) out.push_back(d);
  }
  out.insert(out.end(), seen.begin(), seen.end());
  return out;
}

std::map<std::string, std::vector<const FleetRow*>> rows_by_arch(const FleetMatrix& fleet) {
  std::map<std::string, std::vector<const FleetRow*>> out;
  for (const FleetRow* r : fleet.rows()) out[r->arch].push_back(r);
  return out;
}

int nodes_of(const FleetCell& c) {
  return static_cast<int>(c.failing_nodes.size() + c.passing_nodes.size()) + c.other_nodes;
}

std::string summary_line(const FleetMatrix& fleet) {
  int failing_rows = 0;
  for (const FleetRow* r : fleet.rows())
    if (!r->row.failing_nodes.empty()) ++failing_rows;
  std::vector<std::string> parts{fmt::format("{} node{} merged", fleet.nodes(), fleet.nodes() == 1 ? "" : "s"),
                                 fmt::format("{} row{} failing somewhere", failing_rows,
                                             failing_rows == 1 ? "" : "s")};
  if (!fleet.skipped().empty())
    parts.push_back(fmt::format("{} input{} skipped", fleet.skipped().size(),
                                fleet.skipped().size() == 1 ? "" : "s"));
  return fmt::format("Summary: {} · exit code {}", fmt::join(parts, " · "), fleet.exit_code());
}

} // namespace

FleetMatrix::FleetMatrix(std::set<Status> fail_on) : m_fail_on(std::move(fail_on)) {}

void FleetMatrix::add(const ReportDigest& report, const std::string& file_name) {
  Node node;
  node.name = report.hostname.empty() ? file_name : report.hostname;
  if (!m_names.insert(node.name).second) {
    // Two reports from one host (or two unnamed ones): the file tells them apart.
    node.name += " (" + file_name + ")";
    m_names.insert(node.name);
  }
  const int index = static_cast<int>(m_nodes.size());

  struct State {
    bool fail = false;
    bool pass = false;
  };
  using RowKey = std::tuple<std::string, std::string, std::string>;
  std::map<RowKey, std::map<std::string, State>> states;
  std::map<RowKey, std::map<Status, int>> failing_statuses;
  for (const DigestCell& c : report.cells) {
    const RowKey key{c.arch, c.probe, c.row()}; // compiled cells: rows of their own
    State& s = states[key][c.dtype];
    if (m_fail_on.count(c.status)) {
      s.fail = true;
      ++failing_statuses[key][c.status];
    } else if (c.status == Status::pass) {
      s.pass = true;
    }
  }
  auto fold = [index](FleetCell& cell, const State& s) {
    if (s.fail) cell.failing_nodes.push_back(index);
    else if (s.pass) cell.passing_nodes.push_back(index);
    else ++cell.other_nodes;
  };
  for (const auto& [key, by_dtype] : states) {
    FleetRow& row = m_rows[key];
    if (row.arch.empty()) std::tie(row.arch, row.probe, row.variant) = key;
    State whole;
    for (const auto& [dtype, s] : by_dtype) {
      fold(row.by_dtype[dtype], s);
      whole.fail = whole.fail || s.fail;
      whole.pass = whole.pass || s.pass;
    }
    fold(row.row, whole);
    for (const auto& [status, n] : failing_statuses[key]) row.failing_statuses[status] += n;
    const std::string& arch = std::get<0>(key);
    if (!node.facts_by_arch.count(arch)) {
      auto facts = report.facts;
      if (auto it = report.arch_facts.find(arch); it != report.arch_facts.end())
        for (const auto& [k, v] : it->second) facts[k] = v;
      node.facts_by_arch[arch] = std::move(facts);
    }
  }
  m_nodes.push_back(std::move(node));
}

std::vector<const FleetRow*> FleetMatrix::rows() const {
  std::vector<const FleetRow*> out;
  for (const auto& [key, row] : m_rows) out.push_back(&row);
  return out;
}

bool FleetMatrix::any_failure() const {
  return std::any_of(m_rows.begin(), m_rows.end(),
                     [](const auto& kv) { return !kv.second.row.failing_nodes.empty(); });
}

int FleetMatrix::exit_code() const {
  if (!m_skipped.empty() || m_nodes.empty()) return exit_code::usage;
  return any_failure() ? exit_code::failures : exit_code::ok;
}

std::vector<OddNodes> FleetMatrix::odd_nodes() const {
  std::vector<OddNodes> out;
  for (const auto& [key, row] : m_rows) {
    if (row.row.failing_nodes.empty()) continue;
    OddNodes odd;
    odd.row = &row;
    odd.of_nodes = nodes_of(row.row);
    for (int i : row.row.failing_nodes) odd.nodes.push_back(m_nodes[static_cast<size_t>(i)].name);

    // A fact explains the split when every failing node's value differs from every passing
    // node's value (and every node of either side reports it).
    if (!row.row.passing_nodes.empty()) {
      auto facts_of = [&](int i) -> const std::map<std::string, std::string>& {
        return m_nodes[static_cast<size_t>(i)].facts_by_arch.at(row.arch);
      };
      for (const auto& [fact, first_value] : facts_of(row.row.failing_nodes.front())) {
        FactSplit split{fact, {}, {}};
        bool complete = true;
        auto collect = [&](const std::vector<int>& nodes, std::set<std::string>& values) {
          for (int i : nodes) {
            const auto& facts = facts_of(i);
            auto it = facts.find(fact);
            if (it == facts.end()) {
              complete = false;
              return;
            }
            values.insert(it->second);
          }
        };
        collect(row.row.failing_nodes, split.failing_values);
        if (complete) collect(row.row.passing_nodes, split.passing_values);
        if (!complete) continue;
        const bool disjoint = std::none_of(
            split.failing_values.begin(), split.failing_values.end(),
            [&](const std::string& v) { return split.passing_values.count(v) != 0; });
        if (disjoint) odd.splits.push_back(std::move(split));
      }
      std::stable_sort(odd.splits.begin(), odd.splits.end(), [](const FactSplit& a, const FactSplit& b) {
        return fact_rank(a.fact) < fact_rank(b.fact);
      });
    }

    const int failing = static_cast<int>(odd.nodes.size());
    std::string line = fmt::format("{} ({}) {} on {} of {} {} node{}", row.variant, row.probe,
                                   verb_for(row.failing_statuses), failing, odd.of_nodes, row.arch,
                                   odd.of_nodes == 1 ? "" : "s");
    std::vector<std::string> named(
        odd.nodes.begin(), odd.nodes.begin() + static_cast<long>(std::min(odd.nodes.size(), k_max_named)));
    line += ": " + fmt::format("{}", fmt::join(named, ", "));
    if (odd.nodes.size() > k_max_named) line += fmt::format(" and {} more", odd.nodes.size() - k_max_named);
    for (size_t i = 0; i < odd.splits.size() && i < k_max_facts; ++i) {
      const FactSplit& s = odd.splits[i];
      line += fmt::format("; {} {} vs {} elsewhere", s.fact, joined(s.failing_values),
                          joined(s.passing_values));
    }
    if (!row.row.passing_nodes.empty() && odd.splits.empty())
      line += "; no reported fact separates them from the passing nodes";
    odd.line = std::move(line);
    out.push_back(std::move(odd));
  }
  return out;
}

std::string render_fleet_console(const FleetMatrix& fleet, bool unicode) {
  std::string out = fmt::format("sdpa-doctor fleet: {} report{} merged", fleet.nodes(),
                                fleet.nodes() == 1 ? "" : "s");
  if (!fleet.skipped().empty()) out += fmt::format(", {} skipped", fleet.skipped().size());
  out += "\n";
  for (const auto& [arch, rows] : rows_by_arch(fleet)) {
    int arch_nodes = 0;
    for (const FleetRow* r : rows) arch_nodes = std::max(arch_nodes, nodes_of(r->row));
    out +=
        fmt::format("\n{} · {}\n", escape_to_one_line(arch), count_of(size_t(arch_nodes), "node"));
    const std::vector<std::string> dtypes = dtype_columns(rows);
    std::vector<std::vector<std::string>> table;
    std::vector<std::string> header{"probe", "variant"};
    for (const std::string& d : dtypes) header.push_back(escape_to_one_line(d));
    header.push_back("row");
    table.push_back(header);
    for (const FleetRow* r : rows) {
      std::vector<std::string> line{escape_to_one_line(r->probe), escape_to_one_line(r->variant)};
      for (const std::string& d : dtypes) {
        auto it = r->by_dtype.find(d);
        line.push_back(it == r->by_dtype.end() ? "" : cell_text(it->second, unicode));
      }
      line.push_back(cell_text(r->row, unicode));
      table.push_back(std::move(line));
    }
    std::vector<size_t> widths(header.size(), 0);
    for (const auto& line : table)
      for (size_t i = 0; i < line.size(); ++i) widths[i] = std::max(widths[i], display_width(line[i]));
    for (const auto& line : table) {
      std::string text = " ";
      for (size_t i = 0; i < line.size(); ++i) {
        text += " " + line[i];
        if (i + 1 < line.size()) text += std::string(widths[i] - display_width(line[i]) + 1, ' ');
      }
      out += text + "\n";
    }
  }
  const auto odd = fleet.odd_nodes();
  if (!odd.empty()) {
    out += "\nOdd nodes\n";
    for (const OddNodes& o : odd) out += "  " + escape_to_one_line(o.line) + "\n";
  }
  if (!fleet.skipped().empty()) {
    out += "\nSkipped inputs\n";
    for (const SkippedInput& s : fleet.skipped())
      out += fmt::format("  {}: {}\n", escape_to_one_line(s.path), escape_to_one_line(s.why));
  }
  out += "\n" + summary_line(fleet) + "\n";
  return unicode ? out : ascii_dots(out);
}

std::string render_fleet_markdown(const FleetMatrix& fleet) {
  auto cell = [](const std::string& s) { return markdown_cell(markdown_text(s)); };
  std::string out =
      fmt::format("## sdpa-doctor fleet: {}\n", count_of(size_t(fleet.nodes()), "node"));
  for (const auto& [arch, rows] : rows_by_arch(fleet)) {
    const std::vector<std::string> dtypes = dtype_columns(rows);
    out += fmt::format("\n### {}\n\n| probe | variant |", markdown_text(arch));
    for (const std::string& d : dtypes) out += " " + cell(d) + " |";
    out += " row |\n|---|---|";
    for (size_t i = 0; i <= dtypes.size(); ++i) out += "---|";
    out += "\n";
    for (const FleetRow* r : rows) {
      out += fmt::format("| {} | {} |", cell(r->probe), markdown_cell(markdown_code(r->variant)));
      for (const std::string& d : dtypes) {
        auto it = r->by_dtype.find(d);
        out += " " + (it == r->by_dtype.end() ? std::string() : cell_text(it->second, true)) + " |";
      }
      out += " " + cell_text(r->row, true) + " |\n";
    }
  }
  const auto odd = fleet.odd_nodes();
  if (!odd.empty()) {
    out += "\n### Odd nodes\n\n";
    for (const OddNodes& o : odd) out += "- " + markdown_text(o.line) + "\n";
  }
  if (!fleet.skipped().empty()) {
    out += "\n### Skipped inputs\n\n";
    for (const SkippedInput& s : fleet.skipped())
      out += fmt::format("- {}: {}\n", markdown_code(s.path), markdown_text(s.why));
  }
  out += "\n" + summary_line(fleet) + "\n";
  return out;
}

std::string render_fleet_json(const FleetMatrix& fleet) {
  auto names = [&](const std::vector<int>& nodes) {
    json a = json::array();
    for (int i : nodes) a.push_back(fleet.node_name(i));
    return a;
  };
  auto cell_json = [&](const FleetCell& c) {
    return json{{"nodes", nodes_of(c)},
                {"pass", c.passing_nodes.size()},
                {"fail", c.failing_nodes.size()},
                {"other", c.other_nodes},
                {"failing_nodes", names(c.failing_nodes)}};
  };
  json rows = json::array();
  for (const FleetRow* r : fleet.rows()) {
    json by_dtype = json::object();
    for (const auto& [dtype, c] : r->by_dtype) by_dtype[dtype] = cell_json(c);
    json statuses = json::object();
    for (const auto& [s, n] : r->failing_statuses) statuses[std::string(to_string(s))] = n;
    rows.push_back(json{{"arch", r->arch},
                        {"probe", r->probe},
                        {"variant", r->variant},
                        {"row", cell_json(r->row)},
                        {"by_dtype", by_dtype},
                        {"failing_cases_by_status", statuses}});
  }
  json odd = json::array();
  for (const OddNodes& o : fleet.odd_nodes()) {
    json splits = json::array();
    for (const FactSplit& s : o.splits)
      splits.push_back(json{{"fact", s.fact},
                            {"failing_values", s.failing_values},
                            {"passing_values", s.passing_values}});
    odd.push_back(json{{"arch", o.row->arch},
                       {"probe", o.row->probe},
                       {"variant", o.row->variant},
                       {"failing_nodes", o.nodes},
                       {"of_nodes", o.of_nodes},
                       {"splits", splits},
                       {"line", o.line}});
  }
  json skipped = json::array();
  for (const SkippedInput& s : fleet.skipped()) skipped.push_back(json{{"path", s.path}, {"why", s.why}});
  json nodes = json::array();
  for (int i = 0; i < fleet.nodes(); ++i) nodes.push_back(fleet.node_name(i));
  json doc{{"schema", std::string(k_fleet_schema)},
           {"nodes", nodes},
           {"rows", rows},
           {"odd_nodes", odd},
           {"skipped", skipped},
           {"exit_code", fleet.exit_code()}};
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

} // namespace sdpa_doctor::compare
