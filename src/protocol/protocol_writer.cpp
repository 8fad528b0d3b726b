#include "protocol/protocol.hpp"

#include "core/io.hpp"

#include <cmath>

namespace sdpa_doctor::protocol {

namespace {

nlohmann::json number_or_null(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return nullptr;
  return *v;
}

nlohmann::json event(const char* name) { return nlohmann::json{{"v", k_version}, {"event", name}}; }

// Library messages may carry bytes that are not UTF-8; the line must still be valid JSON.
std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

} // namespace

std::string hello_line(const Hello& hello) {
  auto j = event("hello");
  j["worker"] = hello.worker;
  j["device"] = hello.device;
  j["variant"] = hello.variant;
  j["versions"] = hello.versions;
  j["facts"] = hello.facts;
  return dump(j);
}

std::string begin_line(std::string_view case_id) {
  auto j = event("begin");
  j["case"] = case_id;
  return dump(j);
}

std::string phase_line(const PhaseEvent& e) {
  auto j = event("phase");
  j["case"] = e.case_id;
  j["phase"] = e.phase;
  if (e.measured) j["measured"] = to_json(*e.measured);
  else j["forward"] = {{"status", to_string(e.forward)}, {"reason", e.forward_reason}};
  return dump(j);
}

std::string result_line(const ResultEvent& e) {
  auto j = event("result");
  j["case"] = e.case_id;
  j["status"] = e.awaiting_verdict ? std::string_view(k_measured_status) : to_string(e.status);
  j["reason"] = e.reason;
  if (e.measured) j["measured"] = to_json(*e.measured);
  const Metrics& m = e.metrics;
  j["metrics"] = {{"max_abs_err", number_or_null(m.max_abs_err)},
                  {"rel_l2_err", number_or_null(m.rel_l2_err)},
                  {"frac_outside_tol", number_or_null(m.frac_outside_tol)},
                  {"nan_count", m.nan_count},
                  {"inf_count", m.inf_count},
                  {"time_ms", number_or_null(m.time_ms)},
                  {"time_min_ms", number_or_null(m.time_min_ms)},
                  {"timed_runs", m.timed_runs}};
  if (e.tolerance)
    j["tolerance"] = {{"atol", number_or_null(e.tolerance->atol)},
                      {"rtol", number_or_null(e.tolerance->rtol)}};
  else
    j["tolerance"] = nullptr;
  j["backend_chosen"] = e.backend_chosen;
  j["warnings"] = e.warnings;
  if (!e.canary.empty()) j["canary"] = e.canary;
  if (e.forward || e.backward) {
    j["directions"] = nlohmann::json::object();
    if (e.forward) j["directions"]["forward"] = to_string(*e.forward);
    if (e.backward) j["directions"]["backward"] = to_string(*e.backward);
  }
  if (e.masked_rows) j["masked_rows"] = to_string(*e.masked_rows);
  return dump(j);
}

std::string bye_line() { return dump(event("bye")); }

ProtocolWriter::ProtocolWriter(int fd) : m_fd(fd) {}

bool ProtocolWriter::write_line(const std::string& line) {
  if (!m_ok) return false;
  std::string text = line;
  text.push_back('\n');
  m_ok = write_all(m_fd, text);
  return m_ok;
}

bool ProtocolWriter::hello(const Hello& hello) { return write_line(hello_line(hello)); }

bool ProtocolWriter::begin(std::string_view case_id) { return write_line(begin_line(case_id)); }

bool ProtocolWriter::phase(const PhaseEvent& e) { return write_line(phase_line(e)); }

bool ProtocolWriter::result(const ResultEvent& e) { return write_line(result_line(e)); }

bool ProtocolWriter::bye() { return write_line(bye_line()); }

} // namespace sdpa_doctor::protocol
