// check/case_plan: the flags `check` and `cases` share to plan cases, parsed the same way in both,
// so `cases` lists exactly what `check` runs (the rule itself is cases::plan_cases). Every problem
// is Fatal (exit 2).
#pragma once

#include "core/case.hpp"
#include "cases/cases.hpp"

#include <optional>
#include <string>
#include <vector>

namespace sdpa_doctor::check {

// Comma-separated list flags, each repeatable, as one list; empty items dropped. A comma inside
// brackets stays (variant names such as "flash[aotriton,experimental]").
std::vector<std::string> split_list(const std::vector<std::string>& items);

// The `--dtype` list, each name checked; empty when not given.
std::vector<DType> listed_dtypes(const std::vector<std::string>& list);

// `--model CONFIG`, loaded and checked; nullopt when `path` is empty.
std::optional<cases::ModelShapes> loaded_model(const std::string& path);

// cases::plan_cases, its notes logged as warnings.
cases::PlannedCases planned_cases(const cases::CaseSources& sources);

} // namespace sdpa_doctor::check
