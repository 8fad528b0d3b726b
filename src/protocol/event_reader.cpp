#include "protocol/protocol.hpp"

#include "core/text.hpp"

#include <fmt/format.h>

namespace sdpa_doctor::protocol {

namespace {

Event broken(std::string problem) {
  Event e;
  e.kind = EventKind::broken;
  e.problem = std::move(problem);
  return e;
}

} // namespace

Event parse_event(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.find_first_not_of(" \t") == std::string_view::npos) return Event{EventKind::blank, {}, {}, {}};
  if (line.find('\0') != std::string_view::npos)
    return broken(fmt::format("line contains a NUL byte: {}", excerpt(line)));
  nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
  if (j.is_discarded()) return broken(fmt::format("not JSON: {}", excerpt(line)));
  if (!j.is_object()) return broken(fmt::format("not a JSON object: {}", excerpt(line)));
  // A missing "v" is read as v1; any other version is a protocol this runner does not speak.
  if (auto v = j.find("v"); v != j.end() && !(v->is_number_integer() && v->get<long long>() == 1))
    return broken(fmt::format("unsupported protocol version {}", excerpt(v->dump())));
  auto ev = j.find("event");
  if (ev == j.end() || !ev->is_string())
    return broken(fmt::format("no \"event\" field: {}", excerpt(line)));
  const std::string name = ev->get<std::string>();
  Event e;
  if (name == "hello") e.kind = EventKind::hello;
  else if (name == "begin") e.kind = EventKind::begin;
  else if (name == "phase") e.kind = EventKind::phase;
  else if (name == "result") e.kind = EventKind::result;
  else if (name == "bye") e.kind = EventKind::bye;
  else e.kind = EventKind::unknown;
  if (e.kind == EventKind::begin || e.kind == EventKind::phase || e.kind == EventKind::result) {
    auto c = j.find("case");
    if (c == j.end() || !c->is_string() || c->get_ref<const std::string&>().empty())
      return broken(fmt::format("{} without a \"case\" id: {}", name, excerpt(line)));
    e.case_id = c->get<std::string>();
  }
  if (e.kind == EventKind::result) {
    auto s = j.find("status");
    if (s == j.end() || !s->is_string())
      return broken(fmt::format("result without a \"status\": {}", excerpt(line)));
  }
  e.body = std::move(j);
  return e;
}

void LineSplitter::feed(std::string_view data, const Handler& handler) {
  while (!data.empty()) {
    auto nl = data.find('\n');
    std::string_view piece = data.substr(0, nl);
    if (m_discarding) {
      if (nl == std::string_view::npos) return;
      m_discarding = false;
    } else if (m_partial.size() + piece.size() > m_max) {
      std::string_view start = m_partial.empty() ? piece : std::string_view(m_partial);
      handler(start.substr(0, std::min(start.size(), std::size_t{256})), true);
      m_partial.clear();
      if (nl == std::string_view::npos) {
        m_discarding = true;
        return;
      }
    } else if (nl == std::string_view::npos) {
      m_partial.append(piece);
      return;
    } else if (m_partial.empty()) {
      handler(piece, false);
    } else {
      m_partial.append(piece);
      handler(m_partial, false);
      m_partial.clear();
    }
    data.remove_prefix(nl + 1);
  }
}

void LineSplitter::finish(const Handler& handler) {
  if (!m_partial.empty()) handler(m_partial, false);
  m_partial.clear();
  m_discarding = false;
}

} // namespace sdpa_doctor::protocol
