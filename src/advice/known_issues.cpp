#include "advice/advice.hpp"

#include "core/io.hpp"
#include "core/text.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fmt/format.h>
#include <map>

namespace sdpa_doctor::advice {

using nlohmann::json;

// ---- versions --------------------------------------------------------------------------------

std::vector<int> version_numbers(std::string_view v) {
  std::vector<int> out;
  size_t i = 0;
  while (i < v.size() && v[i] >= '0' && v[i] <= '9') {
    // A part too long for an int saturates: it still compares above every real version part.
    constexpr int k_max_part = 999'999'999;
    int n = 0;
    while (i < v.size() && v[i] >= '0' && v[i] <= '9') {
      n = n > (k_max_part - 9) / 10 ? k_max_part : n * 10 + (v[i] - '0');
      ++i;
    }
    out.push_back(n);
    if (i + 1 < v.size() && v[i] == '.' && v[i + 1] >= '0' && v[i + 1] <= '9') {
      ++i;
      continue;
    }
    break;
  }
  return out;
}

int compare_versions(std::string_view a, std::string_view b) {
  const std::vector<int> x = version_numbers(a);
  const std::vector<int> y = version_numbers(b);
  for (size_t i = 0; i < std::max(x.size(), y.size()); ++i) {
    const int p = i < x.size() ? x[i] : 0;
    const int q = i < y.size() ? y[i] : 0;
    if (p != q) return p < q ? -1 : 1;
  }
  return 0;
}

bool VersionRange::contains(std::string_view version) const {
  if (version_numbers(version).empty()) return false;
  if (!min.empty()) {
    const int c = compare_versions(version, min);
    if (c < 0 || (c == 0 && !min_inclusive)) return false;
  }
  if (!max.empty()) {
    const int c = compare_versions(version, max);
    if (c > 0 || (c == 0 && !max_inclusive)) return false;
  }
  return true;
}

// ---- loading ---------------------------------------------------------------------------------

namespace {

struct EntryError {
  std::string message;
};

std::vector<std::string> string_list(const json& j, const std::string& key) {
  if (!j.is_array()) throw EntryError{fmt::format("'{}' must be an array of strings", key)};
  std::vector<std::string> out;
  for (const json& e : j) {
    if (!e.is_string()) throw EntryError{fmt::format("'{}' must be an array of strings", key)};
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::string string_field(const json& j, const std::string& key, bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) throw EntryError{fmt::format("missing '{}'", key)};
    return {};
  }
  if (!it->is_string()) throw EntryError{fmt::format("'{}' must be a string", key)};
  return it->get<std::string>();
}

VersionRange parse_range(const json& j, const std::string& key) {
  if (!j.is_object()) throw EntryError{fmt::format("'{}' must be an object {{min, max}}", key)};
  VersionRange r;
  for (const auto& [k, v] : j.items()) {
    if (k == "min" || k == "max") {
      if (v.is_null()) continue;
      if (!v.is_string() || version_numbers(v.get<std::string>()).empty())
        throw EntryError{fmt::format("'{}.{}' must be a version string like \"2.7\"", key, k)};
      (k == "min" ? r.min : r.max) = v.get<std::string>();
    } else if (k == "min_inclusive" || k == "max_inclusive") {
      if (!v.is_boolean()) throw EntryError{fmt::format("'{}.{}' must be a boolean", key, k)};
      (k == "min_inclusive" ? r.min_inclusive : r.max_inclusive) = v.get<bool>();
    } else {
      throw EntryError{fmt::format("unknown key '{}.{}'", key, k)};
    }
  }
  return r;
}

// Why std::regex must not compile `pattern` (it recurses once per nested group and per term), or
// empty. The pattern is not quoted back: it may be the 40 KB that made it too long.
std::string regex_too_complex(std::string_view pattern) {
  if (pattern.size() > k_max_regex_bytes)
    return fmt::format("{} bytes long; the limit is {} bytes", pattern.size(), k_max_regex_bytes);
  int depth = 0;
  int deepest = 0;
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\') ++i;
    else if (in_class) in_class = c != ']';
    else if (c == '[') in_class = true;
    else if (c == '(') deepest = std::max(deepest, ++depth);
    else if (c == ')' && depth > 0) --depth;
  }
  if (deepest > k_max_regex_nesting)
    return fmt::format("groups nested {} deep; the limit is {}", deepest, k_max_regex_nesting);
  return {};
}

// libstdc++'s default executor recurses once per character of the text it searches; its
// polynomial (Thompson) executor keeps the recursion to the pattern's size, whatever the text.
// The price: no back-references, which a stderr pattern has no use for.
#if defined(__GLIBCXX__)
constexpr auto k_regex_flags =
    std::regex::ECMAScript | std::regex::optimize | std::regex_constants::__polynomial;
#else
constexpr auto k_regex_flags = std::regex::ECMAScript | std::regex::optimize;
#endif

// A list of names, each read by `parse` ("statuses": status_from_string); `what` is one of them
// in words, `names` the accepted ones where the message should list them.
template <typename T>
std::set<T> name_set(const json& v, const std::string& key, std::string_view what,
                     std::optional<T> (*parse)(std::string_view), std::string_view names = {}) {
  std::set<T> out;
  for (const std::string& name : string_list(v, key)) {
    auto value = parse(name);
    if (!value)
      throw EntryError{fmt::format("unknown {} '{}' in '{}'{}", what, name, key,
                                   names.empty() ? "" : fmt::format(" ({})", names))};
    out.insert(*value);
  }
  return out;
}

// A regex condition (`stderr`, `canary`): its text, compiled into `re`.
std::string regex_field(const json& v, const std::string& key, std::optional<std::regex>& re) {
  if (!v.is_string()) throw EntryError{fmt::format("'{}' must be a string (a regex)", key)};
  std::string text = v.get<std::string>();
  if (const std::string why = regex_too_complex(text); !why.empty())
    throw EntryError{fmt::format("'{}' regex too complex: {}", key, why)};
  try {
    re.emplace(text, k_regex_flags);
  } catch (const std::regex_error& e) {
    throw EntryError{fmt::format("bad '{}' regex '{}': {}", key, shortened(text), e.what())};
  }
  return text;
}

int64_t int_field(const json& v, const std::string& key) {
  if (!v.is_number_integer()) throw EntryError{fmt::format("'{}' must be an integer", key)};
  return v.get<int64_t>();
}

constexpr std::string_view k_layout_names = "contiguous, transposed, strided, offset";

IssueRule parse_rule(const json& j) {
  if (!j.is_object()) throw EntryError{"'match' must be an object or an array of objects"};
  IssueRule rule;
  for (const auto& [k, v] : j.items()) {
    if (k == "archs") {
      rule.archs = string_list(v, k);
    } else if (k == "variants") {
      rule.variants = string_list(v, k);
      for (const std::string& name : rule.variants) {
        if (!parse_variant(name)) throw EntryError{fmt::format("bad variant '{}' in 'variants'", name)};
      }
    } else if (k == "backends") {
      rule.backends = string_list(v, k);
    } else if (k == "torch" || k == "aotriton") {
      (k == "torch" ? rule.torch : rule.aotriton) = parse_range(v, k);
    } else if (k == "stderr") {
      rule.stderr_regex = regex_field(v, k, rule.stderr_re);
    } else if (k == "canary") {
      rule.canary_regex = regex_field(v, k, rule.canary_re);
    } else if (k == "masks") {
      rule.masks = name_set(v, k, "mask", mask_from_string, "none, bool, additive");
    } else if (k == "layouts") {
      rule.layouts = name_set(v, k, "layout", layout_from_string, k_layout_names);
    } else if (k == "q_layouts" || k == "k_layouts" || k == "v_layouts") {
      rule.own_layouts[k[0] == 'q' ? 0 : k[0] == 'k' ? 1 : 2] =
          name_set(v, k, "layout", layout_from_string, k_layout_names);
    } else if (k == "signatures") {
      rule.signatures = string_list(v, k);
    } else if (k == "statuses") {
      rule.statuses = name_set(v, k, "status", status_from_string);
    } else if (k == "modes") {
      rule.modes = name_set(v, k, "mode", mode_from_string, "eager, compiled");
    } else if (k == "dtypes") {
      rule.dtypes = name_set(v, k, "dtype", dtype_from_string);
    } else if (k == "head_dim" || k == "query_len") {
      if (!v.is_object()) throw EntryError{fmt::format("'{}' must be an object {{min, max}}", k)};
      const bool head = k == "head_dim";
      for (const auto& [hk, hv] : v.items()) {
        const std::string name = fmt::format("{}.{}", k, hk);
        if (hk == "min") (head ? rule.head_dim_min : rule.query_len_min) = int_field(hv, name);
        else if (hk == "max") (head ? rule.head_dim_max : rule.query_len_max) = int_field(hv, name);
        else throw EntryError{fmt::format("unknown key '{}'", name)};
      }
    } else if (k == "causal" && v.is_string()) {
      // The alignment: decoding and chunked prefill call causal attention bottom-right.
      const std::string alignment = v.get<std::string>();
      if (alignment != "top_left" && alignment != "bottom_right")
        throw EntryError{fmt::format("'causal' is true, false, \"top_left\" or "
                                     "\"bottom_right\", got \"{}\"",
                                     escape_to_one_line(alignment))};
      rule.causal = true;
      rule.causal_bottom_right = alignment == "bottom_right";
    } else if (k == "gfx_verdict") {
      rule.gfx_verdicts = string_list(v, k);
      for (const std::string& name : rule.gfx_verdicts)
        if (name != "native" && name != "override" && name != "missing" && name != "unknown")
          throw EntryError{fmt::format("unknown gfx verdict '{}' (native, override, missing, "
                                       "unknown)",
                                       name)};
    } else if (k == "probes") {
      for (const std::string& name : string_list(v, k)) {
        auto p = probe_from_string(name);
        if (!p || *p == Probe::fault)
          throw EntryError{
              fmt::format("unknown probe '{}' in 'probes' (libtorch, python, reference)", name)};
        rule.probes.insert(*p);
      }
    } else if (k == "causal" || k == "gqa" || k == "dropout" || k == "mask_dtype_differs") {
      if (!v.is_boolean()) throw EntryError{fmt::format("'{}' must be a boolean", k)};
      (k == "causal"    ? rule.causal
       : k == "gqa"     ? rule.gqa
       : k == "dropout" ? rule.dropout
                        : rule.mask_dtype_differs) = v.get<bool>();
    } else {
      throw EntryError{fmt::format("unknown key 'match.{}'", k)};
    }
  }
  return rule;
}

Verbatim parse_verbatim(const json& j) {
  if (!j.is_object()) throw EntryError{"'verbatim' must be an object"};
  static const std::set<std::string> k_keys = {"text",    "published", "note",     "in",
                                               "status",  "variant",   "case",     "arch",
                                               "torch",   "aotriton",  "gfx_verdict", "mode"};
  for (const auto& [k, v] : j.items())
    if (!k_keys.count(k)) throw EntryError{fmt::format("unknown key 'verbatim.{}'", k)};
  Verbatim out;
  out.text = string_field(j, "text", true);
  auto published = j.find("published");
  if (published == j.end() || !published->is_boolean())
    throw EntryError{"'verbatim.published' must be true or false"};
  out.published = published->get<bool>();
  out.note = string_field(j, "note", false);
  // A text the source did not publish says what it is instead.
  if (!out.published && out.note.empty())
    throw EntryError{"'verbatim.note' must say what the text is when it was not published"};
  if (j.contains("in")) out.in = string_field(j, "in", true);
  if (out.in != "stderr" && out.in != "reason" && out.in != "canary")
    throw EntryError{fmt::format("'verbatim.in' is '{}' (stderr, reason, canary)", out.in)};
  if (j.contains("status")) {
    auto s = status_from_string(string_field(j, "status", true));
    if (!s || *s == Status::pass) throw EntryError{"'verbatim.status' must be a failing status"};
    out.status = *s;
  }
  if (j.contains("variant")) out.variant = string_field(j, "variant", true);
  if (!parse_variant(out.variant))
    throw EntryError{fmt::format("bad variant '{}' in 'verbatim.variant'", out.variant)};
  if (j.contains("mode")) {
    auto m = mode_from_string(string_field(j, "mode", true));
    if (!m) throw EntryError{"'verbatim.mode' must be eager or compiled"};
    out.mode = *m;
  }
  out.case_id = string_field(j, "case", true);
  if (!parse_case_id(out.case_id))
    throw EntryError{fmt::format("bad case id '{}' in 'verbatim.case'", out.case_id)};
  out.facts.arch = string_field(j, "arch", false);
  out.facts.torch = string_field(j, "torch", false);
  out.facts.aotriton = string_field(j, "aotriton", false);
  out.facts.gfx_verdict = string_field(j, "gfx_verdict", false);
  return out;
}

KnownIssue parse_issue(const json& j) {
  if (!j.is_object()) throw EntryError{"an entry must be an object"};
  static const std::set<std::string> k_keys = {"id",     "title",    "link",  "match",
                                               "advice", "fixed_in", "notes", "verbatim"};
  for (const auto& [k, v] : j.items()) {
    if (!k_keys.count(k)) throw EntryError{fmt::format("unknown key '{}'", k)};
  }
  KnownIssue issue;
  issue.id = string_field(j, "id", true);
  if (issue.id.empty()) throw EntryError{"empty 'id'"};
  issue.title = string_field(j, "title", true);
  issue.link = string_field(j, "link", false);
  issue.advice = string_field(j, "advice", true);
  issue.fixed_in = string_field(j, "fixed_in", false);
  if (j.contains("notes")) string_field(j, "notes", false); // free text for maintainers
  if (auto v = j.find("verbatim"); v != j.end()) issue.verbatim = parse_verbatim(*v);
  auto m = j.find("match");
  if (m == j.end()) throw EntryError{"missing 'match'"};
  if (m->is_array()) {
    for (const json& r : *m) issue.rules.push_back(parse_rule(r));
  } else {
    issue.rules.push_back(parse_rule(*m));
  }
  if (issue.rules.empty()) throw EntryError{"'match' has no rule"};
  return issue;
}

} // namespace

Expected<KnownIssues> parse_known_issues(std::string_view text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) { // parse_error, and out_of_range for "1e999"
    std::string what = json_error_text(e.what());
    std::replace(what.begin(), what.end(), '\n', ' ');
    return make_error(fmt::format("known issues '{}': invalid JSON: {}", source, what));
  }
  if (!doc.is_array())
    return make_error(fmt::format("known issues '{}': top level must be an array", source));
  KnownIssues out;
  std::set<std::string> seen;
  for (size_t i = 0; i < doc.size(); ++i) {
    const json& e = doc[i];
    std::string label = fmt::format("entry {}", i);
    if (e.is_object() && e.contains("id") && e["id"].is_string())
      label += fmt::format(" ('{}')", e["id"].get<std::string>());
    try {
      KnownIssue issue = parse_issue(e);
      if (!seen.insert(issue.id).second) throw EntryError{"duplicate id"};
      issue.source = source;
      out.issues.push_back(std::move(issue));
    } catch (const EntryError& err) {
      return make_error(fmt::format("known issues '{}': {}: {}", source, label, err.message));
    }
  }
  return out;
}

Expected<KnownIssues> load_known_issues(const std::string& path) {
  // A regular file, opened without blocking and read up to the cap: a FIFO or /dev/zero is refused.
  constexpr int64_t k_max_bytes = int64_t{16} << 20;
  auto text = read_regular_file(path, fmt::format("known issues '{}'", path), k_max_bytes);
  if (!text) return text.error();
  return parse_known_issues(*text, path);
}

KnownIssues merge_known_issues(const std::vector<KnownIssues>& files) {
  KnownIssues out;
  std::map<std::string, size_t> index;
  for (const KnownIssues& f : files) {
    for (const KnownIssue& issue : f.issues) {
      auto it = index.find(issue.id);
      if (it != index.end()) {
        out.issues[it->second] = issue;
      } else {
        index[issue.id] = out.issues.size();
        out.issues.push_back(issue);
      }
    }
  }
  return out;
}

// ---- matching --------------------------------------------------------------------------------

bool arch_pattern_matches(std::string_view pattern, std::string_view arch) {
  if (arch.empty()) return false;
  if (!pattern.empty() && pattern.back() == '*') {
    pattern.remove_suffix(1);
    return arch.substr(0, pattern.size()) == pattern;
  }
  return pattern == arch;
}

namespace {

bool any_arch(const std::vector<std::string>& patterns, std::string_view arch) {
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::string& p) { return arch_pattern_matches(p, arch); });
}

std::string backend_of(const std::string& variant_name) {
  return variant_name.substr(0, variant_name.find('['));
}

// Whether `re` matches within one line of the texts, searched within the k_max_regex_line and
// k_max_regex_text bounds.
bool search_lines(const std::regex& re, const std::vector<const std::string*>& texts) {
  std::size_t budget = k_max_regex_text;
  const auto search = [&](std::string_view text) {
    while (budget > 0) {
      const std::size_t end = text.find('\n');
      const std::string_view line =
          text.substr(0, std::min({end, k_max_regex_line, budget}));
      budget -= std::min(budget, line.size() + 1); // an empty line costs its newline
      if (std::regex_search(line.begin(), line.end(), re)) return true;
      if (end == std::string_view::npos) return false;
      text.remove_prefix(end + 1);
    }
    return false;
  };
  return std::any_of(texts.begin(), texts.end(), [&](const std::string* t) { return search(*t); });
}

// A case's reason, warnings and stderr tail, in the order `stderr` searches them.
std::vector<const std::string*> error_texts(const CaseResult& r) {
  std::vector<const std::string*> out{&r.reason};
  for (const std::string& w : r.warnings) out.push_back(&w);
  out.push_back(&r.stderr_tail);
  return out;
}

} // namespace

bool rule_matches(const IssueRule& rule, const CaseResult& r, const CaseFacts& facts) {
  if (rule.statuses.empty() ? r.status == Status::pass : !rule.statuses.count(r.status))
    return false;
  if (!rule.probes.empty() && !rule.probes.count(r.probe)) return false;
  if (!rule.modes.empty() && !rule.modes.count(r.mode)) return false;
  if (!rule.archs.empty() && !any_arch(rule.archs, facts.arch)) return false;
  if (!rule.variants.empty() &&
      std::find(rule.variants.begin(), rule.variants.end(), r.variant) == rule.variants.end())
    return false;
  if (!rule.backends.empty() && std::find(rule.backends.begin(), rule.backends.end(),
                                          backend_of(r.variant)) == rule.backends.end())
    return false;
  if (!rule.torch.empty() && !rule.torch.contains(facts.torch)) return false;
  if (!rule.aotriton.empty() && !rule.aotriton.contains(facts.aotriton)) return false;
  if (!rule.dtypes.empty() && !rule.dtypes.count(r.kase.dtype)) return false;
  if (rule.head_dim_min && r.kase.d < *rule.head_dim_min) return false;
  if (rule.head_dim_max && r.kase.d > *rule.head_dim_max) return false;
  if (rule.causal && *rule.causal != r.kase.causal) return false;
  if (rule.causal_bottom_right && *rule.causal_bottom_right != r.kase.causal_bottom_right)
    return false;
  if (rule.query_len_min && r.kase.lq < *rule.query_len_min) return false;
  if (rule.query_len_max && r.kase.lq > *rule.query_len_max) return false;
  if (rule.gqa && *rule.gqa != (r.kase.hq != r.kase.hkv)) return false;
  if (rule.dropout && *rule.dropout != (r.kase.dropout_percent > 0)) return false;
  if (!rule.gfx_verdicts.empty() &&
      std::find(rule.gfx_verdicts.begin(), rule.gfx_verdicts.end(), facts.gfx_verdict) ==
          rule.gfx_verdicts.end())
    return false;
  if (!rule.signatures.empty() &&
      std::none_of(rule.signatures.begin(), rule.signatures.end(), [&](const std::string& s) {
        return std::find(r.signatures.begin(), r.signatures.end(), s) != r.signatures.end();
      }))
    return false;
  if (!rule.masks.empty() && !rule.masks.count(r.kase.mask)) return false;
  if (!rule.layouts.empty() && !rule.layouts.count(r.kase.layout)) return false;
  const auto own = r.kase.qkv_layouts();
  for (size_t t = 0; t < own.size(); ++t)
    if (!rule.own_layouts[t].empty() && !rule.own_layouts[t].count(own[t])) return false;
  if (rule.mask_dtype_differs &&
      *rule.mask_dtype_differs !=
          (r.kase.mask != Mask::none && r.kase.mask_value_dtype() != r.kase.dtype))
    return false;
  if (rule.stderr_re && !search_lines(*rule.stderr_re, error_texts(r))) return false;
  if (rule.canary_re && !search_lines(*rule.canary_re, {&r.canary})) return false;
  return true;
}

CaseResult verbatim_result(const Verbatim& v) {
  CaseResult r;
  r.probe = Probe::python;
  r.device = v.facts.arch.empty() ? "cpu" : "cuda:0";
  r.variant = v.variant;
  r.mode = v.mode;
  r.case_id = v.case_id;
  if (auto c = parse_case_id(v.case_id)) r.kase = *c;
  r.status = v.status;
  (v.in == "reason" ? r.reason : v.in == "canary" ? r.canary : r.stderr_tail) = v.text;
  return r;
}

bool issue_matches(const KnownIssue& issue, const CaseResult& r, const CaseFacts& facts) {
  return std::any_of(issue.rules.begin(), issue.rules.end(),
                     [&](const IssueRule& rule) { return rule_matches(rule, r, facts); });
}

bool issue_applies_to(const KnownIssue& issue, std::string_view arch, std::string_view torch,
                      std::string_view aotriton) {
  for (const IssueRule& rule : issue.rules) {
    if (!rule.archs.empty() && !any_arch(rule.archs, arch)) continue;
    if (!torch.empty() && !rule.torch.empty() && !rule.torch.contains(torch)) continue;
    if (!aotriton.empty() && !rule.aotriton.empty() && !rule.aotriton.contains(aotriton)) continue;
    return true;
  }
  return false;
}

namespace {

const WorkerInfo* worker_for(const Report& report, const CaseResult& r) {
  for (const WorkerInfo& w : report.workers) {
    if (w.device == r.device && w.probe == r.probe && w.variant == r.variant) return &w;
  }
  return nullptr;
}

std::string base_target(std::string_view arch_name) {
  std::string out(arch_name.substr(0, arch_name.find(':')));
  return out.rfind("gfx", 0) == 0 ? out : std::string{};
}

} // namespace

CaseFacts facts_for(const Report& report, const CaseResult& r) {
  CaseFacts f;
  const WorkerInfo* w = worker_for(report, r);
  if (r.device.rfind("cuda:", 0) == 0) {
    const int index = std::atoi(r.device.c_str() + 5);
    for (const Device& d : report.inventory.devices) {
      if (d.index == index) {
        f.arch = !d.gfx_target.empty() ? d.gfx_target : base_target(d.gfx_arch_name);
        if (d.gfx) f.gfx_verdict = d.gfx->verdict;
        break;
      }
    }
    if (f.arch.empty() && w) f.arch = base_target(value_at(w->facts, "gcnArchName"));
  }
  if (w) {
    f.torch = value_at(w->versions, "torch");
    f.aotriton = value_at(w->versions, "aotriton");
  }
  if (f.torch.empty()) f.torch = value_at(report.versions, "torch");
  if (f.aotriton.empty()) f.aotriton = value_at(report.versions, "aotriton");
  return f;
}

std::vector<KnownIssueMatch> match_known_issues(const Report& report, const KnownIssues& issues) {
  std::vector<KnownIssueMatch> out;
  std::map<std::tuple<std::string, std::string, std::string>, size_t> index;
  for (const CaseResult& r : report.results) {
    if (r.status == Status::pass) continue;
    const CaseFacts facts = facts_for(report, r);
    for (const KnownIssue& issue : issues.issues) {
      if (!issue_matches(issue, r, facts)) continue;
      auto key = std::make_tuple(issue.id, r.device, variant_row(r.variant, r.mode));
      auto it = index.find(key);
      if (it == index.end()) {
        KnownIssueMatch m;
        m.issue_id = issue.id;
        m.title = issue.title;
        m.link = issue.link;
        m.advice = issue.advice;
        m.fixed_in = issue.fixed_in;
        m.device = r.device;
        m.variant = r.variant;
        m.mode = r.mode;
        it = index.emplace(key, out.size()).first;
        out.push_back(std::move(m));
      }
      auto& ids = out[it->second].case_ids;
      if (std::find(ids.begin(), ids.end(), r.case_id) == ids.end()) ids.push_back(r.case_id);
    }
  }
  return out;
}

} // namespace sdpa_doctor::advice
