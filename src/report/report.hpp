// report: pure renderers from one in-memory Report to text (console, JSON, Markdown, JUnit XML,
// a standalone Python repro per case), the environment allow-list and redaction that decide what
// may reach a report, and the atomic file write. Each format lives in its own file; adding one
// touches one file plus a declaration here.
// Depends on core (and nlohmann-json for the JSON form) only; must not depend on isolate,
// devices, probes, advice, HIP or torch.
#pragma once

#include "core/expected.hpp"
#include "core/model.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sdpa_doctor::report {

// The Report keys the renderers read (absent keys are shown as "unknown" or left out):
//   Report::host      hostname, user, os, kernel
//   Report::versions  rocm, hip_runtime, hip_driver, amdgpu (driver), torch_cpp, torch_python,
//                     torch, python, aotriton
//   WorkerInfo::versions of libtorch workers give torch_cpp, of python workers torch_python and
//   python, where Report::versions lacks them.

inline constexpr std::string_view k_schema = "sdpa-doctor/report/v1.7";

struct ConsoleOptions {
  bool color = false;   // ANSI colours
  bool unicode = true;  // box drawing and symbols; ASCII otherwise
  int width = 100;      // columns to fit; narrower tables wrap their cells
};

// The full human report: header, devices, one matrix per probe target, each failure once,
// findings, recommendations, known issues, one summary line with the exit code.
std::string render_console(const Report& report, const ConsoleOptions& options = {});
// Only the per-device matrices (also used by the Markdown report's text fallback).
std::string render_matrix(const Report& report, const ConsoleOptions& options = {});

// The whole report as JSON with "schema": "sdpa-doctor/report/v1.7" (data/report.schema.json).
// Numbers stay numbers with units in the key; a non-finite number is null and its key is listed
// in the object's "nonfinite_fields".
std::string render_json(const Report& report);

// The inverse of render_json for what was measured and where: header, host, environment,
// versions, inventory, targets, suite, model, workers, results, timings, interrupted. Findings,
// recommendations and known issues are left empty: advice derives them anew. An error names the
// first thing that is not a report.
Expected<Report> read_measured_report(const nlohmann::json& doc);

// What every reader of reports shares (this one and compare's digest reader):
// Refused above this size (a stream too): a report of a full suite on eight GPUs is a few
// hundred MiB at most, and it is read whole.
inline constexpr int64_t k_max_report_bytes = int64_t{1} << 30;
// Accepts "sdpa-doctor/report/v1" and "sdpa-doctor/report/v1.N"; anything else is an error.
Expected<bool> check_report_schema(std::string_view schema);
// The scalars of object `o` into `out` as strings (numbers as JSON writes them; nulls and empty
// strings skipped); a key already in `out` is replaced only when `overwrite`.
void add_json_scalars(const nlohmann::json& o, std::map<std::string, std::string>& out,
                      bool overwrite = true);

// For a bug tracker: environment, matrix, each failure in a <details> block with its repro.
std::string render_markdown(const Report& report);

// One <testsuite> per (device, probe, variant), one <testcase> per case.
std::string render_junit(const Report& report);

// A self-contained Python script that rebuilds the case's inputs bit for bit (the generator of
// core/inputs.hpp, in torch int64 ops), runs SDPA under the result's variant, flags and device,
// compares with a float64 math reference and prints PASS, MISMATCH, NONFINITE, UNSUPPORTED or
// ERROR. Exit status 0 only for PASS. `python3 repro.py --checksum` prints the exact float64 sum
// of each input tensor instead (used to check the generator against core). An error, naming the
// field, when the result's variant, device, probe or case is not one the doctor knows: a report is
// data from elsewhere, and only known values (each as an escaped literal) reach the script.
Expected<std::string> render_repro(const CaseResult& result);

// What render_repro puts in place of each @NAME@ of repro_template(): every value a Python
// literal (a string of printable ASCII with escapes, a number, True/False/None, or a tuple or
// dict of those). For the tests and the fuzz target that hold it to that.
Expected<std::vector<std::pair<std::string, std::string>>> repro_values(const CaseResult& result);
std::string_view repro_template();

// ---- what may reach a report -----------------------------------------------------------------

// ROCm/HIP/torch variables only (HIP_*, HSA_*, ROCR_*, ROCM_*, AMD_*, CUDA_VISIBLE_DEVICES,
// PYTORCH_*, TORCH_*, HF_HUB_OFFLINE, OMP_NUM_THREADS), never a name containing TOKEN, SECRET,
// PASSWORD or KEY (case-insensitive), whatever its prefix.
bool is_reportable_variable(std::string_view name);
std::map<std::string, std::string>
reportable_environment(const std::map<std::string, std::string>& environment);

// Drops host.hostname and host.user and replaces their occurrences (in paths, stderr tails,
// reasons, messages) with "<host>" and "<user>".
Report redact(Report report);
// What redact replaces, longest first: (hostname, "<host>"), (user, "<user>"), each only when it
// is long enough to tell apart (3 characters or more). For text kept outside the report (the
// journal).
std::vector<std::pair<std::string, std::string>> redactions(const Report& report);

// ---- files -----------------------------------------------------------------------------------

struct Written {
  std::string path; // what was written ("-" for stdout)
};

// Writes `text` to a temporary file in the target's directory, fsyncs it and renames it over
// `path`, so a reader never sees half a report. "-" writes to stdout (flushing stdio first). A
// path that exists and is not a regular file (/dev/stdout, a FIFO, a character device) is written
// to directly: renaming over a device node would replace it. Every write, fsync, close and
// rename is checked: an error names the path and the reason, never a silent success.
Expected<Written> write_atomically(const std::string& path, std::string_view text);

} // namespace sdpa_doctor::report
