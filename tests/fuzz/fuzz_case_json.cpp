// Case-file objects and worker case lines: any JSON (or not JSON) must give a case or an error.
#include "core/case.hpp"
#include "cases/cases.hpp"
#include "protocol/protocol.hpp"

#include "fuzz_check.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

using namespace sdpa_doctor;
using sdpa_fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const nlohmann::json j = nlohmann::json::parse(input, nullptr, false);
  if (!j.is_discarded()) {
    if (auto c = case_from_json(j)) {
      check(validate(*c).empty());
      const auto again = case_from_json(to_json(*c));
      check(again.has_value() && *again == *c);
    } else {
      check(!c.error().message.empty());
    }
  }
  if (auto line = protocol::parse_case_line(input)) {
    check(!line->id.empty());
    check(validate(line->kase).empty());
    check(line->tolerance.atol >= 0 && line->tolerance.rtol >= 0);
    check(line->repeat >= 0 && line->repeat <= protocol::k_max_repeat);
    // What the doctor writes, the worker reads back unchanged.
    const auto back = protocol::parse_case_line(protocol::make_case_line(
        line->kase, line->tolerance, line->gradient_tolerance, line->oracle_path, line->warmup, line->repeat));
    check(back.has_value() && back->kase == line->kase && back->warmup == line->warmup &&
          back->repeat == line->repeat && back->oracle_path == line->oracle_path);
  }
  return 0;
}
