// report/common: what several renderers share (status labels, the per-device matrix counts, the
// environment header lines, known-issue lookups, the failures grouped by cause, Markdown
// escaping). Private to src/report/ and to compare's diff and fleet renderers, which word
// statuses, times and counts the same way.
#pragma once

#include "core/model.hpp"
#include "core/io.hpp"
#include "core/text.hpp"

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
  Mode mode = Mode::eager; // compiled cells have rows of their own
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

// The workers of `device` that could not run, one entry per (probe, reason) with the variants it
// kept from running: a reason shared by every variant of a probe is said once.
struct NotRun {
  Probe probe;
  std::vector<std::string> variants;
  std::string reason;
};
std::vector<NotRun> workers_not_run(const Report& report, const std::string& device);

// Header lines as (label, value), e.g. {"host", "ws1 · Ubuntu 24.04 · kernel 6.8.0"}.
std::vector<std::pair<std::string, std::string>> environment_lines(const Report& report);

// Known-issue matches that cover this result.
std::vector<const KnownIssueMatch*> issues_for(const Report& report, const CaseResult& r);

// Results whose status is a failure by default (advice::default_fail_on), in report order.
std::vector<const CaseResult*> failures(const Report& report);

// "signal SIGABRT (core dumped)", "exit 3", "killed after the deadline"; empty when unknown.
std::string process_end_text(const CaseResult& r);

// The last `n` non-empty lines of `text`.
std::vector<std::string> last_lines(std::string_view text, size_t n);

std::string format_ms(double ms);

// "1 case", "2 cases".
std::string count_of(size_t n, std::string_view noun);

// "verified: 36/36 cases under these flags (a fresh python worker, 1.8 s)", "NOT verified: ...",
// "not verified: <why it could not re-run>".
std::string verification_line(const Verification& v);

// "exit code 1", and why when no failing cell explains it: "exit code 1 (a re-run under the
// recommended flags failed)".
std::string exit_code_text(const Report& report);

// "1 crash · 23 skipped · 72 pass" (statuses with non-zero counts, failure first).
std::string summary_counts(const std::map<Status, int>& totals);

// What the results count: "36 cases × 12 variants = 432 cells" (a cell is one case under one
// variant on one device; "× 2 devices" when there are several), "1 cell" for one.
std::string cells_summary(const Report& report);
// The ASCII form of a line: each " · " separator's dot becomes '-'.
std::string ascii_dots(std::string_view text);

// ---- Markdown: report text is data, so none of it may become markup --------------------------

// Inline text: one line (escape_to_one_line), '<' and '&' as entities (no raw HTML), and the
// characters that make emphasis, code or a link ("](") backslash-escaped.
std::string markdown_text(std::string_view text);
// Inline code: one line, between backtick runs longer than any run inside it.
std::string markdown_code(std::string_view text);
// A table cell of already rendered Markdown: '|' escaped (also inside code spans, as GFM wants),
// line breaks as spaces.
std::string markdown_cell(std::string_view markdown);
// A fenced code block of `body` verbatim: a fence longer than any backtick run inside it, so no
// line of the body can close it.
std::string markdown_fence(std::string_view body, std::string_view lang);
// Text inside raw HTML (a <summary>): one line, '<' '>' '&' '"' as entities.
std::string html_text(std::string_view text);
// "[text](url)" for an http(s) URL with nothing in it that could end the link early; otherwise
// the text followed by the URL as inline code.
std::string markdown_link(std::string_view text, std::string_view url);

// ---- each cause once -------------------------------------------------------------------------

// The cells one cause explains: the failing cells of one (device, probe, variant) that ended the
// same way (status, process end, signatures, reason up to its numbers), with the cells that were
// not run because of them (by their `cause` and `culprit`); or, for cells skipped with no failure
// to blame, the cells of one device skipped for one cause and reason (up to its numbers).
struct Cause {
  std::vector<const CaseResult*> results; // report order; results.front() is the example
  std::vector<std::string> variants;      // the variants of `results`, first seen first
  // Skipped because the worker's restart budget ran out after this cause's failures, and the
  // failures in a row that spent it (0 when the skipped cells follow no such run).
  std::vector<const CaseResult*> budget_skipped;
  int in_a_row = 0;
  // Skipped because a case of this cause left the device unhealthy (any variant of the device).
  std::vector<const CaseResult*> unhealthy_skipped;
  // The advice finding that says the same about these cells (its remedy is the cause's), or null.
  const Finding* finding = nullptr;

  const CaseResult& example() const { return *results.front(); }
  Status status() const { return example().status; }
};

// The failing cells' causes, in report order of their first cell; then the causes of skipped
// cells that no failure explains.
std::vector<Cause> failure_causes(const Report& report);
std::vector<Cause> skip_causes(const Report& report);

// Findings that restate the cells of a cause (a variant's failures or skips, a failing case that
// poisoned the device): the cause blocks say them, so the Findings sections leave them out.
// `causes`: failure_causes of the same report.
bool told_by_causes(const Finding& f, const std::vector<Cause>& causes);

// "stopped after 5 failures in a row; 19 cases not run", "the device was unhealthy after it: 12
// cells not run (flash, math)"; empty when the cause stopped nothing.
std::vector<std::string> not_run_lines(const Cause& cause);

// The shrink's rule, with the probe named when another probe's shrink has the same variant and
// device ("flash (python) on cpu: ..."), so two such lines can be told apart.
std::string shrink_title(const Report& report, const Shrink& s);

} // namespace sdpa_doctor::report::detail
