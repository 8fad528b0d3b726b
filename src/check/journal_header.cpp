#include "check/journal_header.hpp"

#include "core/model_json.hpp"
#include "report/report.hpp"

#include <fmt/format.h>

#include <map>
#include <string>

namespace sdpa_doctor::check {

namespace {

using nlohmann::json;

json measured_to_json(const Report& r) {
  return {{"tool_version", r.tool_version},
          {"git_revision", r.git_revision},
          {"started_at", r.started_at},
          {"host", r.host},
          {"environment", r.environment},
          {"versions", r.versions},
          {"inventory", to_json(r.inventory)},
          {"targets", r.targets},
          {"suite", r.suite},
          {"model", r.model},
          {"planted_faults", r.planted_faults},
          {"enumerate_ms", r.timings.enumerate_ms}};
}

Expected<Report> measured_from_json(const json& j) {
  Report r;
  try {
    r.tool_version = j.at("tool_version").get<std::string>();
    r.git_revision = j.at("git_revision").get<std::string>();
    r.started_at = j.at("started_at").get<std::string>();
    r.host = j.at("host").get<std::map<std::string, std::string>>();
    r.environment = j.at("environment").get<std::map<std::string, std::string>>();
    r.versions = j.at("versions").get<std::map<std::string, std::string>>();
    r.targets = j.at("targets").get<std::vector<std::string>>();
    r.suite = j.at("suite").get<std::string>();
    r.model = j.at("model").get<std::string>();
    r.timings.enumerate_ms = j.at("enumerate_ms").get<double>();
    r.planted_faults = j.value("planted_faults", std::string{}); // absent before faults were said
  } catch (const json::exception&) {
    return make_error("its measured facts are not what the doctor writes");
  }
  if (!j.contains("inventory")) return make_error("its measured facts hold no inventory");
  auto inventory = inventory_from_json(j.at("inventory"));
  if (!inventory) return make_error("its inventory: " + inventory.error().message);
  r.inventory = std::move(*inventory);
  return r;
}

// Format 0: the raw check options, parsed as flags are (a case file is read again), and the
// report header as it was rendered.
Expected<JournalHeader> read_format0(const json& header) {
  JournalHeader out;
  try {
    out.request = parse_request(header.at("check_options").get<CheckOptions>());
  } catch (const json::exception&) {
    return make_error("its check options are unreadable");
  } catch (const Fatal& e) {
    return make_error("its check options: " + e.message);
  }
  if (auto t = header.find("advice_target"); t != header.end()) {
    auto target = case_from_json(*t);
    if (target) out.request.advice_target = *target;
  }
  auto started = report::read_measured_report(header.at("report"));
  if (!started) return make_error("its report header: " + started.error().message);
  out.started = std::move(*started);
  return out;
}

} // namespace

json journal_header_to_json(const JournalHeader& h) {
  json out{{"format", k_journal_header_format},
           {"check_request", to_json(h.request)},
           {"measured", measured_to_json(h.redact ? report::redact(h.started) : h.started)}};
  if (h.redact) out["redact"] = true;
  return out;
}

Expected<JournalHeader> read_journal_header(const json& header) {
  if (!header.is_object()) return make_error("the journal keeps no check header");
  const auto redacted = [&] {
    auto r = header.find("redact");
    return r != header.end() && r->is_boolean() && r->get<bool>();
  };
  const auto format = header.find("format");
  if (format == header.end()) {
    if (!header.contains("check_options") || !header.contains("report"))
      return make_error("the journal keeps no check header (written by an older doctor)");
    auto old = read_format0(header);
    if (old) old->redact = redacted();
    return old;
  }
  if (!format->is_number_integer())
    return make_error("the journal's header format is not a number");
  if (format->get<int64_t>() != k_journal_header_format)
    return make_error(fmt::format("the journal's header says format {}; this doctor reads format "
                                  "{} and the unnumbered header of earlier doctors (written by "
                                  "another doctor)",
                                  format->get<int64_t>(), k_journal_header_format));
  JournalHeader out;
  auto request = request_from_json(header.value("check_request", json()));
  if (!request) return request.error();
  out.request = std::move(*request);
  auto started = measured_from_json(header.value("measured", json::object()));
  if (!started) return started.error();
  out.started = std::move(*started);
  out.redact = redacted();
  return out;
}

} // namespace sdpa_doctor::check
