// core/io: the few POSIX I/O loops every part needs, written once. Depends on the standard
// library and POSIX only.
#pragma once

#include "core/expected.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace sdpa_doctor {

// Writes all of `data` to `fd`, retrying on EINTR and short writes. False on the first error
// (errno tells which), so a full disk or a closed pipe is never a silent success.
bool write_all(int fd, std::string_view data);

// Milliseconds from `start` to now on the monotonic clock.
double ms_since(std::chrono::steady_clock::time_point start);

// Now as an ISO-8601 UTC timestamp, e.g. "2026-12-03T06:07:53Z".
std::string utc_now();

// The whole of `path` ("-" is stdin) when it holds at most `max_bytes`: a regular file's size is
// checked before it is read; a pipe, FIFO or terminal is read as a stream until its end or one
// byte past the limit. Errors are one line about `what` (e.g. "case file 'x.jsonl'"): "... is a
// directory", "... is N bytes; the limit is M MiB", "cannot read ...: <errno text>".
Expected<std::string> read_text_file(const std::string& path, std::string_view what,
                                     int64_t max_bytes);

// "512 B", "1.5 KiB", "16 GiB": binary units, two significant digits at most below 10.
std::string format_bytes(int64_t bytes);

} // namespace sdpa_doctor
