#include "check/case_plan.hpp"
#include "cli/commands.hpp"
#include "core/case.hpp"
#include "core/expected.hpp"
#include "core/io.hpp"
#include "core/status.hpp"
#include "cases/cases.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iterator>
#include <optional>

namespace sdpa_doctor::cli {

namespace {

struct CasesOptions {
  std::string suite; // empty: quick, unless custom cases were given
  std::vector<std::string> case_specs;
  std::string case_file;
  std::string model_config; // --model: a Hugging Face config.json
  int64_t max_len = cases::k_default_model_max_len;
  std::vector<std::string> dtypes; // --dtype
  bool train = false;              // --train
};

std::string shape(const Case& c) {
  const std::string heads = c.hq == c.hkv ? fmt::format("{}", c.hq) : fmt::format("{}:{}", c.hq, c.hkv);
  return fmt::format("{}x{}x{}x{}x{}", c.b, heads, c.lq, c.lkv, c.d);
}

std::string mib(int64_t bytes) { return fmt::format("{:.1f}", double(bytes) / double(1 << 20)); }

std::string table(const std::vector<Case>& cases) {
  size_t id_width = 2;
  for (const Case& c : cases) id_width = std::max(id_width, c.id().size());
  std::string out = fmt::format("{:<{}}  {:<5}  {:<22}  {:>10}  {:>16}\n", "id", id_width, "dtype",
                                "shape BxHxLqxLkvxD", "GFLOP", "math scores MiB");
  double flops = 0;
  for (const Case& c : cases) {
    fmt::format_to(std::back_inserter(out), "{:<{}}  {:<5}  {:<22}  {:>10.3f}  {:>16}\n", c.id(),
                   id_width, to_string(c.dtype), shape(c), c.flops() / 1e9,
                   mib(c.math_scores_bytes()));
    flops += c.flops();
  }
  fmt::format_to(std::back_inserter(out), "{} cases, {:.1f} GFLOP per variant\n", cases.size(),
                 flops / 1e9);
  return out;
}

nlohmann::json to_json_list(const cases::PlannedCases& plan,
                            const std::optional<cases::ModelShapes>& model) {
  nlohmann::json list = nlohmann::json::array();
  for (const Case& c : plan.cases) {
    nlohmann::json j = to_json(c);
    j["id"] = c.id();
    j["flops"] = c.flops();
    j["input_bytes"] = c.input_bytes();
    j["math_scores_bytes"] = c.math_scores_bytes();
    list.push_back(std::move(j));
  }
  nlohmann::json doc{{"schema", "sdpa-doctor/cases/v1"}, {"suite", plan.label}};
  if (model) doc["model"] = model->describe();
  doc["cases"] = std::move(list);
  return doc;
}

int run_cases(const CasesOptions& o, const GlobalOptions& global) {
  const std::optional<cases::ModelShapes> model = check::loaded_model(o.model_config);
  const cases::PlannedCases plan = check::planned_cases(
      {o.suite, o.case_specs, o.case_file, model, o.max_len, check::listed_dtypes(o.dtypes),
       o.train, false});
  // A stdout closed early (`| head`) does not stop the file: the exit says so after it (4).
  if (global.json_path != "-") {
    if (model) print_to_stdout(fmt::format("model {}\n", model->describe()));
    print_to_stdout(table(plan.cases));
  }
  if (!global.json_path.empty()) {
    const std::string text = to_json_list(plan, model).dump(2);
    if (global.json_path == "-") {
      print_to_stdout(text + "\n");
    } else if (auto w = write_file_atomically(global.json_path, text + "\n"); !w) {
      throw Fatal{"cannot write " + w.error().message, exit_code::usage};
    }
  }
  return exit_code::ok;
}

} // namespace

void setup_cases(CLI::App& app, const GlobalOptions& global, Action& action) {
  auto options = std::make_shared<CasesOptions>();
  auto* sub = app.add_subcommand("cases", "List the cases a check would run (id, dtype, shape, "
                                          "FLOPs, memory of the math backend's scores)");
  // The same flags as check's, planned by the same rule (check/case_plan.hpp).
  add_case_plan_options(*sub, {options->suite, options->case_specs, options->case_file,
                               options->model_config, options->max_len, options->dtypes,
                               options->train});
  sub->callback([&action, &global, options] {
    action = [&global, options] { return run_cases(*options, global); };
  });
}

} // namespace sdpa_doctor::cli
