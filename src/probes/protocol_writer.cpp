#include "probes/protocol_writer.hpp"
#include "core/io.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <unistd.h>

namespace sdpa_doctor::probes {

namespace {

nlohmann::json number_or_null(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return nullptr;
  return *v;
}

nlohmann::json event(const char* name) { return nlohmann::json{{"v", 1}, {"event", name}}; }

// Library messages may carry bytes that are not UTF-8; the line must still be valid JSON.
std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

} // namespace

ProtocolWriter::ProtocolWriter(int fd) : m_fd(fd) {}

bool ProtocolWriter::write_line(const std::string& line) {
  if (!m_ok) return false;
  std::string text = line;
  text.push_back('\n');
  m_ok = write_all(m_fd, text);
  return m_ok;
}

bool ProtocolWriter::hello(std::string_view worker, std::string_view device,
                           std::string_view variant,
                           const std::map<std::string, std::string>& versions,
                           const std::map<std::string, std::string>& facts) {
  auto j = event("hello");
  j["worker"] = worker;
  j["device"] = device;
  j["variant"] = variant;
  j["versions"] = versions;
  j["facts"] = facts;
  return write_line(dump(j));
}

bool ProtocolWriter::begin(std::string_view case_id) {
  auto j = event("begin");
  j["case"] = case_id;
  return write_line(dump(j));
}

std::string ProtocolWriter::result_line(const ResultEvent& e) {
  auto j = event("result");
  j["case"] = e.case_id;
  j["status"] = to_string(e.status);
  j["reason"] = e.reason;
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
  return dump(j);
}

bool ProtocolWriter::result(const ResultEvent& e) { return write_line(result_line(e)); }

bool ProtocolWriter::bye() { return write_line(dump(event("bye"))); }

} // namespace sdpa_doctor::probes
