#include "report/report.hpp"

#include "core/model_json.hpp"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

namespace sdpa_doctor::report {

using nlohmann::json;

void add_json_scalars(const json& o, std::map<std::string, std::string>& out, bool overwrite) {
  if (!o.is_object()) return;
  for (auto it = o.begin(); it != o.end(); ++it) {
    if (it->is_null()) continue;
    std::string value = it->is_string() ? it->get<std::string>() : it->dump();
    if (value.empty()) continue;
    if (overwrite || !out.count(it.key())) out[it.key()] = std::move(value);
  }
}

Expected<bool> check_report_schema(std::string_view schema) {
  constexpr std::string_view prefix = "sdpa-doctor/report/v";
  if (schema.substr(0, prefix.size()) != prefix)
    return make_error(fmt::format("not an sdpa-doctor report (schema '{}')", schema));
  std::string_view version = schema.substr(prefix.size());
  const size_t dot = version.find('.');
  std::string_view major = version.substr(0, dot);
  auto all_digits = [](std::string_view s) {
    return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
  };
  if (!all_digits(major) || (dot != std::string_view::npos && !all_digits(version.substr(dot + 1))))
    return make_error(fmt::format("unknown report schema '{}'", schema));
  if (major != "1") {
    if (major == "0" || major.front() == '0')
      return make_error(fmt::format("unknown report schema '{}'", schema));
    return make_error(
        fmt::format("newer report schema '{}' (this doctor reads sdpa-doctor/report/v1)", schema));
  }
  return true;
}

Expected<Report> read_measured_report(const json& doc) {
  if (!doc.is_object()) return make_error("not an sdpa-doctor report (not a JSON object)");
  if (auto ok = check_report_schema(json_text(doc, "schema")); !ok) return ok.error();
  Report r;
  if (auto tool = doc.find("tool"); tool != doc.end() && tool->is_object()) {
    r.tool_version = json_text(*tool, "version");
    r.git_revision = json_text(*tool, "git_revision");
  }
  r.started_at = json_text(doc, "started_at");
  for (auto [key, into] : {std::pair{"host", &r.host}, std::pair{"environment", &r.environment},
                           std::pair{"versions", &r.versions}})
    if (auto it = doc.find(key); it != doc.end()) add_json_scalars(*it, *into);
  if (auto inv = doc.find("inventory"); inv != doc.end()) {
    auto inventory = inventory_from_json(*inv);
    if (!inventory) return make_error("inventory: " + inventory.error().message);
    r.inventory = std::move(*inventory);
  }
  if (auto t = doc.find("targets"); t != doc.end() && t->is_array())
    for (const json& target : *t)
      if (target.is_string()) r.targets.push_back(target.get<std::string>());
  r.suite = json_text(doc, "suite");
  r.model = json_text(doc, "model");
  r.planted_faults = json_text(doc, "planted_faults");
  for (const char* key : {"workers", "results"}) {
    auto list = doc.find(key);
    if (list == doc.end()) continue;
    if (!list->is_array()) return make_error(fmt::format("\"{}\" is not an array", key));
    for (const json& item : *list) {
      if (std::string_view(key) == "workers") {
        auto w = worker_info_from_json(item);
        if (!w) return w.error();
        r.workers.push_back(std::move(*w));
      } else {
        auto result = case_result_from_json(item);
        if (!result) return result.error();
        r.results.push_back(std::move(*result));
      }
    }
  }
  if (auto t = doc.find("timings"); t != doc.end()) r.timings = timings_from_json(*t);
  if (auto i = doc.find("interrupted"); i != doc.end() && i->is_boolean()) r.interrupted = i->get<bool>();
  return r;
}

} // namespace sdpa_doctor::report
