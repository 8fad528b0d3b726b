// advice: pure functions from a Report's results (+ device facts + known-issue data) to findings,
// recommended flags and known-issue matches, each with a stable id and the case ids that prove
// it, and which statuses fail a check (--fail-on; the exit code itself is check::exit_code_for's).
// The one I/O is reading a known-issues file (load_known_issues: data/known_issues.json, each
// entry with its source link, its rules and the verbatim text a test feeds to its own rules).
// Depends on core only (and nlohmann-json inside that loader). Must not depend on isolate,
// devices, workers, report, HIP or torch.
#pragma once

#include "core/case.hpp"
#include "core/expected.hpp"
#include "core/model.hpp"
#include "core/status.hpp"

#include <array>
#include <cstddef>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sdpa_doctor::advice {

// ---- versions --------------------------------------------------------------------------------

// Numeric release components of "2.7.0+rocm6.3", "2.14.0a0", "0.11.1b" -> {2,7,0}, {2,14,0},
// {0,11,1}. Pre-release and local suffixes are ignored on purpose: a 2.14 nightly behaves like
// 2.14 for the issues we track. Empty when the text does not start with a digit.
std::vector<int> version_numbers(std::string_view version);
// <0, 0, >0 like strcmp; missing components count as 0 ("2.7" == "2.7.0").
int compare_versions(std::string_view a, std::string_view b);

// An interval of versions; an empty bound is open.
struct VersionRange {
  std::string min;
  bool min_inclusive = true;
  std::string max;
  bool max_inclusive = false; // "max": "2.8" means below 2.8 unless told otherwise
  bool empty() const { return min.empty() && max.empty(); }
  bool contains(std::string_view version) const; // false for an empty `version`
};

// ---- known issues ----------------------------------------------------------------------------

// One way an issue shows itself. Every condition given must hold; an empty one always holds.
struct IssueRule {
  std::vector<std::string> archs;    // gfx targets; a trailing '*' matches a prefix ("gfx115*")
  std::vector<std::string> variants; // exact Variant::name() values ("flash[ck]")
  std::vector<std::string> backends; // Variant::backend with any flags ("flash")
  VersionRange torch;                // torch version of the worker that ran the case
  VersionRange aotriton;             // AOTriton version, where a worker or the host reported it
  std::string stderr_regex;          // ECMAScript, searched line by line in reason, warnings
                                     // and stderr tail (see k_max_regex_* below)
  std::optional<std::regex> stderr_re;
  std::vector<std::string> signatures; // any of these isolate signature ids matched
  std::set<Status> statuses;           // empty = any status but pass
  std::set<Mode> modes;                // eager, compiled (torch.compile); empty = either
  // ECMAScript, searched in the canary after the case ("failed: ..."; same bounds as stderr)
  std::string canary_regex;
  std::optional<std::regex> canary_re;
  std::set<DType> dtypes;
  std::set<Mask> masks;     // the case's mask kind ("none", "bool", "additive")
  std::set<Layout> layouts; // the case's shared q/k/v layout ("contiguous", "transposed", ...)
  // Each tensor's own layout ("q_layouts", "k_layouts", "v_layouts"): V alone non-contiguous is
  // v_layouts [transposed, strided, offset] with q_layouts and k_layouts [contiguous].
  std::array<std::set<Layout>, 3> own_layouts;
  std::optional<bool> mask_dtype_differs; // an additive mask in another dtype than q
  std::optional<int64_t> head_dim_min; // inclusive
  std::optional<int64_t> head_dim_max; // inclusive
  std::optional<bool> causal;
  // With causal: "causal": "bottom_right" (true) or "top_left" (false); unset: either alignment.
  std::optional<bool> causal_bottom_right;
  std::optional<int64_t> query_len_min; // inclusive
  std::optional<int64_t> query_len_max; // inclusive
  std::optional<bool> gqa; // hq != hkv
  std::optional<bool> dropout; // dropout_p > 0
  std::vector<std::string> gfx_verdicts; // the device's GfxTruth::verdict is one of these
  // Which workers' results it speaks of ("probes": ["libtorch", "python"]); empty = any. A torch
  // issue names the torch probes, so a failure of the doctor's own kernels never matches it.
  std::set<Probe> probes;
};

// What a rule needs to know about the run of one case.
struct CaseFacts {
  std::string arch;     // base gfx target of the case's device, "" for the CPU or unknown
  std::string torch;    // version of torch that ran it, "" when unknown
  std::string aotriton; // "" when unknown
  std::string gfx_verdict = {}; // the device's GfxTruth::verdict, "" when none was settled
};

// The text a source published for an issue, and where a result shows it: what the tests feed an
// entry's own rules. `published` false: the source described the failure in words only, `text`
// is what the failure prints as the source describes it and `note` says so.
struct Verbatim {
  std::string text;
  bool published = false;
  std::string note;
  // Where the text lands in a result: "stderr" (the tail), "reason" or "canary".
  std::string in = "stderr";
  // The result that carries it: its status, variant, case id and the facts of its device.
  Status status = Status::error;
  std::string variant = "default";
  Mode mode = Mode::eager;
  std::string case_id;
  CaseFacts facts;
};

struct KnownIssue {
  std::string id; // stable, unique across merged files
  std::string title;
  std::string link;
  std::string advice;
  std::string fixed_in; // empty = not fixed, or unknown
  std::vector<IssueRule> rules; // any one matching is enough
  std::string source;           // file it came from
  std::optional<Verbatim> verbatim; // absent in files that do not give one
};

struct KnownIssues {
  std::vector<KnownIssue> issues;
};

// Bounds on a `stderr` regex and on what it searches. std::regex compiles and searches by
// recursion, so a deeply nested or long pattern, or a long text, would overflow the stack: a
// pattern longer or more deeply nested than these is refused when the file is read, and the
// text is searched one line at a time, each line cut to its first k_max_regex_line bytes and at
// most k_max_regex_text bytes in all.
inline constexpr std::size_t k_max_regex_bytes = 1024;
inline constexpr int k_max_regex_nesting = 16; // groups inside groups
inline constexpr std::size_t k_max_regex_line = 2048;
inline constexpr std::size_t k_max_regex_text = 64 * 1024;

// Reads one file: a JSON array of entries {id, title, link, match, advice, fixed_in, notes,
// verbatim}, where `match` is one rule object or an array of alternatives and `verbatim` is
// {text, published, note, in, status, variant, case, arch, torch, aotriton, gfx_verdict}. Bad JSON, wrong types, unknown keys
// and bad regexes (too long or too deeply nested included) are an Error whose one-line message
// names the file and the entry.
Expected<KnownIssues> load_known_issues(const std::string& path);
// Parses the same format from text; `source` names it in error messages.
Expected<KnownIssues> parse_known_issues(std::string_view text, const std::string& source);
// Later files add issues; an id seen again replaces the earlier entry (a local file can
// correct a shipped one). Order: first appearance.
KnownIssues merge_known_issues(const std::vector<KnownIssues>& files);

bool rule_matches(const IssueRule& rule, const CaseResult& result, const CaseFacts& facts);
// The result an entry's verbatim text describes: a python probe's result of that status, variant
// and case, with the text in its stderr tail, reason or canary. Pure.
CaseResult verbatim_result(const Verbatim& verbatim);
bool issue_matches(const KnownIssue& issue, const CaseResult& result, const CaseFacts& facts);
// Whether any rule can hold on a device of this arch and these versions, judged by the arch and
// version conditions only (what `sdpa-doctor known-issues` shows before anything ran). Empty
// versions do not exclude a rule.
bool issue_applies_to(const KnownIssue& issue, std::string_view arch, std::string_view torch = {},
                      std::string_view aotriton = {});
bool arch_pattern_matches(std::string_view pattern, std::string_view arch);

// The facts of one result as the report knows them: the arch from the inventory device whose
// index matches "cuda:N" (or the worker's gcnArchName fact), versions from the worker's hello,
// else from Report::versions.
CaseFacts facts_for(const Report& report, const CaseResult& result);

// One match per (issue, device, variant) with every case id it covers, in report order.
std::vector<KnownIssueMatch> match_known_issues(const Report& report, const KnownIssues& issues);

// ---- advice ----------------------------------------------------------------------------------

struct AdviceOptions {
  // The user's real shape (`--target`), for the memory note of math; nullopt = no note numbers.
  std::optional<Case> target;
  // Dtypes the user's code needs; empty = every dtype that was measured on the device.
  std::set<DType> dtypes;
};

// How many next-best configurations per device `advise` offers beside its recommendation.
constexpr size_t k_max_alternatives = 2;

struct AdviceResult {
  std::vector<Finding> findings;
  std::vector<Recommendation> recommendations; // the best proven configuration per device
  // Per device, the next proven configurations in rank order (each id once, at most
  // k_max_alternatives): what to fall back on when a re-run rejects the recommendation.
  std::vector<Recommendation> alternatives;
  std::vector<KnownIssueMatch> known_issues;
};

// Findings (stable ids, the case ids that prove them), one recommendation per probe target whose
// measured cases admit one, and the known-issue matches. A configuration is recommended only if,
// for every case on that device, the first backend in its order that did not refuse the case
// cleanly passed it; unmeasured cases disqualify it.
AdviceResult advise(const Report& report, const KnownIssues& issues, const AdviceOptions& options);

// ---- gfx verdict and device health ------------------------------------------------------------

// "gfx942:sramecc+:xnack-" -> "gfx942"; "" when it does not name a gfx target.
std::string base_gfx(std::string_view arch_name);
// The three views of one GPU's architecture and the verdict (native: torch has kernels for the
// effective arch; override: only because HSA_OVERRIDE_GFX_VERSION spoofs it; missing: no kernels,
// every GPU op fails; unknown: torch did not answer), with its risk and remedy. `facts` are one
// worker's hello facts (arch_list, aotriton_images, ck_sdpa: comma-separated strings), `source`
// names that worker, `override_value` is HSA_OVERRIDE_GFX_VERSION's value or empty. Pure.
GfxTruth gfx_truth(const Device& device, const std::map<std::string, std::string>& facts,
                   const std::string& source, const std::string& override_value);
// The same verdict for an NVIDIA GPU (Device::sm_target "sm_90") against arch_list's sm_XY and
// compute_XY entries: native where torch has a cubin of the same major version and no newer minor
// (sm_80 runs on sm_86) or PTX no newer than the GPU (JIT-compiled at first use); missing where
// it has neither; unknown where torch did not answer. Pure.
GfxTruth sm_truth(const Device& device, const std::map<std::string, std::string>& facts,
                  const std::string& source);
// What settle_gfx_truth decides: the verdict of each AMD and NVIDIA GPU, by its index in
// Report::inventory.devices (a GPU only torch saw, of no known arch, has none).
struct GfxSettlement {
  std::vector<std::pair<size_t, GfxTruth>> verdicts;
};
// The verdict of every AMD and NVIDIA GPU of the inventory from the workers' facts (the python worker's
// answer first: it is the user's torch). Pure.
GfxSettlement settle_gfx_truth(const Report& report);
// Sets Device::gfx from `settlement` (made from this report). Call before advise(): its findings
// and known issues read it.
void apply_gfx_truth(const GfxSettlement& settlement, Report& report);
// One `torch-not-built-for-arch` finding per device whose verdict is missing, naming the cause
// of that device's failures once.
void gfx_findings(const Report& report, std::vector<Finding>& out);
// One `device-poisoned` finding per (device, probe, variant) whose canary failed after any case,
// naming every such case (case_ids in report order).
void poisoned_findings(const Report& report, std::vector<Finding>& out);
// Workers that saw two or more HIP runtimes mapped in their own process: one finding per set.
void mapped_runtime_findings(const Report& report, std::vector<Finding>& out);

// ---- which statuses fail a check (its exit code is check::exit_code_for's) ---------------------

// mismatch, nonfinite, error, crash, timeout: the exit-code contract the README states.
std::set<Status> default_fail_on();
// "crash,timeout" -> {crash, timeout}; "default" and "all" -> default_fail_on(); "none" -> {}.
// Any status name is accepted (e.g. "unsupported" to widen). Unknown names are an Error.
Expected<std::set<Status>> parse_fail_on(std::string_view text);
// Whether any result's status is in `fail_on`.
bool any_failing(const std::vector<CaseResult>& results,
                 const std::set<Status>& fail_on = default_fail_on());

} // namespace sdpa_doctor::advice
