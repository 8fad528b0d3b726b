// protocol: worker protocol v1, both directions and both sides, in one place: the case lines the
// doctor writes for a worker and the worker reads, the events a worker writes on its results fd and
// the runner reads, the canary rule and the TFLOP/s a result implies. Parsing never throws: a
// malformed event is a `broken` event, a malformed case line an error naming why. Used by isolate
// (the runner, the fault worker), workers (the C++ case loop), run (a result folded into its
// CaseResult) and check (the repeat bounds). The Python side is workers/python/sdpa_probe/
// protocol.py, kept in step by the golden lines of tests/protocol/golden/ that both read and write.
// Depends on core only (nlohmann-json for the wire format); never on isolate, workers or torch.
//
// A worker starts as `argv... --results-fd N --cases FILE`: stdin /dev/null, stdout and stderr
// captured, its own process group. FILE holds one case line per case, in order:
//   {"v":1,"id":"fp16-b1-h8-q128-k128-d64","case":{...core::to_json(Case)...},
//    "tolerance":{"atol":..,"rtol":..},"oracle":"/run/dir/oracle/...f64","warmup":1,"repeat":3,
//    "budget_ms":2000}
// `budget_ms` (check --time-budget; 0 or absent: none): once a case's calls took that long, the
// warm-ups left are skipped and no timed run starts after the first (`timed_runs` says how many).
// `oracle`: raw little-endian float64 in logical (B,Hq,Lq,D) order, computed once per case by the
// doctor for every variant; null: the worker computes it. Masked rows (`-mrows`: every query row
// i % 4 == 3) are 0 there; a worker whose torch gives NaN (before 2.5) computes its own oracle with
// those rows NaN (kernels::apply_masked_row_semantics) and says which in the result's
// "masked_rows". A backward case (`-bwd`) carries its forward's oracle; the worker computes the
// float64 gradients itself (never cached) and measures dq, dk, dv with the line's
// gradient_tolerance. A dropout case (`drop0.25`) has V the identity, so its output is the dropped
// probability matrix, measured by cases::measure_dropout and never against the oracle.
//
// Events on fd N, one JSON object a line, each with "v":1, in this order:
//   hello   worker, device, variant, versions, facts (a flat string map, lists comma-separated;
//           arch_list, aotriton_images and ck_sdpa feed advice's gfx verdict)
//   begin   {case}, flushed before the case is touched
//   phase   {case, "phase":"backward", measured:{out}}: a backward case's forward ran; a crash or
//           hang from here on is the backward's (the runner's reason opens "in backward: ")
//   result  {case, "status":"measured", measured:{out,dq,dk,dv,dropout,repeats}, metrics:{time_ms,
//           time_min_ms,timed_runs}, tolerance, backend_chosen, warnings, canary}: numbers only
//           (core/measure.hpp); cases::judge_worker_event writes the status, reason, error
//           metrics and directions before anything reads them. A case that did not run to its
//           end says its own status (unsupported, error) and reason.
//   bye     a clean end.
// A worker reports pass, mismatch, nonfinite, unsupported or error; the runner alone assigns
// crash, timeout and skipped. Anything else (a broken line, an unknown event, EOF without bye, an
// exit or a signal) is evidence about the case that was running, never a reason to lose the rest.
//
// The canary: after each case the LibTorch and Python workers run a 16x16 matmul of ones on the
// device and report "canary":"ok" or "failed: <why>". A failed canary means the case poisoned the
// device: the worker exits 5 without bye (canary_failed), the runner resumes the rest in a fresh
// worker, and apply_result turns that case's pass into error ("poisoned the device: ..."). The
// reference worker runs no canary.
//
// A recommendation's re-run (run/verify.cpp) is a python worker started with `--variant default
// --verify ID --snippet FILE` under exactly the recommendation's environment: it runs FILE (the
// printed Python, byte for byte) before its cases and says `verify` and `snippet_sha256` in its
// hello facts; a snippet that raises makes every case error.
#pragma once

#include "core/case.hpp"
#include "core/expected.hpp"
#include "core/measure.hpp"
#include "core/model.hpp"
#include "core/status.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sdpa_doctor::protocol {

inline constexpr int k_version = 1;

// --- worker input: case lines -------------------------------------------------------------------

struct CaseLine {
  std::string id;          // used in every event about this case
  Case kase;
  Tolerance tolerance;     // an output's
  Tolerance gradient_tolerance; // a gradient's (cases::gradient_tolerance), atol per unit of its scale
  std::string oracle_path; // empty: the worker computes the oracle itself
  int warmup = 1;          // untimed runs; the first of them is the checked run
  int repeat = 3;          // timed runs, the median is reported
  // Once the case's calls have taken this long, the warm-ups left are skipped and no timed run
  // after the second starts (0 = none): a case of twenty seconds a call is called three times (the
  // checked call and two timed ones, each compared with the first), not five.
  int budget_ms = 0;
};

inline constexpr int k_max_repeat = 1000;
inline constexpr int k_max_budget_ms = 86'400'000;

std::string make_case_line(const Case& c, Tolerance tolerance, Tolerance gradient_tolerance,
                           std::string oracle_path, int warmup, int repeat, int budget_ms = 0);
Expected<CaseLine> parse_case_line(std::string_view line);
// One case line per non-blank line; errors name the line number.
Expected<std::vector<CaseLine>> read_cases_file(const std::string& path);
// Writes the lines (each followed by '\n') atomically (core::write_file_atomically). Returns the
// bytes written; an error is one line naming the file system.
Expected<int64_t> write_cases_file(const std::string& path, const std::vector<std::string>& lines);

// --- worker output: events ----------------------------------------------------------------------

struct Hello {
  std::string worker;  // "libtorch", "python", "reference", "fault"
  std::string device;  // "cpu", "cuda:N"
  std::string variant; // a Variant::name()
  std::map<std::string, std::string> versions; // free-form; empty values are dropped on reading
  std::map<std::string, std::string> facts;    // flat; lists comma-separated
};

struct ResultEvent {
  std::string case_id;
  Status status = Status::error;
  std::string reason;                 // one line; empty for pass
  Metrics metrics;                    // unset fields and non-finite values are written as null
  std::optional<Tolerance> tolerance; // the tolerance the verdict was judged with
  // What the worker measured. With awaiting_verdict the case ran to the end: the line's status is
  // "measured" and cases::judge_result_event writes the verdict in. Without, the backward failed
  // (`status` says how) after the forward was measured.
  std::optional<Measured> measured;
  bool awaiting_verdict = false;
  std::string backend_chosen;         // empty when unknown
  std::vector<std::string> warnings;  // captured library warnings, in order
  std::string canary;                 // "ok" / "failed: <why>"; empty = none ran (not written)
  // Backward cases only: the verdict per direction ("directions": {"forward", "backward"}).
  std::optional<Status> forward;
  std::optional<Status> backward;
  // masked_rows cases only: what the oracle gave fully masked rows ("masked_rows": "zero"/"nan").
  std::optional<MaskedRowSemantics> masked_rows;
};

// What a worker says when a backward case's forward is done and judged and its backward starts,
// so that a crash or hang from here on is the backward's.
struct PhaseEvent {
  std::string case_id;
  std::string phase = "backward";
  Status forward = Status::pass; // the forward's verdict (cases::judge_phase_event's)
  std::string forward_reason;    // empty for a pass
  std::optional<Measured> measured; // what a worker writes: the forward's measurements
};

// A worker whose canary failed writes the case's result and then exits with this code, without
// `bye`, so the runner resumes the rest in a fresh process.
inline constexpr int k_exit_canary_failed = 5;
// Whether a canary answer says the device was poisoned ("failed: <why>").
inline bool canary_failed(std::string_view canary) { return canary.rfind("failed", 0) == 0; }

// The lines the events are written as, without the trailing newline.
std::string hello_line(const Hello& hello);
std::string begin_line(std::string_view case_id);
std::string phase_line(const PhaseEvent& event);
std::string result_line(const ResultEvent& event);
std::string bye_line();

// Writes events to the results fd with write(2) loops and nothing buffered, so a line is on the
// pipe before the worker touches the next thing (a crash cannot eat it).
class ProtocolWriter {
public:
  // Does not take ownership of `fd`.
  explicit ProtocolWriter(int fd);

  bool hello(const Hello& hello);
  bool begin(std::string_view case_id);
  bool phase(const PhaseEvent& event);
  bool result(const ResultEvent& event);
  bool bye();

  // False once a write failed (the reader went away): later events are dropped.
  bool ok() const { return m_ok; }

private:
  bool write_line(const std::string& line);

  int m_fd;
  bool m_ok = true;
};

// --- reading events -----------------------------------------------------------------------------

enum class EventKind { hello, begin, phase, result, bye, unknown, blank, broken };

struct Event {
  EventKind kind = EventKind::broken;
  std::string case_id;  // begin, phase and result
  nlohmann::json body;  // the whole object, when it parsed
  std::string problem;  // broken: why, one printable line
};

// One line of the results stream: a `result` has a case id and a status, a `begin` a case id; a
// missing "v" reads as v1, any other version is broken.
Event parse_event(std::string_view line);

// The fields of a `hello` (numbers and booleans in versions and facts as JSON text). A field that
// is missing or of another type is left empty.
Hello read_hello(const nlohmann::json& hello);

// The fields of a `result`. A field that is missing or of another type is left as a default
// ResultEvent has it (the event comes from a process that may be half broken); `status` stays
// `error` unless it names a status.
ResultEvent read_result(const nlohmann::json& result);

// The fields of a `phase` event; a forward status that is missing or not a worker status reads
// as `error`.
PhaseEvent read_phase(const nlohmann::json& phase);

// Folds a worker's `result` event into `out`: metrics (and the TFLOP/s they imply for out.kase),
// tolerance, backend_chosen, warnings, then the canary rule: a failed canary means this case
// poisoned the device, so a pass becomes `error` ("poisoned the device: canary failed after it:
// ...") and any other status keeps its value with the canary's text added to the reason; the
// directions of a backward case are copied. The
// status itself is the runner's: call after it is set. A missing field leaves `out` as it was.
void apply_result(const nlohmann::json& result, CaseResult& out);

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

} // namespace sdpa_doctor::protocol
