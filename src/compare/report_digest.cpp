// Reading a report back for comparison: only the fields diff and merge need, each checked.
#include "compare/compare.hpp"
#include "report/report.hpp"

#include "core/case.hpp"
#include "core/io.hpp"
#include "core/model_json.hpp"
#include "core/text.hpp"
#include "core/variant.hpp"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

namespace sdpa_doctor::compare {

using nlohmann::json;

namespace {

// Keys whose values no comparison reads. Dropping them while parsing keeps a fleet merge from
// building the DOM of stderr tails, advice and findings it would throw away at once.
bool is_dropped_key(const std::string& key) {
  static const std::set<std::string> k_dropped = {
      "findings",    "recommendations", "known_issues", "environment", "timings",
      "stderr_tail", "warnings",        "signatures",   "tolerance",   "process_end",
      "sources",     "marketing_names", "facts",        "summary",     "sources_status",
      "backend_chosen"};
  return k_dropped.count(key) != 0;
}

void join_fact(std::map<std::string, std::string>& facts, const std::string& key,
               const std::string& value) {
  if (value.empty()) return;
  auto [it, inserted] = facts.emplace(key, value);
  if (inserted) return;
  // Several devices of one arch: keep each distinct value once.
  const std::string sep = "/";
  std::string all = sep + it->second + sep;
  if (all.find(sep + value + sep) == std::string::npos) it->second += sep + value;
}

// A result field of the wrong type or an impossible value: its message names the field.
struct FieldError {
  std::string message;
};

std::string required_string(const json& r, const char* key) {
  auto it = r.find(key);
  if (it == r.end()) throw FieldError{fmt::format("no '{}'", key)};
  if (!it->is_string() || it->get_ref<const std::string&>().empty())
    throw FieldError{fmt::format("'{}' must be a non-empty string, got {}", key,
                                 it->is_string() ? "\"\"" : it->type_name())};
  return it->get<std::string>();
}

bool is_probe_target(std::string_view device) {
  if (device == "cpu") return true;
  constexpr std::string_view k_cuda = "cuda:";
  if (device.substr(0, k_cuda.size()) != k_cuda) return false;
  const std::string_view index = device.substr(k_cuda.size());
  return !index.empty() && index.size() <= 6 &&
         index.find_first_not_of("0123456789") == std::string_view::npos;
}

// One result as a comparison sees it; what is there must be what the schema says, so a hostile
// or hand-edited report is refused with the field named instead of read as something else.
DigestCell digest_cell(const json& r) {
  if (!r.is_object()) throw FieldError{"not an object"};
  DigestCell c;
  c.case_id = required_string(r, "case_id");
  c.device = required_string(r, "device");
  if (!is_probe_target(c.device))
    throw FieldError{
        fmt::format("'device' must be cpu or cuda:N, got '{}'", shortened(c.device))};
  c.probe = required_string(r, "probe");
  if (!probe_from_string(c.probe))
    throw FieldError{fmt::format("'probe' is unknown: '{}'", shortened(c.probe))};
  c.variant = required_string(r, "variant");
  if (auto m = r.find("mode"); m != r.end() && !m->is_null()) { // v1.7; absent: eager
    if (!m->is_string() || !mode_from_string(m->get<std::string>()))
      throw FieldError{fmt::format("'mode' must be eager or compiled, got {}",
                                   shortened(m->dump()))};
    c.mode = m->get<std::string>();
  }
  const std::string status = required_string(r, "status");
  auto s = status_from_string(status);
  if (!s) throw FieldError{fmt::format("'status' is unknown: '{}'", shortened(status))};
  c.status = *s;
  if (auto reason = r.find("reason"); reason != r.end()) {
    if (!reason->is_string())
      throw FieldError{fmt::format("'reason' must be a string, got {}", reason->type_name())};
    c.reason = reason->get<std::string>();
  }
  auto kase = r.find("case");
  if (kase == r.end()) throw FieldError{"no 'case'"};
  auto parsed = case_from_json(*kase);
  if (!parsed) throw FieldError{fmt::format("'case': {}", parsed.error().message)};
  if (c.case_id != parsed->id())
    throw FieldError{fmt::format("'case_id' is not the id of its case ({}), got '{}'",
                                 parsed->id(), shortened(c.case_id))};
  c.dtype = std::string(to_string(parsed->dtype));
  if (auto d = r.find("directions"); d != r.end() && !d->is_null())
    if (auto problem = directions_problem(*d); !problem.empty()) throw FieldError{problem};
  if (auto m = r.find("metrics"); m != r.end()) {
    if (!m->is_object())
      throw FieldError{fmt::format("'metrics' must be an object, got {}", m->type_name())};
    // null is a time that was not finite (see nonfinite_fields): no time to compare.
    if (auto t = m->find("time_ms"); t != m->end() && !t->is_null()) {
      if (!t->is_number())
        throw FieldError{
            fmt::format("'metrics.time_ms' must be a number, got {}", t->type_name())};
      const double ms = t->get<double>();
      if (!(ms >= 0)) throw FieldError{fmt::format("'metrics.time_ms' is negative: {}", ms)};
      c.time_ms = ms;
    }
  }
  return c;
}

} // namespace

Expected<ReportDigest> read_report(std::string_view document) {
  json doc;
  try {
    doc = json::parse(
        document.begin(), document.end(),
        [](int, json::parse_event_t event, json& parsed) {
          return event != json::parse_event_t::key || !is_dropped_key(parsed.get<std::string>());
        });
  } catch (const json::parse_error& e) {
    const bool at_end = e.byte >= document.size();
    return make_error(fmt::format("{} JSON at byte {}", at_end ? "truncated" : "invalid", e.byte));
  } catch (const json::exception& e) { // out_of_range: a number too large for a double
    return make_error(fmt::format("invalid JSON: {}", json_error_text(e.what())));
  }
  if (!doc.is_object()) return make_error("not an sdpa-doctor report (not a JSON object)");
  auto schema = doc.find("schema");
  if (schema == doc.end() || !schema->is_string())
    return make_error("not an sdpa-doctor report (no \"schema\" field)");
  ReportDigest out;
  out.schema = schema->get<std::string>();
  if (auto ok = report::check_report_schema(out.schema); !ok) return ok.error();
  auto results = doc.find("results");
  if (results == doc.end() || !results->is_array())
    return make_error("not an sdpa-doctor report (no \"results\" array)");

  if (auto host = doc.find("host"); host != doc.end() && host->is_object()) {
    out.hostname = json_text(*host, "hostname");
    for (const char* key : {"kernel", "os"}) {
      if (std::string v = json_text(*host, key); !v.empty()) out.facts[key] = v;
    }
  }
  if (auto tool = doc.find("tool"); tool != doc.end() && tool->is_object())
    out.tool_version = json_text(*tool, "version");
  out.started_at = json_text(doc, "started_at");
  if (auto versions = doc.find("versions"); versions != doc.end())
    report::add_json_scalars(*versions, out.facts);

  // Probe target -> arch, from the inventory's HIP device indices.
  std::map<std::string, std::string> arch_of_target{{"cpu", "cpu"}};
  if (auto inv = doc.find("inventory"); inv != doc.end() && inv->is_object()) {
    if (auto rt = inv->find("runtime"); rt != inv->end())
      report::add_json_scalars(*rt, out.facts, false);
    if (auto devs = inv->find("devices"); devs != inv->end() && devs->is_array()) {
      for (const json& d : *devs) {
        if (!d.is_object()) continue;
        std::string arch = json_text(d, "gfx_target");
        if (arch.empty()) arch = "unknown";
        auto index = d.find("index");
        if (index != d.end() && index->is_number_integer() && index->get<int64_t>() >= 0)
          arch_of_target[fmt::format("cuda:{}", index->get<int64_t>())] = arch;
        auto& facts = out.arch_facts[arch];
        join_fact(facts, "driver", json_text(d, "driver_version"));
        join_fact(facts, "vbios", json_text(d, "vbios"));
        join_fact(facts, "gpu", json_text(d, "name"));
      }
    }
  }
  // Worker versions fill in what the report's own versions lack (torch_cpp, torch_python).
  if (auto workers = doc.find("workers"); workers != doc.end() && workers->is_array()) {
    for (const json& w : *workers) {
      if (!w.is_object()) continue;
      auto versions = w.find("versions");
      if (versions == w.end() || !versions->is_object()) continue;
      const std::string probe = json_text(w, "probe");
      for (auto it = versions->begin(); it != versions->end(); ++it) {
        if (!it->is_string() || it->get<std::string>().empty()) continue;
        std::string key = it.key();
        if (key == "torch" && probe == "libtorch") key = "torch_cpp";
        if (key == "torch" && probe == "python") key = "torch_python";
        out.facts.emplace(key, it->get<std::string>());
      }
    }
  }

  // The targets the run planned: a result on any other device is no cell of this run.
  std::set<std::string> targets;
  if (auto t = doc.find("targets"); t != doc.end() && t->is_array())
    for (const json& name : *t)
      if (name.is_string()) targets.insert(name.get<std::string>());
  std::set<std::string> seen;
  out.cells.reserve(results->size());
  size_t n = 0;
  for (const json& r : *results) {
    ++n;
    DigestCell c;
    try {
      c = digest_cell(r);
    } catch (const FieldError& e) {
      std::string which = fmt::format("result {}", n);
      if (r.is_object())
        if (auto id = r.find("case_id"); id != r.end() && id->is_string())
          which += fmt::format(" ({})", shortened(id->get_ref<const std::string&>()));
      return make_error(fmt::format("{}: {}", which, e.message));
    }
    const std::string cell = fmt::format("{} on {} ({} {})", c.case_id, c.device, c.probe,
                                         escape_to_one_line(shortened(c.row())));
    if (!targets.empty() && !targets.count(c.device))
      return make_error(fmt::format("result {}: the cell {} is outside the report's targets", n,
                                    cell));
    if (!seen.insert(cell).second)
      return make_error(fmt::format("result {}: a second result for the cell {}", n, cell));
    auto arch = arch_of_target.find(c.device);
    c.arch = arch != arch_of_target.end() ? arch->second : "unknown";
    out.cells.push_back(std::move(c));
  }
  return out;
}

Expected<ReportDigest> read_report_file(const std::string& path) {
  auto text = read_text_file(path, "the file", report::k_max_report_bytes);
  if (!text) return text.error();
  return read_report(*text);
}

} // namespace sdpa_doctor::compare
