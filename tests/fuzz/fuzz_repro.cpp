// The repro script of any result, however hostile the report it came from: either an error, or
// the template with every placeholder replaced by one Python literal, and nothing else. The input
// is a result object of a report; when it is not one, its lines are taken as the fields a report
// controls (variant, device, case id, reason, signature, signal name), so hostile text reaches the
// renderer either way.
#include "core/model_json.hpp"
#include "report/report.hpp"

#include "fuzz_check.hpp"
#include "python_literal.hpp"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

using namespace sdpa_doctor;
using sdpa_fuzz::check;

namespace {

// "@NAME@" with NAME in capitals: a placeholder, not the template's own matrix product.
bool has_placeholder(std::string_view line) {
  for (size_t at = line.find('@'); at != std::string_view::npos; at = line.find('@', at + 1)) {
    size_t end = at + 1;
    while (end < line.size() && (std::isupper(static_cast<unsigned char>(line[end])) || line[end] == '_'))
      ++end;
    if (end > at + 1 && end < line.size() && line[end] == '@') return true;
  }
  return false;
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t start = 0; start <= text.size();) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

CaseResult from_fields(std::string_view input) {
  const std::vector<std::string_view> f = lines_of(input);
  const auto field = [&](size_t i) { return i < f.size() ? std::string(f[i]) : std::string(); };
  CaseResult r;
  r.kase = parse_case_id("fp16-b1-h2-q8-k8-d8").value();
  r.variant = field(0);
  r.device = field(1);
  r.case_id = field(2).empty() ? r.kase.id() : field(2);
  r.reason = field(3);
  r.signatures.push_back(field(4));
  r.status = Status::crash;
  r.process_end = ProcessEnd{std::nullopt, 6, field(5), true, false};
  return r;
}

void check_script(const CaseResult& r) {
  auto values = report::repro_values(r);
  auto script = report::render_repro(r);
  check(values.has_value() == script.has_value());
  if (!values) {
    check(!values.error().message.empty());
    check(values.error().message.find('\n') == std::string::npos);
    return;
  }
  for (const auto& [key, value] : *values) check(sdpa_fuzz::PythonLiteral::is_one(value));
  // Line for line the template: each template line without a placeholder comes back unchanged,
  // and no value adds a line.
  const auto want = lines_of(report::repro_template());
  const auto got = lines_of(*script);
  check(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (!has_placeholder(want[i])) {
      check(want[i] == got[i]);
      continue;
    }
    const std::string_view head = want[i].substr(0, want[i].find('@'));
    const std::string_view tail = want[i].substr(want[i].rfind('@') + 1);
    check(got[i].substr(0, head.size()) == head);
    check(got[i].size() >= tail.size() && got[i].substr(got[i].size() - tail.size()) == tail);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const nlohmann::json j = nlohmann::json::parse(input, nullptr, false);
  if (!j.is_discarded())
    if (auto r = case_result_from_json(j)) check_script(*r);
  check_script(from_fields(input));
  return 0;
}
