// core/model_json: the measured parts of the model as JSON and back. One form for the report's
// JSON (report/json.cpp writes it), the run's journal (each result the moment it is known; the
// shrinking and the verified advice once decided) and the readers that rebuild a Report from
// either (`report JOURNAL`, `check --resume`); check's journal header reuses it too. The report
// JSON document itself is built in report/; elsewhere nlohmann-json is used only where JSON is
// the wire format (case files, the worker protocol, known issues).
// A non-finite number is written as null with its key in the object's "nonfinite_fields", and
// read back as the NaN or infinity it was only when that list says so.
#pragma once

#include "core/expected.hpp"
#include "core/model.hpp"

#include <nlohmann/json.hpp>

namespace sdpa_doctor {

// The string under `key` of a JSON object; empty when absent, not a string or `object` is not an
// object. The lenient field reader of everything the doctor reads back (reports, the journal,
// worker events).
std::string json_text(const nlohmann::json& object, const char* key);

nlohmann::json to_json(const CaseResult& result);
Expected<CaseResult> case_result_from_json(const nlohmann::json& j);
// What is wrong with a result's "directions" (an object of forward and backward, each a status),
// in one line naming the bad value; empty when nothing is.
std::string directions_problem(const nlohmann::json& directions);

nlohmann::json to_json(const WorkerInfo& worker);
Expected<WorkerInfo> worker_info_from_json(const nlohmann::json& j);

nlohmann::json to_json(const Finding& finding);
Expected<Finding> finding_from_json(const nlohmann::json& j);

nlohmann::json to_json(const DeviceInventory& inventory);
Expected<DeviceInventory> inventory_from_json(const nlohmann::json& j);

// The report's `shrinks` entries (v1.1) and `recommendations` (verification: v1.2).
nlohmann::json to_json(const Shrink& shrink);
Expected<Shrink> shrink_from_json(const nlohmann::json& j);

nlohmann::json to_json(const Recommendation& recommendation);
Expected<Recommendation> recommendation_from_json(const nlohmann::json& j);

nlohmann::json to_json(const Timings& timings);
Timings timings_from_json(const nlohmann::json& j);

std::optional<Severity> severity_from_string(std::string_view text);

} // namespace sdpa_doctor
