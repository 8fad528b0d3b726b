// The runner reads whatever a dying worker wrote: every byte sequence must become events (or
// `broken`), never an exception, a crash or unbounded memory.
#include "core/text.hpp"
#include "protocol/protocol.hpp"

#include "fuzz_check.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

using namespace sdpa_doctor;
using namespace sdpa_doctor::protocol;
using sdpa_fuzz::check;

namespace {

bool valid_utf8_single_line(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\n' || c == '\r' || c == 0) return false;
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3
                                     : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    i += n;
  }
  return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  // A whole line as the runner hands it over.
  const Event e = parse_event(input);
  if (e.kind == EventKind::broken) check(valid_utf8_single_line(e.problem));
  if (e.kind == EventKind::begin || e.kind == EventKind::result) check(!e.case_id.empty());

  const std::string ex = excerpt(input, 40);
  check(valid_utf8_single_line(ex));
  check(ex.size() <= 40 + 3);
  const std::string clean = sanitize_text(input);
  check(clean.find('\0') == std::string::npos);

  // The stream as chunks cut at the first byte's value, with a small cap: every line handed over
  // is within the cap and nothing is lost but what the cap drops.
  if (size == 0) return 0;
  const std::size_t cap = 1 + data[0] % 64;
  const std::size_t chunk = 1 + data[0] % 7;
  LineSplitter splitter(cap);
  std::size_t handed = 0;
  auto handler = [&](std::string_view line, bool too_long) {
    check(too_long || line.size() <= cap);
    check(line.find('\n') == std::string_view::npos);
    handed += line.size();
    (void)parse_event(line);
  };
  for (std::size_t at = 1; at < size; at += chunk) splitter.feed(input.substr(at, chunk), handler);
  splitter.finish(handler);
  check(handed <= size);
  return 0;
}
