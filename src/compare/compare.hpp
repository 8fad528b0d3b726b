// compare: reading reports back and comparing them. A report JSON (any v1.N) is read into the
// few fields a comparison needs (ReportDigest); `diff` compares a baseline with a new report cell
// by cell, and FleetMatrix folds any number of reports, one at a time, into one fleet matrix with
// the odd nodes named and the environment fact that separates them.
// Pure functions except read_report_file (reads one file). Depends on core and report (the
// schema check, the status words the renderers share) only; never on run, advice or cli.
#pragma once

#include "core/expected.hpp"
#include "core/status.hpp"
#include "core/variant.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace sdpa_doctor::compare {

inline constexpr std::string_view k_diff_schema = "sdpa-doctor/diff/v1";
inline constexpr std::string_view k_fleet_schema = "sdpa-doctor/fleet/v1";

// ---- reading a report back -------------------------------------------------------------------

// One result as diff and merge see it.
struct DigestCell {
  std::string arch;    // gfx target of the probe target's device; "cpu" for the host CPU
  std::string device;  // probe target: "cpu", "cuda:0"
  std::string probe;   // "libtorch", "python", "reference"
  std::string variant; // "flash[ck]"
  std::string mode = "eager"; // "compiled": never compared with or merged into an eager cell
  std::string dtype;   // "fp16"
  std::string case_id;
  Status status = Status::skipped;
  std::string reason;
  std::optional<double> time_ms; // median; absent when not measured
  // The matrix row: "flash", or "flash · compiled".
  std::string row() const {
    return variant_row(variant, mode == "compiled" ? Mode::compiled : Mode::eager);
  }
};

// What one report says, reduced to what a comparison needs.
struct ReportDigest {
  std::string schema;    // as written, e.g. "sdpa-doctor/report/v1"
  std::string hostname;  // empty when redacted
  std::string tool_version;
  std::string started_at;
  // Node-wide environment facts: "kernel", "os", every `versions` key ("rocm", "torch", ...) and
  // every inventory runtime key ("hip_runtime_version", ...).
  std::map<std::string, std::string> facts;
  // Facts of the devices of one gfx target: "driver" (driver_version), "vbios", "gpu" (name);
  // values of several devices of one arch that differ are joined with "/".
  std::map<std::string, std::map<std::string, std::string>> arch_facts;
  std::vector<DigestCell> cells; // report order
};

// Parses one report JSON. Errors are one line: "truncated or invalid JSON at byte N",
// "not an sdpa-doctor report (no schema field)", "newer report schema 'sdpa-doctor/report/v2'
// (this doctor reads v1)", "result 3 (fp16-...) 'device' must be a non-empty string, got
// number": a result field of the wrong type or an impossible value (a case that does not
// validate, a negative time) is refused with the field named. Fields not needed for comparison
// are dropped while parsing.
Expected<ReportDigest> read_report(std::string_view json_text);
// Reads and parses one file ("-" is stdin; a pipe is read as a stream); a directory, an
// unreadable file or one over report::k_max_report_bytes is an error naming why.
Expected<ReportDigest> read_report_file(const std::string& path);

// ---- diff ------------------------------------------------------------------------------------

struct DiffOptions {
  std::set<Status> fail_on;    // statuses that count as failing (advice::parse_fail_on)
  double time_threshold = 1.25; // a ratio of median times at or beyond this (or its inverse)
  bool fail_on_slower = false;  // a slowdown also makes the exit code 1
};

enum class ChangeKind { regression, fix, changed, added, removed, slower, faster };
std::string_view to_string(ChangeKind kind); // "regression", "fix", "changed", "new", ...

struct CellChange {
  ChangeKind kind = ChangeKind::changed;
  DigestCell cell;                    // the new cell; the baseline cell for `removed`
  std::optional<Status> old_status;   // absent for `added`
  std::optional<Status> new_status;   // absent for `removed`
  std::optional<double> old_time_ms;
  std::optional<double> new_time_ms;
  std::string reason; // the new cell's reason (why it fails now)
};

struct DiffResult {
  std::string baseline_label; // "ws1 · sdpa-doctor 0.4.0 · 2025-09-14T09:30:00Z"
  std::string new_label;
  int compared = 0;           // cells present in both
  std::vector<CellChange> changes; // regressions first, then fixes, changed, new, removed, timing
  int count(ChangeKind kind) const;
  int exit_code = 0;          // 1 on a regression (or slowdown with fail_on_slower), else 0
};

DiffResult diff(const ReportDigest& baseline, const ReportDigest& now, const DiffOptions& options);

std::string render_diff_console(const DiffResult& diff, bool unicode = true);
std::string render_diff_markdown(const DiffResult& diff);
std::string render_diff_json(const DiffResult& diff); // "schema": "sdpa-doctor/diff/v1"

// ---- fleet merge -----------------------------------------------------------------------------

// Per (arch, probe, variant) row and dtype column: how many nodes pass, fail or neither.
struct FleetCell {
  std::vector<int> failing_nodes; // node indices, ascending
  std::vector<int> passing_nodes;
  int other_nodes = 0;            // only unsupported or skipped cases
};

struct FleetRow {
  std::string arch;
  std::string probe;
  std::string variant;
  std::map<std::string, FleetCell> by_dtype; // fp16, bf16, fp32, ...
  FleetCell row;                             // a node fails the row when any dtype fails
  std::map<Status, int> failing_statuses;    // failing cases by status, for the wording
};

// One odd-node explanation: a fact whose values on every failing node differ from every passing
// node's value.
struct FactSplit {
  std::string fact;
  std::set<std::string> failing_values;
  std::set<std::string> passing_values;
};

struct OddNodes {
  const FleetRow* row = nullptr;
  std::vector<std::string> nodes; // failing node names
  int of_nodes = 0;               // nodes that ran the row
  std::vector<FactSplit> splits;  // empty when no fact separates them
  std::string line;               // "flash[ck] crashes on 1 of 16 gfx942 nodes: node-07; driver ..."
};

struct SkippedInput {
  std::string path;
  std::string why;
};

// Folds reports one at a time; keeps only the matrix, node names and their facts.
class FleetMatrix {
public:
  explicit FleetMatrix(std::set<Status> fail_on);

  // `file_name` names the node when the report has no hostname (and disambiguates duplicates).
  void add(const ReportDigest& report, const std::string& file_name);
  void skip(SkippedInput skipped) { m_skipped.push_back(std::move(skipped)); }

  int nodes() const { return static_cast<int>(m_nodes.size()); }
  const std::vector<SkippedInput>& skipped() const { return m_skipped; }
  std::vector<const FleetRow*> rows() const; // arch, probe, variant order
  const std::string& node_name(int index) const { return m_nodes[static_cast<size_t>(index)].name; }
  std::vector<OddNodes> odd_nodes() const;   // rows with failing and passing nodes, and rows
                                             // failing everywhere
  bool any_failure() const;
  // 2 when an input was skipped or no report was merged, 1 when any cell fails, else 0.
  int exit_code() const;

private:
  struct Node {
    std::string name;
    std::map<std::string, std::map<std::string, std::string>> facts_by_arch;
  };
  std::set<Status> m_fail_on;
  std::vector<Node> m_nodes;
  std::set<std::string> m_names;
  std::map<std::tuple<std::string, std::string, std::string>, FleetRow> m_rows;
  std::vector<SkippedInput> m_skipped;
};

std::string render_fleet_console(const FleetMatrix& fleet, bool unicode = true);
std::string render_fleet_markdown(const FleetMatrix& fleet);
std::string render_fleet_json(const FleetMatrix& fleet); // "schema": "sdpa-doctor/fleet/v1"

} // namespace sdpa_doctor::compare
