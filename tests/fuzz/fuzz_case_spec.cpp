// `--case` strings and case ids come from users and bug reports. Whatever parses must be a valid
// case that survives the round trips the doctor relies on (id -> case, JSON -> case).
#include "core/case.hpp"
#include "core/text.hpp"

#include "fuzz_check.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

using namespace sdpa_doctor;
using sdpa_fuzz::check;

namespace {

void check_round_trips(const Case& c) {
  check(validate(c).empty());
  const auto by_id = parse_case_id(c.id());
  check(by_id.has_value() && *by_id == c);
  const auto by_json = case_from_json(to_json(c));
  check(by_json.has_value() && *by_json == c);
  // The sizes the memory guard budgets for must not overflow for any accepted case.
  check(c.input_bytes() > 0 && c.math_scores_bytes() > 0);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  // The message quotes the input, so only an input without a newline gives a one-line message
  // before the CLI escapes it (checked below for all inputs).
  const bool one_line_input = input.find('\n') == std::string_view::npos;
  if (auto c = parse_case_spec(input)) check_round_trips(*c);
  else check(!c.error().message.empty() &&
             (!one_line_input || c.error().message.find('\n') == std::string::npos));
  if (auto c = parse_case_id(input)) check_round_trips(*c);
  else check(!c.error().message.empty());
  // What the terminal gets of any message: one line, no control bytes, whatever was typed.
  for (const char byte : escape_to_one_line(input))
    check(static_cast<unsigned char>(byte) >= 0x20 && byte != 0x7F);
  return 0;
}
