// The failing and skipped cells grouped by what caused them, so the console and the Markdown say
// each cause once however many cells it explains. A skipped cell names its cause and culprit as
// data (CaseResult::cause, culprit); only a report written before them is read by its words.
#include "report/common.hpp"

#include <algorithm>
#include <cctype>
#include <fmt/format.h>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace sdpa_doctor::report::detail {

namespace {

bool is_digit(std::string_view s, size_t i) {
  return i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]));
}

size_t after_digits(std::string_view s, size_t i) {
  while (is_digit(s, i)) ++i;
  return i;
}

// The length of the number at `at` ("-0.0298", "1e-05", "128"), 0 where none starts there. A
// sign is part of it unless it follows a word or a number ("q12-k12", "8-16" stay apart).
size_t number_length(std::string_view s, size_t at) {
  size_t i = at;
  if ((s[i] == '-' || s[i] == '+') &&
      (i == 0 || !(std::isalnum(static_cast<unsigned char>(s[i - 1])) || s[i - 1] == '.')))
    ++i;
  if (!is_digit(s, i)) return 0;
  i = after_digits(s, i);
  if (s.substr(i, 1) == "." && is_digit(s, i + 1)) i = after_digits(s, i + 1);
  if (s.substr(i, 1) == "e" || s.substr(i, 1) == "E") {
    const size_t sign = s.substr(i + 1, 1) == "-" || s.substr(i + 1, 1) == "+";
    if (is_digit(s, i + 1 + sign)) i = after_digits(s, i + 1 + sign);
  }
  return i - at;
}

// The reason with every number as '#': the same failure on cases of other shapes (sizes, byte
// counts in an out-of-memory message, the values a mismatch got and expected, of either sign and
// in either notation) is one cause.
std::string reason_shape(std::string_view reason) {
  std::string out;
  for (size_t i = 0; i < reason.size();) {
    const size_t n = number_length(reason, i);
    out += n == 0 ? reason[i] : '#';
    i += n == 0 ? 1 : n;
  }
  return out;
}

std::string failure_key(const CaseResult& r) {
  return fmt::format("{}\n{}\n{}\n{}\n{}\n{}\n{}", r.device, to_string(r.probe), r.variant,
                     to_string(r.status), process_end_text(r), fmt::join(r.signatures, ","),
                     reason_shape(r.reason));
}

// What a culprit stopped: the rest of its worker (restart budget) or of its device (health).
enum class Stopped { budget, unhealthy };

struct Blame {
  Stopped kind;
  Culprit culprit; // its variant is never empty here
};

std::optional<Blame> blame_from_cause(const CaseResult& skipped) {
  if (!skipped.culprit) return std::nullopt;
  Culprit culprit = *skipped.culprit;
  if (culprit.variant.empty()) culprit.variant = skipped.variant;
  switch (skipped.cause) {
  case SkipCause::restart_budget_spent: return Blame{Stopped::budget, culprit};
  case SkipCause::device_unhealthy:
  case SkipCause::device_wedged: return Blame{Stopped::unhealthy, culprit};
  default: return std::nullopt;
  }
}

// A report written before results carried their cause says it in the reason only, in the words
// the runner and the scheduler wrote: "restart budget spent after CASE", "device unhealthy after
// CASE" or "device unhealthy after VARIANT CASE".
std::optional<Blame> blame_from_words(const CaseResult& skipped) {
  constexpr std::pair<Stopped, std::string_view> k_openings[] = {
      {Stopped::budget, "restart budget spent after "},
      {Stopped::unhealthy, "device unhealthy after "}};
  for (const auto& [kind, opening] : k_openings) {
    if (!skipped.reason.starts_with(opening)) continue;
    const std::string rest = skipped.reason.substr(opening.size());
    const size_t space = rest.rfind(' ');
    if (space == std::string::npos) return Blame{kind, {skipped.variant, rest}};
    return Blame{kind, {rest.substr(0, space), rest.substr(space + 1)}};
  }
  return std::nullopt;
}

// The failing cell a skipped cell blames, and what it stopped; nullopt: none.
std::optional<Blame> blame_of(const CaseResult& skipped) {
  if (skipped.cause != SkipCause::none) return blame_from_cause(skipped);
  return blame_from_words(skipped);
}

bool same_worker(const CaseResult& a, const CaseResult& b) {
  return a.device == b.device && a.probe == b.probe && a.variant == b.variant && a.mode == b.mode;
}

// Failures in a row (each of which ended its worker) right before the first cell the restart
// budget left out; results of that worker only, in report order.
int failures_in_a_row(const Report& report, const CaseResult& first_skipped) {
  int streak = 0;
  for (const CaseResult& r : report.results) {
    if (!same_worker(r, first_skipped)) continue;
    if (&r == &first_skipped) return streak;
    streak = r.process_end ? streak + 1 : 0;
  }
  return streak;
}

void add_variant(Cause& c, const std::string& variant) {
  if (std::find(c.variants.begin(), c.variants.end(), variant) == c.variants.end())
    c.variants.push_back(variant);
}

bool has_case(const Cause& c, const Culprit& culprit) {
  return std::any_of(c.results.begin(), c.results.end(), [&](const CaseResult* r) {
    return r->variant == culprit.variant && r->case_id == culprit.case_id;
  });
}

bool contains(const std::vector<std::string>& ids, const std::string& id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// The finding advice wrote about these cells: `variant-<status>` for a variant's failures (its
// message opens with "VARIANT (PROBE)"), `device-poisoned` for a worker's cases whose canary
// failed (one finding naming them all; its message opens with "DEVICE PROBE VARIANT: ").
const Finding* finding_for(const Report& report, const Cause& c) {
  const CaseResult& e = c.example();
  const bool canary_failed = e.canary.rfind("failed", 0) == 0;
  const std::string opening =
      canary_failed ? fmt::format("{} {} {}: ", e.device, to_string(e.probe), e.variant)
                    : fmt::format("{} ({})", e.variant, to_string(e.probe));
  const std::string id =
      canary_failed ? "device-poisoned" : fmt::format("variant-{}", to_string(e.status));
  for (const Finding& f : report.findings) {
    if (f.device == e.device && f.id == id && contains(f.case_ids, e.case_id) &&
        f.message.rfind(opening, 0) == 0)
      return &f;
  }
  return nullptr;
}

} // namespace

std::vector<Cause> failure_causes(const Report& report) {
  std::vector<Cause> causes;
  std::map<std::string, size_t> index;
  for (const CaseResult* r : failures(report)) {
    auto [it, fresh] = index.emplace(failure_key(*r), causes.size());
    if (fresh) causes.emplace_back();
    Cause& c = causes[it->second];
    c.results.push_back(r);
    add_variant(c, r->variant);
  }
  for (const CaseResult& r : report.results) {
    if (r.status != Status::skipped) continue;
    const auto blame = blame_of(r);
    if (!blame) continue;
    const bool budget = blame->kind == Stopped::budget;
    auto cause = std::find_if(causes.begin(), causes.end(), [&](const Cause& c) {
      return c.example().device == r.device && has_case(c, blame->culprit) &&
             (!budget || c.example().probe == r.probe);
    });
    if (cause == causes.end()) continue;
    auto& skipped = budget ? cause->budget_skipped : cause->unhealthy_skipped;
    if (budget && skipped.empty()) cause->in_a_row = failures_in_a_row(report, r);
    skipped.push_back(&r);
  }
  for (Cause& c : causes) c.finding = finding_for(report, c);
  return causes;
}

std::vector<Cause> skip_causes(const Report& report) {
  std::set<const CaseResult*> explained;
  for (const Cause& c : failure_causes(report)) {
    explained.insert(c.budget_skipped.begin(), c.budget_skipped.end());
    explained.insert(c.unhealthy_skipped.begin(), c.unhealthy_skipped.end());
  }
  std::vector<Cause> causes;
  std::map<std::string, size_t> index;
  for (const CaseResult& r : report.results) {
    if (r.status != Status::skipped || explained.count(&r)) continue;
    const std::string key =
        fmt::format("{}\n{}\n{}", r.device, to_string(r.cause), reason_shape(r.reason));
    auto [it, fresh] = index.emplace(key, causes.size());
    if (fresh) causes.emplace_back();
    causes[it->second].results.push_back(&r);
    add_variant(causes[it->second], r.variant);
  }
  return causes;
}

bool told_by_causes(const Finding& f, const std::vector<Cause>& causes) {
  // A variant's failures and skips are all in some block; a poisoned case when it failed.
  if (f.id.rfind("variant-", 0) == 0 || f.id == "cases-skipped") return true;
  if (f.id != "device-poisoned") return false;
  return std::any_of(causes.begin(), causes.end(), [&](const Cause& c) {
    return std::any_of(c.results.begin(), c.results.end(), [&](const CaseResult* r) {
      return r->device == f.device && contains(f.case_ids, r->case_id) &&
             r->canary.rfind("failed", 0) == 0;
    });
  });
}

std::vector<std::string> not_run_lines(const Cause& c) {
  std::vector<std::string> out;
  if (!c.budget_skipped.empty()) {
    const std::string cells = count_of(c.budget_skipped.size(), "case");
    out.push_back(c.in_a_row > 0
                      ? fmt::format("stopped after {} in a row; {} not run",
                                    count_of(size_t(c.in_a_row), "failure"), cells)
                      : fmt::format("stopped when its restart budget ran out; {} not run", cells));
  }
  if (!c.unhealthy_skipped.empty()) {
    std::vector<std::string> variants;
    for (const CaseResult* r : c.unhealthy_skipped)
      if (!contains(variants, r->variant)) variants.push_back(r->variant);
    out.push_back(fmt::format("the device was unhealthy after it: {} not run ({})",
                              count_of(c.unhealthy_skipped.size(), "cell"),
                              fmt::join(variants, ", ")));
  }
  return out;
}

std::string shrink_title(const Report& report, const Shrink& s) {
  const bool shared =
      std::any_of(report.shrinks.begin(), report.shrinks.end(), [&](const Shrink& o) {
        return o.device == s.device && o.variant == s.variant && o.mode == s.mode &&
               o.probe != s.probe;
      });
  const std::string row = variant_row(s.variant, s.mode);
  const std::string who = fmt::format("{} on {}", row, s.device);
  if (!shared || s.rule.rfind(who, 0) != 0) return s.rule;
  return fmt::format("{} ({}) on {}{}", row, to_string(s.probe), s.device,
                     s.rule.substr(who.size()));
}

} // namespace sdpa_doctor::report::detail
