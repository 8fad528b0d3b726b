// core/io: the few POSIX I/O loops every part needs, written once. write_file_atomically is the
// one temporary-file-and-rename write of bytes (reports, cases files, oracle files, compiled GPU
// kernels, verify snippets); a file that already exists elsewhere is linked, copied or compiled
// under a temporary name and renamed into place by its one user (an oracle into its cache,
// run/oracle_cache.cpp; a LibTorch plugin, run/torch_plugin.cpp).
// Reads of what a user or the environment hands in are size-capped and refuse a FIFO or a device.
// Depends on the standard library and POSIX only.
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

// write_all for a file the doctor keeps (the journal, a worker's cases file, the run lock). The
// test-only switch SDPA_DOCTOR_TEST_WRITE_FAULT=GLOB fails it with ENOSPC, as a full disk does,
// when the file's name matches GLOB (fnmatch), so tests reach every path a full disk takes.
bool write_own_file(int fd, std::string_view data, const std::string& path);

// One line for a write to `path` that failed with `error_number`, naming the file system that
// holds it so a reader knows which disk to clear: "/mnt/x/run/journal.jsonl: No space left on
// device (tmpfs at /mnt/x, 0 B free of 256 KiB)".
std::string describe_write_failure(const std::string& path, int error_number);

// Replaces `path` with `data` through a temporary file beside it (mode 0644) renamed over it, so
// a reader sees the old file or the whole new one, never a part. `durable`: the file and its
// directory are synced before it returns (a report); a scratch file (a cases file, an oracle)
// skips that. The test switch of write_own_file applies to `path`'s name. Returns the bytes
// written; an error is describe_write_failure's line (also when no temporary file can be made
// beside it), for the caller to say what the file was.
Expected<int64_t> write_file_atomically(const std::string& path, std::string_view data,
                                        bool durable = false);

// `text` onto stdout through its stdio buffer, never throwing (fmt::print throws on a failed
// write): a closed pipe or a full disk is left in ferror(stdout) and stdout_error(), so a command
// goes on to write its files and then exits 4.
void print_to_stdout(std::string_view text);
// errno of stdout's first failed print_to_stdout, 0 when none failed.
int stdout_error();

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

// Opens `path` to read without blocking (O_NONBLOCK: a FIFO cannot stall the open, a device
// cannot be read forever) and keeps it only when it is a regular file of at most `max_bytes`.
// The descriptor is the caller's to close. Errors are one line about `what`, as
// read_text_file's, and "... is not a regular file (a FIFO)".
Expected<int> open_regular_file(const std::string& path, std::string_view what, int64_t max_bytes);

// The whole of `path` through open_regular_file, for every file the doctor reads that a user or
// the environment chose (a torch's version.py, a marker in a cache, a known-issues file): a
// FIFO, /dev/zero or a file over `max_bytes` (also one that grows past it) is an error.
Expected<std::string> read_regular_file(const std::string& path, std::string_view what,
                                        int64_t max_bytes);

// "512 B", "1.5 KiB", "16 GiB": binary units, two significant digits at most below 10.
std::string format_bytes(int64_t bytes);

} // namespace sdpa_doctor
