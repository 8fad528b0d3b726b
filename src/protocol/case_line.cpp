#include "protocol/protocol.hpp"

#include "core/io.hpp"
#include "core/text.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

namespace sdpa_doctor::protocol {

std::string make_case_line(const Case& c, Tolerance tolerance, Tolerance gradient_tolerance,
                           std::string oracle_path, int warmup, int repeat, int budget_ms) {
  nlohmann::json j{{"v", k_version},
                   {"id", c.id()},
                   {"case", to_json(c)},
                   {"tolerance", {{"atol", tolerance.atol}, {"rtol", tolerance.rtol}}},
                   {"gradient_tolerance",
                    {{"atol", gradient_tolerance.atol}, {"rtol", gradient_tolerance.rtol}}},
                   {"warmup", warmup},
                   {"repeat", repeat}};
  if (budget_ms > 0) j["budget_ms"] = budget_ms;
  if (oracle_path.empty()) j["oracle"] = nullptr;
  else j["oracle"] = std::move(oracle_path);
  return j.dump();
}

namespace {

Expected<int> small_int(const nlohmann::json& j, const char* key, int fallback, int min, int max) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number_integer())
    return make_error(fmt::format("'{}' must be an integer", key));
  const int64_t v = j[key].get<int64_t>();
  if (v < min || v > max)
    return make_error(fmt::format("'{}' must be in [{}, {}], got {}", key, min, max, v));
  return int(v);
}

Expected<Tolerance> tolerance_of(const nlohmann::json& j, const char* name) {
  if (!j.contains(name) || !j[name].is_object())
    return make_error(fmt::format("a case line needs \"{}\":{{\"atol\":..,\"rtol\":..}}", name));
  double values[2] = {0, 0};
  const char* keys[2] = {"atol", "rtol"};
  for (int i = 0; i < 2; ++i) {
    const nlohmann::json& t = j[name];
    if (!t.contains(keys[i]) || !t[keys[i]].is_number())
      return make_error(fmt::format("'{}.{}' must be a number", name, keys[i]));
    values[i] = t[keys[i]].get<double>();
    if (!std::isfinite(values[i]) || values[i] < 0)
      return make_error(fmt::format("'{}.{}' must be finite and >= 0", name, keys[i]));
  }
  return Tolerance{values[0], values[1]};
}

} // namespace

Expected<CaseLine> parse_case_line(std::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return make_error(fmt::format("not JSON: {}", json_error_text(e.what())));
  }
  if (!j.is_object()) return make_error("a case line must be a JSON object");
  if (!j.contains("v") || j["v"] != 1) return make_error("a case line needs \"v\":1");
  CaseLine line;
  if (!j.contains("case")) return make_error("a case line needs \"case\"");
  auto c = case_from_json(j["case"]);
  if (!c) return c.error();
  line.kase = *c;
  if (j.contains("id") && !j["id"].is_null()) {
    if (!j["id"].is_string() || j["id"].get<std::string>().empty())
      return make_error("'id' must be a non-empty string");
    line.id = j["id"].get<std::string>();
  } else {
    line.id = line.kase.id();
  }
  auto tolerance = tolerance_of(j, "tolerance");
  if (!tolerance) return tolerance.error();
  line.tolerance = *tolerance;
  auto gradient_tolerance = tolerance_of(j, "gradient_tolerance");
  if (!gradient_tolerance) return gradient_tolerance.error();
  line.gradient_tolerance = *gradient_tolerance;
  if (j.contains("oracle") && !j["oracle"].is_null()) {
    if (!j["oracle"].is_string()) return make_error("'oracle' must be a path or null");
    line.oracle_path = j["oracle"].get<std::string>();
  }
  auto warmup = small_int(j, "warmup", 1, 0, k_max_repeat);
  if (!warmup) return warmup.error();
  auto repeat = small_int(j, "repeat", 3, 0, k_max_repeat);
  if (!repeat) return repeat.error();
  auto budget = small_int(j, "budget_ms", 0, 0, k_max_budget_ms);
  if (!budget) return budget.error();
  line.warmup = *warmup;
  line.repeat = *repeat;
  line.budget_ms = *budget;
  return line;
}

Expected<std::vector<CaseLine>> read_cases_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(fmt::format("cannot open cases file '{}': {}", path, std::strerror(errno)));
  std::vector<CaseLine> out;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto parsed = parse_case_line(line);
    if (!parsed) return make_error(fmt::format("{}:{}: {}", path, number, parsed.error().message));
    out.push_back(std::move(*parsed));
  }
  return out;
}

Expected<int64_t> write_cases_file(const std::string& path, const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  auto written = write_file_atomically(path, text);
  if (!written) return make_error("cannot write the cases file " + written.error().message);
  return written;
}

} // namespace sdpa_doctor::protocol
