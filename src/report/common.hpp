// report/common: what several renderers share (status labels, the per-device matrix counts, the
// environment header lines, known-issue lookups). Private to src/report/.
#pragma once

#include "core/model.hpp"
#include "core/io.hpp"

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace sdpa_doctor::report::detail {

std::string_view status_label(Status s);          // "PASS", "CRASH", "UNSUP", "SKIP", ...
std::string_view status_symbol(Status s, bool unicode); // "✓" / "+", ...
std::string_view status_ansi(Status s);           // SGR colour sequence for the status
// Failures first, so the worst thing in a cell is read first.
int status_order(Status s);

struct MatrixRow {
  Probe probe = Probe::torch;
  std::string variant;
  std::map<DType, std::map<Status, int>> counts; // per dtype column
};

struct DeviceMatrix {
  std::string device;                 // probe target
  std::vector<DType> dtypes;          // columns present, fp16, bf16, fp32 order
  std::vector<MatrixRow> rows;        // grouped by probe (libtorch, python, reference, fault)
  std::map<Status, int> totals;
};

// One matrix per probe target, in Report::targets order, then any other device seen.
std::vector<DeviceMatrix> build_matrices(const Report& report);

// "cuda:0 · AMD Radeon RX 9070 XT · gfx1201 (RDNA4) · 16 GiB"; "cpu · host CPU".
std::string device_title(const Report& report, const std::string& device);
const Device* device_for_target(const Report& report, const std::string& target);
// "gfx: physical gfx1201 · effective gfx1201 · torch built for gfx90a,gfx942 → missing: ...";
// empty when the device has no settled GfxTruth.
std::string gfx_line(const Report& report, const std::string& device);

// Header lines as (label, value), e.g. {"host", "ws1 · Ubuntu 24.04 · kernel 6.8.0"}.
std::vector<std::pair<std::string, std::string>> environment_lines(const Report& report);

// Known-issue matches that cover this result.
std::vector<const KnownIssueMatch*> issues_for(const Report& report, const CaseResult& r);

// Results whose status is a failure by default (DESIGN.md), in report order.
std::vector<const CaseResult*> failures(const Report& report);

// "signal SIGABRT (core dumped)", "exit 3", "killed after the deadline"; empty when unknown.
std::string process_end_text(const CaseResult& r);

// The last `n` non-empty lines of `text`.
std::vector<std::string> last_lines(std::string_view text, size_t n);

std::string format_ms(double ms);

// "verified: 36/36 cases under these flags (a fresh python worker, 1.8 s)", "NOT verified: ...",
// "not verified: <why it could not re-run>".
std::string verification_line(const Verification& v);

// "1 crash · 23 skipped · 72 pass" (statuses with non-zero counts, failure first).
std::string summary_counts(const std::map<Status, int>& totals);

// What the results count: "36 cases × 12 variants = 432 cells" (a cell is one case under one
// variant on one device; "× 2 devices" when there are several), "1 cell" for one.
std::string cells_summary(const Report& report);
// A Markdown table cell: '|' escaped, line breaks as spaces.
std::string markdown_cell(std::string_view text);
// The ASCII form of a line: each " · " separator's dot becomes '-'.
std::string ascii_dots(std::string_view text);

// Codepoints, which is the display width for the symbols and box characters we emit.
size_t display_width(std::string_view utf8);

} // namespace sdpa_doctor::report::detail
