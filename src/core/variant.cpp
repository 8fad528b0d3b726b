#include "core/variant.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <optional>

namespace sdpa_doctor {

std::string_view to_string(Probe probe) {
  switch (probe) {
  case Probe::torch: return "libtorch";
  case Probe::python: return "python";
  case Probe::reference: return "reference";
  case Probe::fault: return "fault";
  }
  return "libtorch";
}

std::optional<Probe> probe_from_string(std::string_view t) {
  if (t == "libtorch" || t == "torch") return Probe::torch;
  if (t == "python") return Probe::python;
  if (t == "reference" || t == "ref") return Probe::reference;
  if (t == "fault") return Probe::fault;
  return std::nullopt;
}

std::string_view to_string(Mode mode) {
  return mode == Mode::compiled ? "compiled" : "eager";
}

std::optional<Mode> mode_from_string(std::string_view t) {
  if (t == "eager") return Mode::eager;
  if (t == "compiled") return Mode::compiled;
  return std::nullopt;
}

std::string variant_row(std::string_view variant, Mode mode) {
  if (mode == Mode::eager) return std::string(variant);
  return fmt::format("{} · {}", variant, to_string(mode));
}

std::string Variant::name() const {
  if (flags.empty()) return backend;
  return fmt::format("{}[{}]", backend, fmt::join(flags, ","));
}

bool Variant::has_flag(std::string_view flag) const {
  return std::find(flags.begin(), flags.end(), flag) != flags.end();
}

std::vector<std::pair<std::string, std::string>> Variant::environment() const {
  std::vector<std::pair<std::string, std::string>> env;
  if (has_flag("experimental")) env.emplace_back("TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL", "1");
  if (has_flag("ck")) env.emplace_back("TORCH_ROCM_FA_PREFER_CK", "1");
  if (has_flag("aotriton")) env.emplace_back("TORCH_ROCM_FA_PREFER_CK", "0");
  return env;
}

bool is_known_backend(std::string_view backend) {
  const auto in = [&](const auto& list) {
    return std::find(std::begin(list), std::end(list), backend) != std::end(list);
  };
  return in(k_torch_backends) || in(k_reference_backends);
}

Expected<Variant> parse_variant(std::string_view text) {
  Variant v;
  const size_t open = text.find('[');
  v.backend = std::string(text.substr(0, open));
  if (v.backend.empty()) return make_error(fmt::format("invalid variant '{}'", text));
  // Only backends the probes know: a variant name travels into worker arguments, environments and
  // generated scripts, so an unknown one is an input error here, once, for every reader.
  if (!is_known_backend(v.backend))
    return make_error(fmt::format("invalid variant '{}': unknown backend '{}' ({}, {})", text,
                                  v.backend, fmt::join(k_torch_backends, ", "),
                                  fmt::join(k_reference_backends, ", ")));
  if (open != std::string_view::npos) {
    if (text.back() != ']') return make_error(fmt::format("invalid variant '{}': missing ']'", text));
    std::string_view inner = text.substr(open + 1, text.size() - open - 2);
    while (!inner.empty()) {
      const size_t comma = inner.find(',');
      std::string_view flag = inner.substr(0, comma);
      if (std::find(std::begin(k_variant_flags), std::end(k_variant_flags), flag) ==
          std::end(k_variant_flags))
        return make_error(fmt::format("invalid variant '{}': unknown flag '{}' (ck, aotriton, "
                                      "experimental)",
                                      text, flag));
      v.flags.emplace_back(flag);
      if (comma == std::string_view::npos) break;
      inner.remove_prefix(comma + 1);
    }
    if (v.flags.empty()) return make_error(fmt::format("invalid variant '{}': empty flags", text));
  }
  if (v.has_flag("ck") && v.has_flag("aotriton"))
    return make_error(fmt::format("invalid variant '{}': ck and aotriton exclude each other", text));
  return v;
}

} // namespace sdpa_doctor
