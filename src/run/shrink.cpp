#include "run/shrink.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace sdpa_doctor::run {

Expected<ShrinkBudget> parse_shrink_budget(std::string_view text) {
  ShrinkBudget budget;
  const auto bad = [&] {
    return make_error(fmt::format("--shrink-budget '{}': expected CASES, SECONDSs or "
                                  "CASES,SECONDSs (e.g. 24,60s)",
                                  text));
  };
  std::string_view rest = text;
  if (rest.empty()) return bad();
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string item(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    const bool seconds = !item.empty() && item.back() == 's';
    if (seconds) item.pop_back();
    if (item.empty()) return bad();
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      return bad();
    }
    if (used != item.size() || !(v > 0) || v > 1e6) return bad();
    if (seconds) {
      budget.seconds = v;
    } else {
      if (v != std::floor(v)) return bad();
      budget.cases = int(v);
    }
  }
  return budget;
}

ProbeOutcome outcome_of(Status status) {
  switch (status) {
  case Status::pass: return ProbeOutcome::passes;
  case Status::mismatch:
  case Status::nonfinite:
  case Status::error:
  case Status::crash:
  case Status::timeout: return ProbeOutcome::fails;
  default: return ProbeOutcome::unknown;
  }
}

namespace {

// Numeric axes, tried from the first; hkv moves the heads with the GQA ratio kept.
constexpr std::string_view k_numeric_axes[] = {"b", "hkv", "lq", "lkv", "d"};

int64_t axis_value(const Case& c, std::string_view axis) {
  if (axis == "b") return c.b;
  if (axis == "hkv") return c.hkv;
  if (axis == "lq") return c.lq;
  if (axis == "lkv") return c.lkv;
  return c.d;
}

Case with_axis(Case c, std::string_view axis, int64_t v) {
  if (axis == "b") c.b = v;
  if (axis == "hkv") {
    const int64_t ratio = c.hq / c.hkv;
    c.hkv = v;
    c.hq = v * ratio;
  }
  if (axis == "lq") c.lq = v;
  if (axis == "lkv") c.lkv = v;
  if (axis == "d") c.d = v;
  // A dropout case's V is the identity: its key length is its head dim.
  if (c.dropout_percent > 0 && (axis == "lkv" || axis == "d")) c.lkv = c.d = v;
  return c;
}

// The least value an axis may take in `c`: a bottom-right causal case keeps more keys than
// queries (at Lkv = Lq it would be top-left, past it undefined), so its keys stop at Lq + 1.
int64_t axis_floor(const Case& c, std::string_view axis) {
  return axis == "lkv" && c.causal_bottom_right ? c.lq + 1 : 1;
}

// The values an axis may shrink to, ascending from `floor`, ending with the case's own.
std::vector<int64_t> ladder(std::string_view axis, int64_t current, int64_t floor = 1) {
  std::vector<int64_t> out;
  if (axis == "d") {
    for (int64_t d : {8, 16, 32, 64, 96, 128, 160, 192, 256, 512})
      if (d < current) out.push_back(d);
  } else {
    if (floor < current) out.push_back(floor);
    int64_t v = 1;
    while (v <= floor) v *= 2;
    for (; v < current; v *= 2) out.push_back(v);
  }
  out.push_back(current);
  return out;
}

// A query shorter than this is also tried at this length: below it live the decode and
// tiny-causal kernels that fail only for short queries; at 64 a query is a prefill.
constexpr int64_t k_long_query = 64;
constexpr std::string_view k_grown_lq = "lq-grown";

// The values the query length may grow to, ascending from the case's own: powers of two up to
// `top`.
std::vector<int64_t> upward_ladder(int64_t current, int64_t top) {
  std::vector<int64_t> out = {current};
  int64_t v = 1;
  while (v <= current) v *= 2;
  for (; v <= top; v *= 2) out.push_back(v);
  if (out.back() < top) out.push_back(top);
  return out;
}

std::string axis_text(std::string_view axis) {
  if (axis == "d") return "head_dim";
  if (axis == "lq") return "query length";
  if (axis == "lkv") return "key length";
  if (axis == "b") return "batch";
  return "kv heads";
}

// The boolean and categorical features a failure may need, each an axis the case is reduced on.
// `layout` is q, k and v alike; a tensor's own layout (q_layout, ...) only where they differ.
// `bottom_right` is a causal case's alignment: without it the case is top-left.
constexpr std::string_view k_feature_axes[] = {"backward",   "causal",      "bottom_right",
                                               "mask",       "mask_dtype",  "mask_shape",
                                               "mask_layout", "layout",     "q_layout",
                                               "k_layout",   "v_layout",    "large",
                                               "gqa",        "dropout",     "masked_rows"};

bool has_feature(const Case& c, std::string_view axis) {
  const auto [q, k, v] = c.qkv_layouts();
  const bool mixed = !(q == k && k == v);
  if (axis == "backward") return c.backward;
  if (axis == "causal") return c.causal;
  if (axis == "bottom_right") return c.causal && c.causal_bottom_right;
  if (axis == "mask") return c.mask != Mask::none;
  if (axis == "mask_dtype") return c.mask != Mask::none && c.mask_value_dtype() != c.dtype;
  if (axis == "mask_shape") return c.mask != Mask::none && c.mask_shape != MaskShape::batch;
  if (axis == "mask_layout") return c.mask != Mask::none && c.mask_layout != Layout::contiguous;
  if (axis == "layout") return !mixed && q != Layout::contiguous;
  if (axis == "q_layout") return mixed && q != Layout::contiguous;
  if (axis == "k_layout") return mixed && k != Layout::contiguous;
  if (axis == "v_layout") return mixed && v != Layout::contiguous;
  if (axis == "large") return c.large;
  if (axis == "gqa") return c.hq != c.hkv;
  if (axis == "dropout") return c.dropout_percent > 0;
  if (axis == "masked_rows") return c.masked_rows;
  return false;
}

// The case without one feature; without a mask, without the mask's own dtype, shape and layout.
Case without_feature(Case c, std::string_view axis) {
  auto [q, k, v] = c.qkv_layouts();
  if (axis == "backward") c.backward = false;
  if (axis == "causal") c.causal = false;
  if (axis == "causal" || axis == "bottom_right") c.causal_bottom_right = false;
  if (axis == "mask") {
    c.mask = Mask::none;
    c.window = 0;
  }
  if (axis == "mask" || axis == "masked_rows") c.masked_rows = false;
  if (axis == "mask" || axis == "mask_dtype") c.mask_dtype.reset();
  if (axis == "mask" || axis == "mask_shape") c.mask_shape = MaskShape::batch;
  if (axis == "mask" || axis == "mask_layout") c.mask_layout = Layout::contiguous;
  if (axis == "layout") q = k = v = Layout::contiguous;
  if (axis == "q_layout") q = Layout::contiguous;
  if (axis == "k_layout") k = Layout::contiguous;
  if (axis == "v_layout") v = Layout::contiguous;
  c.set_layouts(q, k, v);
  if (axis == "large") c.large = false;
  if (axis == "gqa") c.hkv = c.hq;
  if (axis == "dropout") c.dropout_percent = 0;
  return c;
}

// The reductions: (axis, the case without that feature), then the other dtypes.
std::vector<std::pair<std::string, Case>> feature_reductions(const Case& c) {
  std::vector<std::pair<std::string, Case>> out;
  for (std::string_view axis : k_feature_axes)
    if (has_feature(c, axis)) out.emplace_back(axis, without_feature(c, axis));
  for (DType t : {DType::f16, DType::bf16, DType::f32})
    if (t != c.dtype) {
      Case r = c;
      r.dtype = t;
      if (r.mask_dtype == t) r.mask_dtype.reset(); // the one form of "the mask's dtype is q's"
      out.emplace_back("dtype", r);
    }
  return out;
}

ShrinkCondition feature_condition(const std::string& axis, const Case& c) {
  ShrinkCondition w;
  w.axis = axis;
  w.op = "=";
  w.value = 1;
  const auto [q, k, v] = c.qkv_layouts();
  if (axis == "backward") w.text = "in backward";
  if (axis == "causal") w.text = "causal";
  if (axis == "bottom_right") w.text = "aligned bottom-right";
  if (axis == "mask") w.value = int64_t(c.mask), w.text = fmt::format("mask={}", to_string(c.mask));
  if (axis == "mask_dtype")
    w.text = fmt::format("mask dtype {} (q {})", to_string(c.mask_value_dtype()),
                         to_string(c.dtype));
  if (axis == "mask_shape")
    w.value = int64_t(c.mask_shape),
    w.text = fmt::format("mask shape {}", to_string(c.mask_shape));
  if (axis == "mask_layout")
    w.value = int64_t(c.mask_layout),
    w.text = fmt::format("{} mask", to_string(c.mask_layout));
  if (axis == "layout") w.value = int64_t(q), w.text = fmt::format("{} layout", to_string(q));
  const std::pair<std::string_view, Layout> own[] = {{"q", q}, {"k", k}, {"v", v}};
  for (const auto& [name, layout] : own)
    if (axis == fmt::format("{}_layout", name))
      w.value = int64_t(layout), w.text = fmt::format("{} {}", name, to_string(layout));
  if (axis == "large") w.text = "large values";
  if (axis == "gqa") w.text = fmt::format("GQA (hq/hkv = {})", c.hq / c.hkv);
  if (axis == "dropout") w.value = c.dropout_percent, w.text = "dropout_p > 0";
  if (axis == "masked_rows") w.text = "rows are fully masked";
  return w;
}

bool smaller(const Case& a, const Case& b) {
  if (a.flops() != b.flops()) return a.flops() < b.flops();
  return a.input_bytes() < b.input_bytes();
}

} // namespace

ShrinkSearch::ShrinkSearch(const Case& failing) : m_original(failing), m_current(failing) {}

ProbeOutcome ShrinkSearch::outcome(const Case& c) const {
  auto it = m_outcomes.find(c.id());
  return it == m_outcomes.end() ? ProbeOutcome::unknown : it->second;
}

void ShrinkSearch::record(const Case& c, ProbeOutcome o) { m_outcomes[c.id()] = o; }

// From the one-axis reductions: the features the failure needs become conditions, the numeric
// axes it needs get a bisection, and everything it does not need is reduced at once.
void ShrinkSearch::finish_axes() {
  Case combined = m_original;
  std::vector<std::string> dtypes_failing = {std::string(to_string(m_original.dtype))};
  bool dtype_passed = false;
  for (const auto& [axis, c] : m_axis_cases) {
    const ProbeOutcome o = outcome(c);
    if (axis == "dtype") {
      if (o == ProbeOutcome::fails) dtypes_failing.emplace_back(to_string(c.dtype));
      if (o == ProbeOutcome::passes) dtype_passed = true;
      continue;
    }
    if (axis == k_grown_lq) {
      // Passing when longer: the failure needs a short query.
      if (o == ProbeOutcome::passes)
        m_bisects.push_back({"lq", upward_ladder(m_original.lq, c.lq), 0, 0, true});
      continue;
    }
    const bool numeric = std::find(std::begin(k_numeric_axes), std::end(k_numeric_axes), axis) !=
                         std::end(k_numeric_axes);
    if (o == ProbeOutcome::fails) {
      if (!numeric) combined = without_feature(combined, axis);
      else combined = with_axis(combined, axis, axis_value(c, axis));
    } else if (o == ProbeOutcome::passes) {
      if (!numeric) m_conditions.push_back(feature_condition(axis, m_original));
      else
        m_bisects.push_back(
            {axis, ladder(axis, axis_value(m_original, axis), axis_floor(m_original, axis)), 0, 0});
    }
  }
  for (Bisect& b : m_bisects) b.hi = b.ladder.size() - 1;
  if (dtype_passed) {
    ShrinkCondition w;
    w.axis = "dtype";
    w.op = "=";
    w.text = fmt::format("dtype {}", fmt::join(dtypes_failing, " or "));
    m_conditions.push_back(w);
  }
  if (!(combined == m_original)) m_combined = combined;
}

std::vector<Case> ShrinkSearch::bisect_batch() const {
  std::vector<Case> out;
  for (const Bisect& b : m_bisects)
    if (b.hi - b.lo > 1) {
      // Each bisection varies its own axis of the same failing case, so they run side by side.
      const Case c = with_axis(m_current, b.axis, b.ladder[(b.lo + b.hi) / 2]);
      if (validate(c).empty()) out.push_back(c);
    }
  return out;
}

std::vector<Case> ShrinkSearch::next() {
  if (m_stopped && m_stage != Stage::done) {
    if (m_stage == Stage::axes) finish_axes();
    m_stage = Stage::done;
  }
  switch (m_stage) {
  case Stage::rerun:
    if (m_outcomes.empty()) return {m_original};
    if (outcome(m_original) != ProbeOutcome::fails) {
      m_flaky = true; // the case that failed passed when run again: no boundary to find
      m_stage = Stage::done;
      return {};
    }
    m_stage = Stage::axes;
    for (auto& r : feature_reductions(m_original)) m_axis_cases.push_back(std::move(r));
    for (std::string_view axis : k_numeric_axes) {
      const int64_t v = axis_value(m_original, axis);
      const int64_t lowest = ladder(axis, v, axis_floor(m_original, axis)).front();
      if (lowest < v) m_axis_cases.emplace_back(std::string(axis), with_axis(m_original, axis, lowest));
    }
    if (m_original.lq < k_long_query)
      m_axis_cases.emplace_back(std::string(k_grown_lq), with_axis(m_original, "lq", k_long_query));
    m_axis_cases.erase(std::remove_if(m_axis_cases.begin(), m_axis_cases.end(),
                                      [](const auto& a) { return !validate(a.second).empty(); }),
                       m_axis_cases.end());
    if (!m_axis_cases.empty()) {
      std::vector<Case> out;
      for (const auto& [axis, c] : m_axis_cases) out.push_back(c);
      return out;
    }
    [[fallthrough]];
  case Stage::axes:
    finish_axes();
    m_stage = Stage::combine;
    if (m_combined) return {*m_combined};
    [[fallthrough]];
  case Stage::combine:
    // An unneeded axis that is needed with another reduced: keep the case that failed.
    if (m_combined && outcome(*m_combined) == ProbeOutcome::fails) m_current = *m_combined;
    m_stage = Stage::bisect;
    for (Bisect& b : m_bisects) {
      const int64_t v = axis_value(m_current, b.axis);
      b.ladder = b.upward ? upward_ladder(v, b.ladder.back())
                          : ladder(b.axis, v, axis_floor(m_current, b.axis));
      b.hi = b.ladder.size() - 1;
    }
    [[fallthrough]];
  case Stage::bisect: {
    for (Bisect& b : m_bisects) {
      if (b.hi - b.lo <= 1) continue;
      const size_t mid = (b.lo + b.hi) / 2;
      const Case probe = with_axis(m_current, b.axis, b.ladder[mid]);
      if (m_outcomes.count(probe.id()) == 0) continue; // not asked yet
      const bool fails = outcome(probe) == ProbeOutcome::fails;
      (fails != b.upward ? b.hi : b.lo) = mid;
    }
    std::vector<Case> batch = bisect_batch();
    if (!batch.empty()) return batch;
    m_stage = Stage::confirm;
    Case least = m_current;
    for (const Bisect& b : m_bisects)
      if (!b.upward) least = with_axis(least, b.axis, b.ladder[b.hi]);
    if (!(least == m_current) && validate(least).empty() && !m_outcomes.count(least.id())) {
      m_combined = least;
      return {least};
    }
    m_combined.reset();
    [[fallthrough]];
  }
  case Stage::confirm:
    m_stage = Stage::done;
    [[fallthrough]];
  case Stage::done: return {};
  }
  return {};
}

void ShrinkSearch::fill(Shrink& out) const {
  out.conditions = m_conditions;
  for (const Bisect& b : m_bisects) {
    ShrinkCondition w;
    w.axis = b.axis;
    w.op = b.upward ? "<=" : ">";
    w.value = b.ladder[b.lo];
    w.settled = b.hi - b.lo <= 1;
    w.text = fmt::format("{} {} {}", axis_text(b.axis), w.op, w.value);
    out.conditions.push_back(w);
  }
  if (m_flaky || m_outcomes.empty()) {
    out.verdict = "flaky";
    out.conditions.clear();
    out.minimal.reset();
    return;
  }
  out.verdict = out.conditions.empty() ? "everywhere" : "boundary";
  // The smallest case seen failing: every failing probe counts, not only the search's path.
  Case least = m_original;
  for (const auto& [id, o] : m_outcomes) {
    if (o != ProbeOutcome::fails) continue;
    auto c = parse_case_id(id);
    if (c && smaller(*c, least)) least = *c;
  }
  out.minimal = least;
}

std::string shrink_rule(const Shrink& s) {
  const std::string who = fmt::format("{} on {}", variant_row(s.variant, s.mode), s.device);
  if (s.verdict == "flaky")
    return fmt::format("{}: {} of {} did not happen again when re-run (flaky; no boundary)", who,
                       to_string(s.status), s.original_case);
  if (s.verdict == "everywhere")
    return fmt::format("{}: {} for every case tried", who, to_string(s.status));
  std::vector<std::string> parts;
  bool settled = true, backward = false;
  for (const ShrinkCondition& w : s.conditions) {
    settled = settled && w.settled;
    // Where it fails reads before what it needs: "crash only in backward when head_dim > 128".
    if (w.axis == "backward") backward = true;
    else parts.push_back(w.text);
  }
  std::string rule = fmt::format("{}: {} only", who, to_string(s.status));
  if (backward) rule += " in backward";
  if (!parts.empty()) rule += fmt::format(" when {}", fmt::join(parts, " and "));
  if (!settled) rule += " (budget ran out before every boundary was pinned down)";
  return rule;
}

} // namespace sdpa_doctor::run
