#include "core/case.hpp"
#include "core/text.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <fmt/format.h>
#include <limits>
#include <vector>

namespace sdpa_doctor {

namespace {

// One table per enum serves both directions: each value's first name is the one written (reports,
// ids, repro scripts); any later name of the same value is an alias a reader accepts.
template <typename E> struct Named {
  E value;
  std::string_view name;
};
constexpr Named<DType> k_dtype_names[] = {
    {DType::f16, "fp16"},    {DType::bf16, "bf16"},     {DType::f32, "fp32"},
    {DType::f16, "float16"}, {DType::f16, "half"},      {DType::f16, "f16"},
    {DType::bf16, "bfloat16"}, {DType::f32, "float32"}, {DType::f32, "float"},
    {DType::f32, "f32"}};
constexpr Named<Mask> k_mask_names[] = {{Mask::none, "none"},        {Mask::boolean, "bool"},
                                        {Mask::additive, "additive"}, {Mask::boolean, "boolean"},
                                        {Mask::additive, "add"},      {Mask::additive, "float"}};
constexpr Named<Layout> k_layout_names[] = {
    {Layout::contiguous, "contiguous"}, {Layout::transposed, "transposed"},
    {Layout::strided, "strided"},       {Layout::offset, "offset"},
    {Layout::contiguous, "bhld"},       {Layout::transposed, "blhd"}};
constexpr Named<MaskShape> k_mask_shape_names[] = {{MaskShape::batch, "b1qk"},
                                                   {MaskShape::batch_heads, "bhqk"},
                                                   {MaskShape::shared, "11qk"},
                                                   {MaskShape::plain, "qk"}};
constexpr Named<MaskedRowSemantics> k_masked_row_semantics_names[] = {
    {MaskedRowSemantics::zero, "zero"}, {MaskedRowSemantics::nan, "nan"}};

template <typename E, size_t N>
std::string_view name_in(const Named<E> (&table)[N], E value) {
  for (const Named<E>& n : table)
    if (n.value == value) return n.name;
  return table[0].name;
}

template <typename E, size_t N>
std::optional<E> value_in(const Named<E> (&table)[N], std::string_view text) {
  for (const Named<E>& n : table)
    if (n.name == text) return n.value;
  return std::nullopt;
}

// "fp16, bf16, fp32": the written names, for an error's list of choices.
template <typename E, size_t N> std::string choices_in(const Named<E> (&table)[N]) {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    bool first = true;
    for (size_t j = 0; j < i; ++j) first = first && table[j].value != table[i].value;
    if (first) out += (out.empty() ? "" : ", ") + std::string(table[i].name);
  }
  return out;
}

} // namespace

std::string_view to_string(DType dtype) { return name_in(k_dtype_names, dtype); }
std::string_view to_string(Mask mask) { return name_in(k_mask_names, mask); }
std::string_view to_string(Layout layout) { return name_in(k_layout_names, layout); }
std::string_view to_string(MaskShape shape) { return name_in(k_mask_shape_names, shape); }
std::string_view to_string(MaskedRowSemantics semantics) {
  return name_in(k_masked_row_semantics_names, semantics);
}

std::optional<DType> dtype_from_string(std::string_view t) { return value_in(k_dtype_names, t); }
std::optional<Mask> mask_from_string(std::string_view t) { return value_in(k_mask_names, t); }
std::optional<Layout> layout_from_string(std::string_view t) {
  return value_in(k_layout_names, t);
}
std::optional<MaskedRowSemantics> masked_row_semantics_from_string(std::string_view t) {
  return value_in(k_masked_row_semantics_names, t);
}
std::optional<MaskShape> mask_shape_from_string(std::string_view t) {
  return value_in(k_mask_shape_names, t);
}

namespace {
// A layout's word in case ids: "tr" (kept from when it was the only other layout), "str", "off".
std::string_view layout_code(Layout layout) {
  switch (layout) {
  case Layout::contiguous: return "c";
  case Layout::transposed: return "tr";
  case Layout::strided: return "str";
  case Layout::offset: return "off";
  }
  return "c";
}

std::optional<Layout> layout_from_code(std::string_view code) {
  for (Layout l : {Layout::contiguous, Layout::transposed, Layout::strided, Layout::offset})
    if (code == layout_code(l)) return l;
  return std::nullopt;
}
} // namespace

int dtype_size_bytes(DType dtype) { return dtype == DType::f32 ? 4 : 2; }

namespace {
// 25 -> "0.25", 10 -> "0.1": the shortest decimal, as a user writes dropout_p.
std::string format_dropout(int percent) {
  std::string text = fmt::format("{}.{:02d}", percent / 100, percent % 100);
  if (text.back() == '0') text.pop_back();
  return text;
}

// "0.25", ".1", "0", "0.5": a probability in hundredths; nullopt for anything else.
std::optional<int> parse_dropout(std::string_view text) {
  if (text.starts_with("0")) text.remove_prefix(1);
  if (text.empty()) return 0;
  if (text[0] != '.' || text.size() < 2 || text.size() > 3) return std::nullopt;
  int percent = 0;
  for (size_t i = 1; i < 3; ++i) {
    const char ch = i < text.size() ? text[i] : '0';
    if (ch < '0' || ch > '9') return std::nullopt;
    percent = percent * 10 + (ch - '0');
  }
  return percent;
}
} // namespace

std::string Case::id() const {
  std::string out = fmt::format("{}-b{}-h{}", to_string(dtype), b, hq);
  if (hkv != hq) out += fmt::format(":{}", hkv);
  out += fmt::format("-q{}-k{}-d{}", lq, lkv, d);
  if (causal) out += causal_bottom_right ? "-causal_br" : "-causal";
  if (window > 0) out += fmt::format("-win{}", window); // a bool mask of its own kind
  else if (mask == Mask::boolean) out += "-mask_bool";
  if (mask == Mask::additive) out += "-mask_add";
  if (mask_dtype && *mask_dtype != dtype) out += fmt::format("-mask_{}", to_string(*mask_dtype));
  if (mask_shape != MaskShape::batch) out += fmt::format("-mask_{}", to_string(mask_shape));
  if (mask_layout != Layout::contiguous) out += fmt::format("-mask_{}", layout_code(mask_layout));
  if (layout != Layout::contiguous) out += fmt::format("-{}", layout_code(layout));
  const std::pair<char, const std::optional<Layout>*> own[] = {
      {'q', &q_layout}, {'k', &k_layout}, {'v', &v_layout}};
  for (const auto& [name, l] : own)
    if (l->has_value() && **l != layout) out += fmt::format("-{}_{}", name, layout_code(**l));
  if (large) out += "-large";
  if (dropout_percent > 0) out += fmt::format("-drop{}", format_dropout(dropout_percent));
  if (seed != 0) out += fmt::format("-s{}", seed);
  if (masked_rows) out += "-mrows";
  if (backward) out += "-bwd";
  return out;
}

std::array<Layout, 3> Case::qkv_layouts() const {
  return {q_layout.value_or(layout), k_layout.value_or(layout), v_layout.value_or(layout)};
}

void Case::set_layouts(Layout q, Layout k, Layout v) {
  const bool alike = q == k && k == v;
  layout = alike ? q : Layout::contiguous;
  const auto own = [&](Layout l) {
    return alike || l == Layout::contiguous ? std::nullopt : std::optional<Layout>(l);
  };
  q_layout = own(q);
  k_layout = own(k);
  v_layout = own(v);
}

int64_t Case::input_bytes() const {
  const int64_t elem = dtype_size_bytes(dtype);
  int64_t bytes = (2 * q_elements() + 2 * kv_elements()) * elem;
  if (backward) bytes *= 2; // the upstream gradient, dq, dk and dv
  // A strided tensor's buffer is twice its view; a (B,H,..) mask has a row per head.
  const auto [q, k, v] = qkv_layouts();
  bytes += ((q == Layout::strided ? q_elements() : 0) + (k == Layout::strided ? kv_elements() : 0) +
            (v == Layout::strided ? kv_elements() : 0)) *
           elem;
  if (mask != Mask::none) {
    const int64_t rows = mask_shape == MaskShape::batch_heads ? b * hq * lq
                         : mask_shape == MaskShape::batch     ? b * lq
                                                              : lq;
    const int64_t row = mask_layout == Layout::strided ? (lkv + 15) / 16 * 16 + 1 : lkv;
    bytes += rows * row * dtype_size_bytes(mask_value_dtype());
  }
  return bytes;
}

// Autograd keeps both for the backward, which makes their gradients as large again.
int64_t Case::math_scores_bytes() const { return (backward ? 4 : 2) * b * hq * lq * lkv * 4; }

double Case::flops() const {
  const double f = 4.0 * double(b) * double(hq) * double(lq) * double(lkv) * double(d) *
                   (backward ? 3.5 : 1.0);
  if (!causal) return f;
  if (!causal_bottom_right) return f / 2;
  // Row i sees lkv - lq + i + 1 keys.
  const double seen = double(lq) * double(lkv - lq) + double(lq) * double(lq + 1) / 2;
  return f * seen / (double(lq) * double(lkv));
}

namespace {
std::string validate_mask_and_layouts(const Case& c) {
  if (c.mask_layout == Layout::transposed) return "a mask is contiguous, strided or offset";
  if (c.mask == Mask::none && (c.mask_shape != MaskShape::batch ||
                               c.mask_layout != Layout::contiguous))
    return "a mask shape or layout needs a mask";
  if (c.mask_dtype && *c.mask_dtype != c.dtype && c.mask != Mask::additive)
    return "a mask dtype needs mask=additive (a bool mask is bool)";
  if (c.window < 0) return fmt::format("window must not be negative, got {}", c.window);
  if (c.window > k_max_dim) return fmt::format("window={} is larger than {}", c.window, k_max_dim);
  if (c.window > 0 && c.mask != Mask::boolean) return "window=W is a bool mask (mask=bool)";
  if (c.dropout_percent < 0 || c.dropout_percent > k_max_dropout_percent)
    return fmt::format("dropout must be within 0 and 0.{}", k_max_dropout_percent);
  if (c.dropout_percent > 0 && c.lkv != c.d)
    return fmt::format("a dropout case needs lkv = d (its V is the identity), got lkv={} d={}",
                       c.lkv, c.d);
  if (c.dropout_percent > 0 && c.backward)
    return "a dropout case is forward only (its gradients depend on the dropped positions)";
  if (c.masked_rows && c.mask == Mask::none) return "masked_rows needs a mask (mask=bool|additive)";
  if (c.masked_rows && c.window > 0) return "masked_rows does not go with a window";
  if (c.causal_bottom_right && !c.causal) return "a bottom-right alignment needs causal";
  if (c.causal_bottom_right && c.lq > c.lkv)
    return fmt::format("causal=bottom_right needs lq <= lkv, got lq={} lkv={} (torch leaves the "
                       "first {} query rows without a key: undefined)",
                       c.lq, c.lkv, c.lq - c.lkv);
  if (c.causal_bottom_right && c.lq == c.lkv)
    return "causal=bottom_right at lq = lkv is top-left exactly: write causal";
  // make_inputs masks query rows 3, 7, 11, ...: a shorter query has none of them.
  if (c.masked_rows && c.lq < 4)
    return fmt::format("masked_rows needs lq >= 4 (it masks every key of query rows 3, 7, ...), "
                       "got lq={}",
                       c.lq);
  return {};
}
} // namespace

std::string validate(const Case& c) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"b", c.b}, {"hq", c.hq}, {"hkv", c.hkv}, {"lq", c.lq}, {"lkv", c.lkv}, {"d", c.d}};
  for (const auto& [name, value] : sizes) {
    if (value <= 0) return fmt::format("{} must be positive, got {}", name, value);
    if (value > k_max_dim) return fmt::format("{}={} is larger than {}", name, value, k_max_dim);
  }
  if (c.hq % c.hkv != 0)
    return fmt::format("hq={} must be a multiple of hkv={} (grouped-query attention)", c.hq, c.hkv);
  // Products of up to six factors of 2^20 overflow int64: check in double first.
  const double q = double(c.b) * double(c.hq) * double(c.lq) * double(c.d);
  const double s = double(c.b) * double(c.hq) * double(c.lq) * double(c.lkv);
  const double kv = double(c.b) * double(c.hkv) * double(c.lkv) * double(c.d);
  if (auto problem = validate_mask_and_layouts(c); !problem.empty()) return problem;
  const double limit = double(k_max_elements);
  if (q > limit || kv > limit || s > limit)
    return fmt::format("case {} is too large ({:.3g} score elements; limit {:.3g})", c.id(), s,
                       limit);
  return {};
}

namespace {

Expected<int64_t> parse_int(std::string_view key, std::string_view text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc::result_out_of_range && ptr == end)
    return make_error(text.size() <= 24
                          ? fmt::format("'{}' is out of range, got {}", key, text)
                          : fmt::format("'{}' is out of range, got a {}-digit number", key,
                                        text.size()));
  if (text.empty() || ec != std::errc{} || ptr != end)
    return make_error(fmt::format("'{}' needs an integer, got '{}'", key, text));
  return value;
}

// `has_value`: written `key=...`; a bare `causal` is on, an empty `causal=` is no value at all.
Expected<bool> parse_flag(std::string_view key, std::string_view text, bool has_value) {
  if (text.empty() && has_value) return make_error(fmt::format("'{}' needs 0 or 1, got nothing", key));
  if (text.empty() || text == "1" || text == "true" || text == "yes") return true;
  if (text == "0" || text == "false" || text == "no") return false;
  return make_error(fmt::format("'{}' takes 0 or 1, got '{}'", key, text));
}

// Applies one key=value to a case; shared by the spec and JSON parsers.
std::string apply_key(Case& c, std::string_view key, std::string_view value, bool has_value) {
  auto need_int = [&](int64_t& field) -> std::string {
    if (!has_value) return fmt::format("'{}' needs a value", key);
    auto v = parse_int(key, value);
    if (!v) return v.error().message;
    field = *v;
    return {};
  };
  // A named value: "unknown mask_shape 'x' (b1qk, bhqk, 11qk, qk)" when it is none of them.
  auto named = [&](auto& field, auto from_string, std::string_view choices) -> std::string {
    auto v = from_string(value);
    if (!v) return fmt::format("unknown {} '{}' ({})", key, value, choices);
    field = *v;
    return {};
  };
  const std::string dtypes = choices_in(k_dtype_names);
  const std::string layouts = choices_in(k_layout_names);
  if (key == "dtype") return named(c.dtype, dtype_from_string, dtypes);
  if (key == "mask") return named(c.mask, mask_from_string, choices_in(k_mask_names));
  if (key == "layout") return named(c.layout, layout_from_string, layouts);
  if (key == "q_layout") return named(c.q_layout, layout_from_string, layouts);
  if (key == "k_layout") return named(c.k_layout, layout_from_string, layouts);
  if (key == "v_layout") return named(c.v_layout, layout_from_string, layouts);
  if (key == "mask_layout") return named(c.mask_layout, layout_from_string, layouts);
  if (key == "mask_dtype") return named(c.mask_dtype, dtype_from_string, dtypes);
  if (key == "mask_shape")
    return named(c.mask_shape, mask_shape_from_string, choices_in(k_mask_shape_names));
  if (key == "window") {
    // A window of 0 keys would mask every key: the default (no window) is written by leaving it out.
    if (auto e = need_int(c.window); !e.empty()) return e;
    return c.window == 0 ? "'window' must be at least 1 (leave it out for no window)" : "";
  }
  if (key == "large") {
    auto f = parse_flag(key, value, has_value);
    if (!f) return f.error().message;
    c.large = *f;
    return {};
  }
  if (key == "causal") {
    // torch's is_causal aligns the diagonal top-left: causal=top_left names it; decoding and
    // chunked prefill align it bottom-right (causal_lower_right).
    c.causal_bottom_right = has_value && value == "bottom_right";
    if (c.causal_bottom_right || (has_value && value == "top_left"))
      return c.causal = true, std::string{};
    auto f = parse_flag(key, value, has_value);
    if (!f && value.empty()) return f.error().message;
    if (!f)
      return fmt::format("'causal' takes 0, 1, top_left or bottom_right, got '{}'", value);
    c.causal = *f;
    return {};
  }
  if (key == "backward" || key == "masked_rows") {
    auto f = parse_flag(key, value, has_value);
    if (!f) return f.error().message;
    (key == "backward" ? c.backward : c.masked_rows) = *f;
    return {};
  }
  if (key == "dropout") {
    auto percent = parse_dropout(value);
    if (!percent)
      return fmt::format("'dropout' takes a probability in steps of 0.01 (e.g. 0.1), got '{}'",
                         value);
    c.dropout_percent = *percent;
    return {};
  }
  if (key == "b") return need_int(c.b);
  if (key == "hq") return need_int(c.hq);
  if (key == "hkv") return need_int(c.hkv);
  if (key == "lq") return need_int(c.lq);
  if (key == "lkv") return need_int(c.lkv);
  if (key == "d") return need_int(c.d);
  if (key == "h") {
    auto e = need_int(c.hq);
    c.hkv = c.hq;
    return e;
  }
  if (key == "l") {
    auto e = need_int(c.lq);
    c.lkv = c.lq;
    return e;
  }
  if (key == "seed") {
    int64_t s = 0;
    auto e = need_int(s);
    if (!e.empty()) return e;
    if (s < 0) return "'seed' must not be negative";
    c.seed = static_cast<uint64_t>(s);
    return {};
  }
  return fmt::format("unknown key '{}' (dtype, b, h, hq, hkv, l, lq, lkv, d, causal, mask, "
                     "layout, q_layout, k_layout, v_layout, mask_dtype, mask_shape, mask_layout, "
                     "window, large, seed, masked_rows, backward, dropout)",
                     key);
}

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t pos = text.find(sep, start);
    parts.push_back(text.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return parts;
}

// One form for one case: the layouts as set_layouts keeps them, no mask dtype equal to dtype.
Expected<Case> finish(Case c, std::string_view source) {
  const auto [q, k, v] = c.qkv_layouts();
  c.set_layouts(q, k, v);
  // Checked before a mask dtype equal to dtype is dropped, which would hide it.
  if (c.mask_dtype && c.mask != Mask::additive)
    return make_error(fmt::format("invalid case '{}': mask_dtype applies to an additive mask "
                                  "(mask=additive; a bool mask is bool)",
                                  source));
  if (c.mask_dtype == c.dtype) c.mask_dtype.reset();
  if (c.window > 0 && c.mask == Mask::none) c.mask = Mask::boolean; // `window=W` alone says it
  // At lq = lkv bottom-right is top-left exactly (torch's CausalBias calls is_causal there too):
  // one case, one id.
  if (c.causal_bottom_right && c.lq == c.lkv) c.causal_bottom_right = false;
  if (auto problem = validate(c); !problem.empty())
    return make_error(fmt::format("invalid case '{}': {}", source, problem));
  return c;
}

// The id words of layouts and mask forms: "tr", "q_str", "mask_fp32", "mask_bhqk", "mask_off".
bool apply_id_word(Case& c, std::string_view p) {
  if (auto l = layout_from_code(p)) {
    c.layout = *l;
    return true;
  }
  if (p.starts_with("mask_")) {
    const std::string_view what = p.substr(5);
    if (auto d = dtype_from_string(what)) c.mask_dtype = *d;
    else if (auto s = mask_shape_from_string(what)) c.mask_shape = *s;
    else if (auto l = layout_from_code(what)) c.mask_layout = *l;
    else return false;
    return true;
  }
  if (p.size() < 3 || p[1] != '_') return false;
  auto l = layout_from_code(p.substr(2));
  if (!l) return false;
  if (p[0] == 'q') c.q_layout = *l;
  else if (p[0] == 'k') c.k_layout = *l;
  else if (p[0] == 'v') c.v_layout = *l;
  else return false;
  return true;
}

} // namespace

Expected<Case> parse_case_spec(std::string_view spec) {
  Case c;
  if (trim_blanks(spec).empty()) return make_error("empty case specification");
  std::vector<std::string_view> keys;
  for (std::string_view item : split(spec, ',')) {
    item = trim_blanks(item);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string_view key = trim_blanks(item.substr(0, eq));
    // The last of two would win unseen: `d=64,...,d=128` is a typo, not a choice.
    if (std::find(keys.begin(), keys.end(), key) != keys.end())
      return make_error(fmt::format("invalid case '{}': '{}' is given twice", spec, key));
    keys.push_back(key);
    const std::string_view value =
        eq == std::string_view::npos ? "" : trim_blanks(item.substr(eq + 1));
    if (auto problem = apply_key(c, key, value, eq != std::string_view::npos); !problem.empty())
      return make_error(fmt::format("invalid case '{}': {}", spec, problem));
  }
  return finish(c, spec);
}

Expected<Case> parse_case_id(std::string_view id) {
  auto parts = split(id, '-');
  if (parts.size() < 6) return make_error(fmt::format("'{}' is not a case id", id));
  Case c;
  auto bad = [&] { return make_error(fmt::format("'{}' is not a case id", id)); };
  auto dtype = dtype_from_string(parts[0]);
  if (!dtype) return bad();
  c.dtype = *dtype;
  auto number = [&](std::string_view part, char prefix, int64_t& out) {
    if (part.size() < 2 || part[0] != prefix) return false;
    auto v = parse_int("", part.substr(1));
    if (!v) return false;
    out = *v;
    return true;
  };
  if (!number(parts[1], 'b', c.b)) return bad();
  {
    std::string_view h = parts[2];
    if (h.size() < 2 || h[0] != 'h') return bad();
    h.remove_prefix(1);
    const size_t colon = h.find(':');
    auto hq = parse_int("", h.substr(0, colon));
    if (!hq) return bad();
    c.hq = c.hkv = *hq;
    if (colon != std::string_view::npos) {
      auto hkv = parse_int("", h.substr(colon + 1));
      if (!hkv) return bad();
      c.hkv = *hkv;
    }
  }
  if (!number(parts[3], 'q', c.lq) || !number(parts[4], 'k', c.lkv) ||
      !number(parts[5], 'd', c.d))
    return bad();
  for (size_t i = 6; i < parts.size(); ++i) {
    std::string_view p = parts[i];
    int64_t seed = 0;
    if (p == "causal") c.causal = true;
    else if (p == "causal_br") c.causal = c.causal_bottom_right = true;
    else if (p == "mask_bool") c.mask = Mask::boolean;
    else if (p == "mask_add") c.mask = Mask::additive;
    else if (p == "bwd" && i + 1 == parts.size()) c.backward = true;
    else if (p == "large") c.large = true;
    else if (p.starts_with("drop") && parse_dropout(p.substr(4)).value_or(0) > 0)
      c.dropout_percent = *parse_dropout(p.substr(4));
    else if (p == "mrows") c.masked_rows = true;
    else if (p.starts_with("win") && parse_int("", p.substr(3))) {
      c.window = *parse_int("", p.substr(3));
      c.mask = Mask::boolean;
    } else if (apply_id_word(c, p)) continue;
    else if (number(p, 's', seed) && seed >= 0) c.seed = static_cast<uint64_t>(seed);
    else return bad();
  }
  return finish(c, id);
}

nlohmann::json to_json(const Case& c) {
  nlohmann::json j{{"dtype", to_string(c.dtype)}, {"b", c.b},     {"hq", c.hq},
                   {"hkv", c.hkv},                {"lq", c.lq},   {"lkv", c.lkv},
                   {"d", c.d},                    {"causal", c.causal},
                   {"mask", to_string(c.mask)},   {"layout", to_string(c.layout)},
                   {"seed", c.seed}};
  // The newer keys only where they say something, so that a plain case reads as it always did.
  if (c.causal_bottom_right) j["causal"] = "bottom_right";
  const auto [q, k, v] = c.qkv_layouts();
  if (q != k || k != v) {
    j["q_layout"] = to_string(q);
    j["k_layout"] = to_string(k);
    j["v_layout"] = to_string(v);
  }
  if (c.mask_dtype && *c.mask_dtype != c.dtype) j["mask_dtype"] = to_string(*c.mask_dtype);
  if (c.mask_shape != MaskShape::batch) j["mask_shape"] = to_string(c.mask_shape);
  if (c.mask_layout != Layout::contiguous) j["mask_layout"] = to_string(c.mask_layout);
  if (c.window > 0) j["window"] = c.window;
  if (c.large) j["large"] = true;
  if (c.masked_rows) j["masked_rows"] = true;
  if (c.backward) j["backward"] = true;
  if (c.dropout_percent > 0) j["dropout"] = c.dropout_p();
  return j;
}

Expected<Case> case_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return make_error("a case must be a JSON object");
  Case c;
  for (const auto& [key, value] : j.items()) {
    std::string text;
    if (value.is_string()) text = value.get<std::string>();
    else if (value.is_boolean()) text = value.get<bool>() ? "1" : "0";
    // Unsigned first: nlohmann counts it as an integer too, and 2^64-1 read as int64 is -1.
    else if (value.is_number_unsigned()) text = std::to_string(value.get<uint64_t>());
    else if (value.is_number_integer()) text = std::to_string(value.get<int64_t>());
    else if (key == "dropout" && value.is_number_float())
      text = value.dump(); // "0.25"; anything finer than 0.01 is refused by the parser
    else return make_error(fmt::format("case key '{}' has a value of the wrong type", key));
    if (auto problem = apply_key(c, key, text, true); !problem.empty())
      return make_error(problem);
  }
  // Named by its id: the object itself can be as long as the line it came from.
  return finish(c, c.id());
}

} // namespace sdpa_doctor
