#include "check/request.hpp"

#include "advice/advice.hpp"
#include "check/case_plan.hpp"
#include "core/text.hpp"
#include "protocol/protocol.hpp"
#include "run/run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace sdpa_doctor::check {

namespace {

using nlohmann::json;

Millis millis(double seconds) { return Millis(int64_t(seconds * 1000)); }

std::vector<Probe> planned_probes(const CheckOptions& o) {
  std::vector<Probe> out;
  for (const auto& name : split_list(o.probes)) {
    auto p = probe_from_string(name);
    if (!p || *p == Probe::fault)
      throw Fatal{fmt::format("unknown probe '{}' (libtorch, python, reference)", name)};
    out.push_back(*p);
  }
  // Both asked for: whichever wins, a plan the user did not mean would run (or nothing at all).
  if (o.no_python && std::find(out.begin(), out.end(), Probe::python) != out.end())
    throw Fatal{"--no-python contradicts --probe python: leave one out"};
  if (out.empty()) out = {Probe::torch, Probe::python, Probe::reference};
  if (o.no_python) std::erase(out, Probe::python);
  return out;
}

// `--model`, checked; nullopt without it.
std::optional<cases::ModelShapes> checked_model(const CheckOptions& o) {
  return loaded_model(o.model_config);
}

std::vector<std::string> checked_variant_filter(const CheckOptions& o) {
  std::vector<std::string> filter = split_list(o.variants);
  for (const auto& v : filter)
    if (!parse_variant(v)) throw Fatal{parse_variant(v).error().message};
  // A misspelt variant must not select nothing and pass.
  if (auto unknown = run::unknown_variants(filter); !unknown.empty())
    throw Fatal{fmt::format("unknown variant '{}' (known: {})", unknown.front(),
                            fmt::join(run::known_variant_names(), ", "))};
  return filter;
}

// `--mode`, each name checked; empty when not given (both).
std::vector<Mode> checked_modes(const CheckOptions& o) {
  std::vector<Mode> out;
  for (const std::string& name : split_list(o.modes)) {
    const auto mode = mode_from_string(name);
    if (!mode) throw Fatal{fmt::format("--mode '{}': expected eager or compiled", name)};
    if (std::find(out.begin(), out.end(), *mode) == out.end()) out.push_back(*mode);
  }
  return out;
}

bool known_compile_backend(const std::string& name) {
  return name == "aot_eager" || name == "inductor";
}

// The `--target` case, else the longest prompt of `--model`; nullopt with neither.
std::optional<Case> advice_target(const CheckOptions& o,
                                  const std::optional<cases::ModelShapes>& model) {
  if (!o.target.empty()) {
    auto t = parse_case_spec(o.target);
    if (!t) throw Fatal{"--target: " + t.error().message};
    return *t;
  }
  if (model) return cases::model_target_case(*model);
  return std::nullopt;
}

template <typename T>
T must(Expected<T> value) {
  if (!value) throw Fatal{value.error().message};
  return std::move(*value);
}

json tolerances_to_json(const cases::TolerancePolicy& t) {
  const auto pair = [](const Tolerance& x) { return json::array({x.atol, x.rtol}); };
  return {{"fp16", pair(t.fp16)}, {"bf16", pair(t.bf16)}, {"fp32", pair(t.fp32)}};
}

cases::TolerancePolicy tolerances_from_json(const json& j) {
  cases::TolerancePolicy t;
  for (auto [name, into] : {std::pair{"fp16", &t.fp16}, std::pair{"bf16", &t.bf16},
                            std::pair{"fp32", &t.fp32}})
    *into = Tolerance{j.at(name).at(0).get<double>(), j.at(name).at(1).get<double>()};
  return t;
}

// One number of a request and the flag that sets it, with the range that flag accepts.
struct Limit {
  const char* key;
  const char* flag;
  int64_t value;
  int64_t min;
  int64_t max;
  const char* unit; // " ms" for a time the flag takes in seconds
};

// What the flags allow, checked again for a request that came from elsewhere (a journal), so a
// hand-edited one cannot plan what no command line could.
Expected<bool> within_flag_limits(const CheckRequest& r) {
  constexpr int64_t k_max_ms = 1'000'000'000; // 1e6 s, as every seconds flag
  const Limit limits[] = {
      {"case_timeout_ms", "--case-timeout", r.case_timeout.count(), 0, k_max_ms, " ms"},
      {"worker_timeout_ms", "--worker-timeout", r.worker_timeout.count(), 0, k_max_ms, " ms"},
      {"startup_timeout_ms", "--startup-timeout", r.startup_timeout.count(), 1, k_max_ms, " ms"},
      {"progress_interval_ms", "--progress-every", r.progress_interval.count(), 1, k_max_ms, " ms"},
      {"call_budget_ms", "--time-budget", r.call_budget.count(), 0, 86'400'000, " ms"},
      {"max_worker_restarts", "--max-worker-restarts", r.max_worker_restarts, 0, 1000, ""},
      {"repeat", "--repeat", r.repeat, 1, protocol::k_max_repeat, ""},
      {"warmup", "--warmup", r.warmup, 1, protocol::k_max_repeat, ""},
      {"oracle_cache_bytes", "--oracle-cache-size", r.oracle_cache_bytes, 0, int64_t{1024} << 30,
       ""},
  };
  for (const Limit& l : limits)
    if (l.value < l.min || l.value > l.max)
      return make_error(fmt::format("the check request's \"{}\" is {}: {} allows {} to {}{}",
                                    l.key, l.value, l.flag, l.min, l.max, l.unit));
  if (r.probes.empty()) return make_error("the check request's \"probes\" is empty");
  for (const std::string& t : r.targets)
    if (!cases::is_valid_target(t))
      return make_error(fmt::format("the check request's \"targets\" holds '{}': --device takes "
                                    "cpu or cuda:N",
                                    escape_to_one_line(t)));
  if (r.shrink && !(r.shrink->cases > 0 && r.shrink->seconds > 0 && r.shrink->seconds <= 1e6))
    return make_error("the check request's \"shrink\" is not what --shrink-budget allows");
  return true;
}

} // namespace

bool CheckRequest::runs_python() const {
  return std::find(probes.begin(), probes.end(), Probe::python) != probes.end();
}

CheckRequest parse_request(const CheckOptions& o) {
  CheckRequest r;
  const std::optional<cases::ModelShapes> model = checked_model(o);
  r.modes = checked_modes(o);
  if (!known_compile_backend(o.compile))
    throw Fatal{fmt::format("--compile '{}': expected aot_eager or inductor", o.compile)};
  r.compile_backend = o.compile;
  // `--mode compiled` alone: every planned case is compiled, not only the suite's family.
  const bool compile_all = r.modes == std::vector<Mode>{Mode::compiled};
  cases::PlannedCases planned =
      planned_cases({o.suite, o.case_specs, o.case_file, model, o.max_len, listed_dtypes(o.dtypes),
                     o.train, compile_all});
  r.cases = std::move(planned.cases);
  r.compiled_cases = std::move(planned.compiled);
  r.gpu_cases = std::move(planned.gpu_only);
  r.suite = std::move(planned.label);
  if (model) r.model = model->describe();
  r.probes = planned_probes(o);
  r.tolerances = must(cases::parse_tolerance_overrides(o.tolerance));
  r.fail_on = must(advice::parse_fail_on(o.fail_on));
  r.advice_target = advice_target(o, model);
  r.known_issue_files = o.known_issue_files;
  r.require_gpu = o.require_gpu;
  r.variant_filter = checked_variant_filter(o);
  r.targets = split_list(o.devices);
  for (const auto& t : r.targets)
    if (!cases::is_valid_target(t))
      throw Fatal{fmt::format("--device '{}': expected cpu or cuda:N", t)};
  if (o.repeat < 1 || o.repeat > protocol::k_max_repeat || o.warmup < 1)
    throw Fatal{"--repeat must be in 1..1000 and --warmup at least 1"};
  const run::ShrinkBudget budget = must(run::parse_shrink_budget(o.shrink_budget));
  if (o.shrink) r.shrink = budget;
  r.verify = o.verify;
  if (o.sysfs_root != "/" && !std::filesystem::is_directory(o.sysfs_root))
    throw Fatal{fmt::format("--sysfs-root {}: not a directory", o.sysfs_root)};
  r.sysfs_root = o.sysfs_root;
  r.run_dir = o.run_dir;
  r.python = o.python;
  r.case_timeout = millis(o.case_timeout_s);
  r.worker_timeout = millis(o.worker_timeout_s);
  r.startup_timeout = millis(o.startup_timeout_s);
  r.plugin_build_timeout = millis(o.plugin_build_timeout_s);
  r.cache_lock_timeout = millis(o.cache_lock_timeout_s);
  r.max_worker_restarts = o.max_worker_restarts;
  r.keep_core_dumps = o.keep_core_dumps;
  r.repeat = o.repeat;
  r.warmup = o.warmup;
  r.call_budget = Millis(int64_t(std::ceil(o.time_budget_s * 1000)));
  r.probe_server = !o.no_probe_server;
  if (!o.no_oracle_cache)
    r.oracle_cache_dir = o.oracle_cache.empty() ? run::default_oracle_cache_dir() : o.oracle_cache;
  r.oracle_cache_bytes = int64_t(o.oracle_cache_gib * double(int64_t{1} << 30));
  r.progress_interval = millis(o.progress_every_s);
  return r;
}

json to_json(const CheckRequest& r) {
  json cases = json::array();
  for (const Case& c : r.cases) cases.push_back(to_json(c));
  json probes = json::array();
  for (Probe p : r.probes) probes.push_back(to_string(p));
  json fail_on = json::array();
  for (Status s : r.fail_on) fail_on.push_back(to_string(s));
  json gpu_cases = json::array();
  for (const Case& c : r.gpu_cases) gpu_cases.push_back(to_json(c));
  json modes = json::array();
  for (Mode m : r.modes) modes.push_back(to_string(m));
  json out{{"cases", cases},
           {"gpu_cases", gpu_cases},
           {"suite", r.suite},
           {"model", r.model},
           {"probes", probes},
           {"variant_filter", r.variant_filter},
           {"targets", r.targets},
           {"modes", modes},
           {"compiled_cases", r.compiled_cases},
           {"compile_backend", r.compile_backend},
           {"python", r.python},
           {"case_timeout_ms", r.case_timeout.count()},
           {"worker_timeout_ms", r.worker_timeout.count()},
           {"startup_timeout_ms", r.startup_timeout.count()},
           {"plugin_build_timeout_ms", r.plugin_build_timeout.count()},
           {"cache_lock_timeout_ms", r.cache_lock_timeout.count()},
           {"max_worker_restarts", r.max_worker_restarts},
           {"keep_core_dumps", r.keep_core_dumps},
           {"repeat", r.repeat},
           {"warmup", r.warmup},
           {"call_budget_ms", r.call_budget.count()},
           {"probe_server", r.probe_server},
           {"oracle_cache_dir", r.oracle_cache_dir},
           {"oracle_cache_bytes", r.oracle_cache_bytes},
           {"progress_interval_ms", r.progress_interval.count()},
           {"sysfs_root", r.sysfs_root},
           {"run_dir", r.run_dir},
           {"tolerances", tolerances_to_json(r.tolerances)},
           {"fail_on", fail_on},
           {"advice_target", r.advice_target ? to_json(*r.advice_target) : json()},
           {"known_issue_files", r.known_issue_files},
           {"require_gpu", r.require_gpu},
           {"shrink", r.shrink ? json{{"cases", r.shrink->cases}, {"seconds", r.shrink->seconds}}
                               : json()},
           {"verify", r.verify}};
  return out;
}

Expected<CheckRequest> request_from_json(const json& j) {
  CheckRequest r;
  std::string field;
  // Each field by name: a missing or mistyped one is named in the error.
  const auto at = [&](const char* name) -> const json& {
    field = name;
    return j.at(name);
  };
  try {
    if (!j.is_object()) return make_error("the check request is not a JSON object");
    for (const json& c : at("cases")) r.cases.push_back(must(case_from_json(c)));
    // Absent from journals written before GPU-only cases were planned.
    if (j.contains("gpu_cases"))
      for (const json& c : at("gpu_cases")) r.gpu_cases.push_back(must(case_from_json(c)));
    r.suite = at("suite").get<std::string>();
    r.model = at("model").get<std::string>();
    for (const json& p : at("probes")) {
      auto probe = probe_from_string(p.get<std::string>());
      if (!probe) return make_error("unknown probe " + p.dump());
      r.probes.push_back(*probe);
    }
    r.variant_filter = at("variant_filter").get<std::vector<std::string>>();
    r.targets = at("targets").get<std::vector<std::string>>();
    // Absent from journals written before compiled cells: eager only.
    if (j.contains("modes"))
      for (const json& m : at("modes")) {
        auto mode = mode_from_string(m.get<std::string>());
        if (!mode) return make_error("unknown mode " + m.dump());
        r.modes.push_back(*mode);
      }
    if (j.contains("compiled_cases"))
      r.compiled_cases = at("compiled_cases").get<std::vector<std::string>>();
    if (j.contains("compile_backend")) {
      r.compile_backend = at("compile_backend").get<std::string>();
      if (!known_compile_backend(r.compile_backend))
        return make_error("unknown compile backend " + at("compile_backend").dump());
    }
    r.python = at("python").get<std::string>();
    r.case_timeout = Millis(at("case_timeout_ms").get<int64_t>());
    r.worker_timeout = Millis(at("worker_timeout_ms").get<int64_t>());
    r.startup_timeout = Millis(at("startup_timeout_ms").get<int64_t>());
    // Absent from journals written before these were flags.
    if (j.contains("plugin_build_timeout_ms"))
      r.plugin_build_timeout = Millis(at("plugin_build_timeout_ms").get<int64_t>());
    if (j.contains("cache_lock_timeout_ms"))
      r.cache_lock_timeout = Millis(at("cache_lock_timeout_ms").get<int64_t>());
    r.max_worker_restarts = at("max_worker_restarts").get<int>();
    r.keep_core_dumps = at("keep_core_dumps").get<bool>();
    r.repeat = at("repeat").get<int>();
    r.warmup = at("warmup").get<int>();
    r.call_budget = Millis(at("call_budget_ms").get<int64_t>());
    r.probe_server = at("probe_server").get<bool>();
    r.oracle_cache_dir = at("oracle_cache_dir").get<std::string>();
    r.oracle_cache_bytes = at("oracle_cache_bytes").get<int64_t>();
    r.progress_interval = Millis(at("progress_interval_ms").get<int64_t>());
    r.sysfs_root = at("sysfs_root").get<std::string>();
    r.run_dir = at("run_dir").get<std::string>();
    r.tolerances = tolerances_from_json(at("tolerances"));
    for (const json& s : at("fail_on")) {
      auto status = status_from_string(s.get<std::string>());
      if (!status) return make_error("unknown status " + s.dump());
      r.fail_on.insert(*status);
    }
    if (const json& t = at("advice_target"); !t.is_null()) r.advice_target = must(case_from_json(t));
    r.known_issue_files = at("known_issue_files").get<std::vector<std::string>>();
    r.require_gpu = at("require_gpu").get<bool>();
    if (const json& s = at("shrink"); !s.is_null())
      r.shrink = run::ShrinkBudget{s.at("cases").get<int>(), s.at("seconds").get<double>()};
    r.verify = at("verify").get<bool>();
    if (auto within = within_flag_limits(r); !within) return within.error();
  } catch (const json::exception&) {
    return make_error(fmt::format("the check request's \"{}\" is missing or not what the doctor "
                                  "writes",
                                  field));
  } catch (const Fatal& e) {
    return make_error(fmt::format("the check request's \"{}\": {}", field, e.message));
  }
  return r;
}

} // namespace sdpa_doctor::check
