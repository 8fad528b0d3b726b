// isolate/protocol: the reading side of worker protocol v1 (ARCHITECTURE.md): splitting the
// results stream into lines with a length cap, and parsing one line into an event. Internal to
// isolate; every malformed input becomes a `broken` event, never an exception.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace sdpa_doctor::isolate::detail {

enum class EventKind { hello, begin, result, bye, unknown, blank, broken };

struct Event {
  EventKind kind = EventKind::broken;
  std::string case_id;  // begin and result
  nlohmann::json body;  // the whole object, when it parsed
  std::string problem;  // broken: why, one printable line
};

Event parse_event(std::string_view line);

// A printable, valid-UTF-8, single-line excerpt of at most `max` bytes, for reasons and logs.
std::string excerpt(std::string_view text, std::size_t max = 120);

// Valid UTF-8 with NULs and other control characters but tab and newline replaced.
std::string sanitize_text(std::string_view text);

// Cuts a byte stream into lines. A line longer than the cap is reported once as too long and the
// rest of it up to the next newline is dropped, so memory stays bounded by the cap.
class LineSplitter {
public:
  using Handler = std::function<void(std::string_view line, bool too_long)>;
  explicit LineSplitter(std::size_t max_line_bytes) : m_max(max_line_bytes) {}
  void feed(std::string_view data, const Handler& handler);
  // End of stream: a last line without a newline is handed over too.
  void finish(const Handler& handler);

private:
  std::size_t m_max;
  std::string m_partial;
  bool m_discarding = false;
};

} // namespace sdpa_doctor::isolate::detail
