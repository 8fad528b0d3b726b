#include "cases/tolerance.hpp"

#include "core/text.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

namespace sdpa_doctor::cases {

Tolerance default_tolerance(DType dtype) { return TolerancePolicy{}.for_dtype(dtype); }

Tolerance TolerancePolicy::for_dtype(DType dtype) const {
  switch (dtype) {
  case DType::f16: return fp16;
  case DType::bf16: return bf16;
  case DType::f32: return fp32;
  }
  return fp32;
}

namespace {

Expected<double> parse_value(std::string_view item, std::string_view text) {
  text = trim_blanks(text);
  double value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || ptr != end || !std::isfinite(value) || value < 0)
    return make_error(fmt::format("invalid tolerance '{}': '{}' is not a finite number >= 0",
                                  item, text));
  return value;
}

} // namespace

Expected<TolerancePolicy> parse_tolerance_overrides(std::string_view text, TolerancePolicy base) {
  TolerancePolicy policy = base;
  while (!trim_blanks(text).empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = trim_blanks(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const size_t colon = item.find(':', eq == std::string_view::npos ? 0 : eq);
    if (eq == std::string_view::npos || colon == std::string_view::npos)
      return make_error(fmt::format("invalid tolerance '{}': expected DTYPE=ATOL:RTOL, e.g. "
                                    "bf16=0.02:0.02",
                                    item));
    const auto dtype = dtype_from_string(trim_blanks(item.substr(0, eq)));
    if (!dtype)
      return make_error(fmt::format("invalid tolerance '{}': unknown dtype '{}' (fp16, bf16, "
                                    "fp32)",
                                    item, trim_blanks(item.substr(0, eq))));
    auto atol = parse_value(item, item.substr(eq + 1, colon - eq - 1));
    if (!atol) return atol.error();
    auto rtol = parse_value(item, item.substr(colon + 1));
    if (!rtol) return rtol.error();
    const Tolerance t{*atol, *rtol};
    switch (*dtype) {
    case DType::f16: policy.fp16 = t; break;
    case DType::bf16: policy.bf16 = t; break;
    case DType::f32: policy.fp32 = t; break;
    }
  }
  return policy;
}

std::string to_string(const TolerancePolicy& p) {
  return fmt::format("fp16={}:{},bf16={}:{},fp32={}:{}", p.fp16.atol, p.fp16.rtol, p.bf16.atol,
                     p.bf16.rtol, p.fp32.atol, p.fp32.rtol);
}

} // namespace sdpa_doctor::cases
