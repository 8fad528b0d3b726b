#include "check/case_plan.hpp"

#include "core/expected.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace sdpa_doctor::check {

std::vector<std::string> split_list(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const auto& item : items) {
    size_t start = 0;
    while (start <= item.size()) {
      size_t comma = item.find(',', start);
      // Variant names contain commas inside brackets: split only outside them.
      size_t bracket = item.find('[', start);
      if (bracket != std::string::npos && bracket < comma) {
        size_t close = item.find(']', bracket);
        comma = close == std::string::npos ? std::string::npos : item.find(',', close);
      }
      std::string part = item.substr(start, comma == std::string::npos ? comma : comma - start);
      if (!part.empty()) out.push_back(part);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

std::vector<DType> listed_dtypes(const std::vector<std::string>& list) {
  std::vector<DType> out;
  for (const auto& name : split_list(list)) {
    auto d = dtype_from_string(name);
    if (!d) throw Fatal{fmt::format("--dtype '{}': expected fp16, bf16 or fp32", name)};
    out.push_back(*d);
  }
  return out;
}

std::optional<cases::ModelShapes> loaded_model(const std::string& path) {
  if (path.empty()) return std::nullopt;
  auto model = cases::load_model_config(path);
  if (!model) throw Fatal{model.error().message};
  return *model;
}

cases::PlannedCases planned_cases(const cases::CaseSources& sources) {
  auto planned = cases::plan_cases(sources);
  if (!planned) throw Fatal{planned.error().message};
  for (const std::string& note : planned->notes) spdlog::warn("{}", note);
  return std::move(*planned);
}

} // namespace sdpa_doctor::check
