#include "core/case.hpp"
#include "core/text.hpp"

#include <nlohmann/json.hpp>

#include <charconv>
#include <fmt/format.h>
#include <limits>
#include <vector>

namespace sdpa_doctor {

std::string_view to_string(DType dtype) {
  switch (dtype) {
  case DType::f16: return "fp16";
  case DType::bf16: return "bf16";
  case DType::f32: return "fp32";
  }
  return "fp32";
}

std::string_view to_string(Mask mask) {
  switch (mask) {
  case Mask::none: return "none";
  case Mask::boolean: return "bool";
  case Mask::additive: return "additive";
  }
  return "none";
}

std::string_view to_string(Layout layout) {
  return layout == Layout::contiguous ? "contiguous" : "transposed";
}

std::optional<DType> dtype_from_string(std::string_view t) {
  if (t == "fp16" || t == "float16" || t == "half" || t == "f16") return DType::f16;
  if (t == "bf16" || t == "bfloat16") return DType::bf16;
  if (t == "fp32" || t == "float32" || t == "float" || t == "f32") return DType::f32;
  return std::nullopt;
}

std::optional<Mask> mask_from_string(std::string_view t) {
  if (t == "none") return Mask::none;
  if (t == "bool" || t == "boolean") return Mask::boolean;
  if (t == "additive" || t == "add" || t == "float") return Mask::additive;
  return std::nullopt;
}

std::optional<Layout> layout_from_string(std::string_view t) {
  if (t == "contiguous" || t == "bhld") return Layout::contiguous;
  if (t == "transposed" || t == "blhd") return Layout::transposed;
  return std::nullopt;
}

int dtype_size_bytes(DType dtype) { return dtype == DType::f32 ? 4 : 2; }

std::string Case::id() const {
  std::string out = fmt::format("{}-b{}-h{}", to_string(dtype), b, hq);
  if (hkv != hq) out += fmt::format(":{}", hkv);
  out += fmt::format("-q{}-k{}-d{}", lq, lkv, d);
  if (causal) out += "-causal";
  if (mask == Mask::boolean) out += "-mask_bool";
  if (mask == Mask::additive) out += "-mask_add";
  if (layout == Layout::transposed) out += "-tr";
  if (seed != 0) out += fmt::format("-s{}", seed);
  if (backward) out += "-bwd";
  return out;
}

int64_t Case::input_bytes() const {
  const int64_t elem = dtype_size_bytes(dtype);
  int64_t bytes = (2 * q_elements() + 2 * kv_elements()) * elem;
  if (backward) bytes *= 2; // the upstream gradient, dq, dk and dv
  if (mask != Mask::none) bytes += b * lq * lkv * elem;
  return bytes;
}

// Autograd keeps both for the backward, which makes their gradients as large again.
int64_t Case::math_scores_bytes() const { return (backward ? 4 : 2) * b * hq * lq * lkv * 4; }

double Case::flops() const {
  const double f = 4.0 * double(b) * double(hq) * double(lq) * double(lkv) * double(d) *
                   (backward ? 3.5 : 1.0);
  return causal ? f / 2 : f;
}

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

Expected<bool> parse_flag(std::string_view key, std::string_view text) {
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
  if (key == "dtype") {
    auto d = dtype_from_string(value);
    if (!d) return fmt::format("unknown dtype '{}' (fp16, bf16, fp32)", value);
    c.dtype = *d;
    return {};
  }
  if (key == "mask") {
    auto m = mask_from_string(value);
    if (!m) return fmt::format("unknown mask '{}' (none, bool, additive)", value);
    c.mask = *m;
    return {};
  }
  if (key == "layout") {
    auto l = layout_from_string(value);
    if (!l) return fmt::format("unknown layout '{}' (contiguous, transposed)", value);
    c.layout = *l;
    return {};
  }
  if (key == "causal") {
    auto f = parse_flag(key, value);
    if (!f) return f.error().message;
    c.causal = *f;
    return {};
  }
  if (key == "backward") {
    auto f = parse_flag(key, value);
    if (!f) return f.error().message;
    c.backward = *f;
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
                     "layout, seed, backward)",
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

Expected<Case> finish(Case c, std::string_view source) {
  if (auto problem = validate(c); !problem.empty())
    return make_error(fmt::format("invalid case '{}': {}", source, problem));
  return c;
}

} // namespace

Expected<Case> parse_case_spec(std::string_view spec) {
  Case c;
  if (trim_blanks(spec).empty()) return make_error("empty case specification");
  for (std::string_view item : split(spec, ',')) {
    item = trim_blanks(item);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string_view key = trim_blanks(item.substr(0, eq));
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
    else if (p == "mask_bool") c.mask = Mask::boolean;
    else if (p == "mask_add") c.mask = Mask::additive;
    else if (p == "tr") c.layout = Layout::transposed;
    else if (p == "bwd" && i + 1 == parts.size()) c.backward = true;
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
  // Written only when set: forward cases keep the JSON they always had.
  if (c.backward) j["backward"] = true;
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
    else return make_error(fmt::format("case key '{}' has a value of the wrong type", key));
    if (auto problem = apply_key(c, key, text, true); !problem.empty())
      return make_error(problem);
  }
  // Named by its id: the object itself can be as long as the line it came from.
  return finish(c, c.id());
}

} // namespace sdpa_doctor
