#include "core/model_json.hpp"
#include "core/text.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace sdpa_doctor {

using nlohmann::json;

std::string json_text(const json& object, const char* key) {
  if (!object.is_object()) return {};
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string{};
}

namespace {

// ---- writing --------------------------------------------------------------------------------

// A finite double as a number; a non-finite one as null with its key listed in the object's
// "nonfinite_fields"; nothing when absent.
void put_number(json& o, const std::string& key, const std::optional<double>& value) {
  if (!value) return;
  if (std::isfinite(*value)) {
    o[key] = *value;
    return;
  }
  o[key] = nullptr;
  o["nonfinite_fields"].push_back(key);
}

template <typename T> json optional_value(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

json string_or_null(const std::string& value) { return value.empty() ? json(nullptr) : json(value); }

json metrics_json(const Metrics& m) {
  json j = json::object();
  put_number(j, "max_abs_err", m.max_abs_err);
  put_number(j, "rel_l2_err", m.rel_l2_err);
  put_number(j, "frac_outside_tol", m.frac_outside_tol);
  j["nan_count"] = m.nan_count;
  j["inf_count"] = m.inf_count;
  put_number(j, "time_ms", m.time_ms);
  put_number(j, "time_min_ms", m.time_min_ms);
  j["timed_runs"] = m.timed_runs;
  put_number(j, "tflops", m.tflops);
  return j;
}

json gfx_json(const GfxTruth& g) {
  return {{"physical", g.physical},       {"effective", g.effective},
          {"override_env", g.override_env}, {"compiled_for", g.compiled_for},
          {"aotriton_images", g.aotriton_images}, {"ck_sdpa", g.ck_sdpa},
          {"source", g.source},           {"verdict", g.verdict},
          {"detail", g.detail},           {"remedy", g.remedy}};
}

json device_json(const Device& d) {
  json sources = json::object();
  for (const auto& [field, by_source] : d.sources) sources[field] = by_source;
  json out = {
      {"index", d.index >= 0 ? json(d.index) : json(nullptr)},
      {"name", string_or_null(d.name)},
      {"gfx_target", string_or_null(d.gfx_target)},
      {"gfx_arch_name", string_or_null(d.gfx_arch_name)},
      {"family", string_or_null(d.family)},
      {"marketing_names", d.marketing_names},
      {"matrix_instructions", string_or_null(d.matrix_instructions)},
      {"wave_size", optional_value(d.wave_size)},
      {"compute_units", optional_value(d.compute_units)},
      {"simd_count", optional_value(d.simd_count)},
      {"vram_total_bytes", optional_value(d.vram_total_bytes)},
      {"vram_used_bytes", optional_value(d.vram_used_bytes)},
      {"lds_per_block_bytes", optional_value(d.lds_per_block_bytes)},
      {"lds_per_cu_bytes", optional_value(d.lds_per_cu_bytes)},
      {"pci_bdf", string_or_null(d.pci_bdf)},
      {"driver_version", string_or_null(d.driver_version)},
      {"vbios", string_or_null(d.vbios)},
      {"temperature_c", optional_value(d.temperature_c)},
      {"power_w", optional_value(d.power_w)},
      {"kfd_node", string_or_null(d.kfd_node)},
      {"render_node", string_or_null(d.render_node)},
      {"integrated", d.integrated},
      {"sources", sources},
  };
  if (!d.sm_target.empty()) out["sm_target"] = d.sm_target; // NVIDIA only: AMD reports omit it
  if (d.gfx) out["gfx"] = gfx_json(*d.gfx);
  return out;
}

// ---- reading: lenient about what is absent, strict about what is there ----------------------

template <typename T> T number(const json& o, const char* key, T fallback = T{}) {
  auto it = o.find(key);
  return it != o.end() && it->is_number() ? it->get<T>() : fallback;
}

template <typename T> std::optional<T> optional_number(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_number()) return std::nullopt;
  return it->get<T>();
}

bool flag(const json& o, const char* key, bool fallback = false) {
  auto it = o.find(key);
  return it != o.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

std::vector<std::string> strings(const json& o, const char* key) {
  std::vector<std::string> out;
  auto it = o.find(key);
  if (it == o.end() || !it->is_array()) return out;
  for (const json& s : *it)
    if (s.is_string()) out.push_back(s.get<std::string>());
  return out;
}

std::map<std::string, std::string> string_map(const json& o, const char* key) {
  std::map<std::string, std::string> out;
  auto it = o.find(key);
  if (it == o.end() || !it->is_object()) return out;
  for (auto e = it->begin(); e != it->end(); ++e)
    if (e->is_string()) out[e.key()] = e->get<std::string>();
  return out;
}

// The inverse of put_number: a null listed in "nonfinite_fields" is NaN (which non-finite value
// it was is not kept; every reader only asks whether it is finite).
std::optional<double> read_number(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end()) return std::nullopt;
  if (it->is_number()) return it->get<double>();
  if (it->is_null())
    for (const std::string& k : strings(o, "nonfinite_fields"))
      if (k == key) return std::numeric_limits<double>::quiet_NaN();
  return std::nullopt;
}

Metrics metrics_from_json(const json& j) {
  Metrics m;
  if (!j.is_object()) return m;
  m.max_abs_err = read_number(j, "max_abs_err");
  m.rel_l2_err = read_number(j, "rel_l2_err");
  m.frac_outside_tol = read_number(j, "frac_outside_tol");
  m.nan_count = number<int64_t>(j, "nan_count");
  m.inf_count = number<int64_t>(j, "inf_count");
  m.time_ms = read_number(j, "time_ms");
  m.time_min_ms = read_number(j, "time_min_ms");
  m.timed_runs = number<int>(j, "timed_runs");
  m.tflops = read_number(j, "tflops");
  return m;
}

GfxTruth gfx_from_json(const json& j) {
  GfxTruth g;
  g.physical = json_text(j, "physical");
  g.effective = json_text(j, "effective");
  g.override_env = json_text(j, "override_env");
  g.compiled_for = strings(j, "compiled_for");
  g.aotriton_images = strings(j, "aotriton_images");
  g.ck_sdpa = json_text(j, "ck_sdpa");
  g.source = json_text(j, "source");
  g.verdict = json_text(j, "verdict");
  g.detail = json_text(j, "detail");
  g.remedy = json_text(j, "remedy");
  return g;
}

Device device_from_json(const json& j) {
  Device d;
  d.index = number<int>(j, "index", -1);
  d.name = json_text(j, "name");
  d.gfx_target = json_text(j, "gfx_target");
  d.gfx_arch_name = json_text(j, "gfx_arch_name");
  d.sm_target = json_text(j, "sm_target");
  d.family = json_text(j, "family");
  d.marketing_names = strings(j, "marketing_names");
  d.matrix_instructions = json_text(j, "matrix_instructions");
  d.wave_size = optional_number<int>(j, "wave_size");
  d.compute_units = optional_number<int>(j, "compute_units");
  d.simd_count = optional_number<int>(j, "simd_count");
  d.vram_total_bytes = optional_number<int64_t>(j, "vram_total_bytes");
  d.vram_used_bytes = optional_number<int64_t>(j, "vram_used_bytes");
  d.lds_per_block_bytes = optional_number<int64_t>(j, "lds_per_block_bytes");
  d.lds_per_cu_bytes = optional_number<int64_t>(j, "lds_per_cu_bytes");
  d.pci_bdf = json_text(j, "pci_bdf");
  d.driver_version = json_text(j, "driver_version");
  d.vbios = json_text(j, "vbios");
  d.temperature_c = optional_number<double>(j, "temperature_c");
  d.power_w = optional_number<double>(j, "power_w");
  d.kfd_node = json_text(j, "kfd_node");
  d.render_node = json_text(j, "render_node");
  d.integrated = flag(j, "integrated");
  if (auto s = j.find("sources"); s != j.end() && s->is_object())
    for (auto field = s->begin(); field != s->end(); ++field) d.sources[field.key()] = string_map(*s, field.key().c_str());
  if (auto g = j.find("gfx"); g != j.end() && g->is_object()) d.gfx = gfx_from_json(*g);
  return d;
}

} // namespace

std::optional<Severity> severity_from_string(std::string_view s) {
  for (Severity v : {Severity::ok, Severity::warning, Severity::problem})
    if (to_string(v) == s) return v;
  return std::nullopt;
}

json to_json(const CaseResult& r) {
  json j{{"case_id", r.case_id},
         {"case", to_json(r.kase)},
         {"device", r.device},
         {"probe", std::string(to_string(r.probe))},
         {"variant", r.variant},
         {"mode", std::string(to_string(r.mode))},
         {"status", std::string(to_string(r.status))},
         {"reason", r.reason},
         {"metrics", metrics_json(r.metrics)},
         {"backend_chosen", r.backend_chosen},
         {"warnings", r.warnings},
         {"signatures", r.signatures},
         {"stderr_tail", r.stderr_tail},
         {"attempt", r.attempt},
         {"wall_ms", r.wall_ms}};
  json tol = json::object();
  put_number(tol, "atol", r.tolerance.atol);
  put_number(tol, "rtol", r.tolerance.rtol);
  j["tolerance"] = tol;
  if (!r.canary.empty()) j["canary"] = r.canary;
  if (r.forward_status || r.backward_status) {
    j["directions"] = json::object();
    if (r.forward_status) j["directions"]["forward"] = std::string(to_string(*r.forward_status));
    if (r.backward_status) j["directions"]["backward"] = std::string(to_string(*r.backward_status));
  }
  if (r.masked_rows) j["masked_rows"] = std::string(to_string(*r.masked_rows));
  if (r.calls > 0) j["calls"] = r.calls;
  if (r.differing_call > 0) j["differing_call"] = r.differing_call;
  if (r.cause != SkipCause::none) j["cause"] = std::string(to_string(r.cause));
  if (r.culprit) j["culprit"] = {{"variant", r.culprit->variant}, {"case", r.culprit->case_id}};
  if (r.process_end) {
    const ProcessEnd& e = *r.process_end;
    json pe{{"core_dumped", e.core_dumped}, {"killed_by_doctor", e.killed_by_doctor}};
    pe["exit_code"] = optional_value(e.exit_code);
    pe["signal"] = optional_value(e.signal);
    pe["signal_name"] = e.signal_name;
    j["process_end"] = pe;
  } else {
    j["process_end"] = nullptr;
  }
  return j;
}

std::string directions_problem(const json& directions) {
  if (!directions.is_object())
    return fmt::format("'directions' must be an object, got {}", directions.type_name());
  for (const auto& [key, value] : directions.items()) {
    if (key != "forward" && key != "backward")
      return fmt::format("'directions' has an unknown direction '{}' (forward, backward)",
                         escape_to_one_line(shortened(key)));
    if (!value.is_string() || !status_from_string(value.get<std::string>()))
      return fmt::format("'directions.{}' is not a status: {}", key,
                         escape_to_one_line(shortened(value.dump())));
  }
  return {};
}

namespace {

// The v1.7 "mode" of a result, worker or shrink; absent (a report written before it): eager.
std::string read_mode(const json& j, Mode& mode) {
  auto m = j.find("mode");
  if (m == j.end() || m->is_null()) return {};
  const auto parsed = m->is_string() ? mode_from_string(m->get<std::string>()) : std::nullopt;
  if (!parsed)
    return fmt::format("unknown mode {} (eager, compiled)", escape_to_one_line(shortened(m->dump())));
  mode = *parsed;
  return {};
}

// The v1.6 "cause" and "culprit" of a result; both absent in a report written before them.
std::string read_cause(const json& j, CaseResult& r) {
  if (auto c = j.find("cause"); c != j.end() && !c->is_null()) {
    const auto cause =
        c->is_string() ? skip_cause_from_string(c->get<std::string>()) : std::nullopt;
    if (!cause)
      return fmt::format("result {} has an unknown cause {}", r.case_id,
                         escape_to_one_line(shortened(c->dump())));
    r.cause = *cause;
  }
  if (auto c = j.find("culprit"); c != j.end() && !c->is_null()) {
    if (!c->is_object() || json_text(*c, "case").empty())
      return fmt::format("result {}: 'culprit' must be an object naming a case", r.case_id);
    r.culprit = Culprit{json_text(*c, "variant"), json_text(*c, "case")};
  }
  return {};
}

} // namespace

Expected<CaseResult> case_result_from_json(const json& j) {
  if (!j.is_object()) return make_error("a result must be a JSON object");
  CaseResult r;
  r.case_id = json_text(j, "case_id");
  auto kase = j.find("case");
  if (kase == j.end()) return make_error(fmt::format("result {} has no case", r.case_id));
  auto c = case_from_json(*kase);
  if (!c) return make_error(fmt::format("result {}: {}", r.case_id, c.error().message));
  r.kase = *c;
  // An id is its case's name, nothing else: it names files, cells and repro scripts.
  if (!r.case_id.empty() && r.case_id != r.kase.id())
    return make_error(fmt::format("result '{}' is not the id of its case ({})",
                                  escape_to_one_line(shortened(r.case_id)), r.kase.id()));
  if (r.case_id.empty()) r.case_id = r.kase.id();
  r.device = json_text(j, "device");
  const std::string probe = json_text(j, "probe");
  auto p = probe_from_string(probe);
  if (!p) return make_error(fmt::format("result {} has an unknown probe '{}'", r.case_id, probe));
  r.probe = *p;
  r.variant = json_text(j, "variant");
  if (auto problem = read_mode(j, r.mode); !problem.empty())
    return make_error(fmt::format("result {}: {}", r.case_id, problem));
  const std::string status = json_text(j, "status");
  auto s = status_from_string(status);
  if (!s) return make_error(fmt::format("result {} has an unknown status '{}'", r.case_id, status));
  r.status = *s;
  if (r.device.empty() || r.variant.empty())
    return make_error(fmt::format("result {} names no device or variant", r.case_id));
  r.reason = json_text(j, "reason");
  if (auto m = j.find("metrics"); m != j.end()) r.metrics = metrics_from_json(*m);
  if (auto t = j.find("tolerance"); t != j.end() && t->is_object()) {
    r.tolerance.atol = read_number(*t, "atol").value_or(0);
    r.tolerance.rtol = read_number(*t, "rtol").value_or(0);
  }
  r.backend_chosen = json_text(j, "backend_chosen");
  r.warnings = strings(j, "warnings");
  r.signatures = strings(j, "signatures");
  r.stderr_tail = json_text(j, "stderr_tail");
  r.attempt = number<int>(j, "attempt");
  r.wall_ms = number<double>(j, "wall_ms");
  r.canary = json_text(j, "canary");
  if (auto d = j.find("directions"); d != j.end() && !d->is_null()) {
    if (auto problem = directions_problem(*d); !problem.empty())
      return make_error(fmt::format("result {}: {}", r.case_id, problem));
    for (const auto& [key, value] : d->items())
      (key == "forward" ? r.forward_status : r.backward_status) =
          status_from_string(value.get<std::string>());
  }
  r.masked_rows = masked_row_semantics_from_string(json_text(j, "masked_rows"));
  r.calls = number<int>(j, "calls");
  r.differing_call = number<int>(j, "differing_call");
  if (r.calls < 0 || r.differing_call < 0 || (r.differing_call > 0 && r.differing_call > r.calls))
    return make_error(fmt::format("result {}: differing_call {} is not one of its {} calls",
                                  r.case_id, r.differing_call, r.calls));
  if (auto problem = read_cause(j, r); !problem.empty()) return make_error(problem);
  if (auto pe = j.find("process_end"); pe != j.end() && pe->is_object()) {
    ProcessEnd e;
    e.exit_code = optional_number<int>(*pe, "exit_code");
    e.signal = optional_number<int>(*pe, "signal");
    e.signal_name = json_text(*pe, "signal_name");
    e.core_dumped = flag(*pe, "core_dumped");
    e.killed_by_doctor = flag(*pe, "killed_by_doctor");
    r.process_end = e;
  }
  return r;
}

json to_json(const WorkerInfo& w) {
  json j{{"device", w.device},     {"probe", std::string(to_string(w.probe))},
         {"variant", w.variant},   {"versions", w.versions},
         {"facts", w.facts},       {"restarts", w.restarts},
         {"available", w.available}};
  if (w.mode != Mode::eager) j["mode"] = std::string(to_string(w.mode));
  return j;
}

Expected<WorkerInfo> worker_info_from_json(const json& j) {
  if (!j.is_object()) return make_error("a worker must be a JSON object");
  WorkerInfo w;
  w.device = json_text(j, "device");
  const std::string probe = json_text(j, "probe");
  auto p = probe_from_string(probe);
  if (!p) return make_error(fmt::format("worker has an unknown probe '{}'", probe));
  w.probe = *p;
  w.variant = json_text(j, "variant");
  if (auto problem = read_mode(j, w.mode); !problem.empty())
    return make_error("worker: " + problem);
  w.versions = string_map(j, "versions");
  w.facts = string_map(j, "facts");
  w.restarts = number<int>(j, "restarts");
  w.available = json_text(j, "available");
  return w;
}

json to_json(const Finding& f) {
  return {{"id", f.id},
          {"severity", std::string(to_string(f.severity))},
          {"message", f.message},
          {"remedy", f.remedy},
          {"device", f.device},
          {"case_ids", f.case_ids}};
}

Expected<Finding> finding_from_json(const json& j) {
  if (!j.is_object()) return make_error("a finding must be a JSON object");
  Finding f;
  f.id = json_text(j, "id");
  const std::string severity = json_text(j, "severity");
  auto s = severity_from_string(severity);
  if (f.id.empty() || !s)
    return make_error(fmt::format("finding '{}' has no id or an unknown severity '{}'", f.id, severity));
  f.severity = *s;
  f.message = json_text(j, "message");
  f.remedy = json_text(j, "remedy");
  f.device = json_text(j, "device");
  f.case_ids = strings(j, "case_ids");
  return f;
}

json to_json(const Shrink& s) {
  json conditions = json::array();
  for (const ShrinkCondition& w : s.conditions)
    conditions.push_back(json{{"axis", w.axis},
                              {"op", w.op},
                              {"value", w.value},
                              {"text", w.text},
                              {"settled", w.settled}});
  json tried = json::array();
  for (const auto& [id, status] : s.tried)
    tried.push_back(json{{"case_id", id}, {"status", std::string(to_string(status))}});
  json j{{"device", s.device},
         {"probe", std::string(to_string(s.probe))},
         {"variant", s.variant},
         {"status", std::string(to_string(s.status))},
         {"original_case", s.original_case},
         {"verdict", s.verdict},
         {"rule", s.rule},
         {"conditions", conditions},
         {"cases_tried", s.tried.size()},
         {"tried", tried},
         {"seconds", s.seconds},
         {"budget_exhausted", s.budget_exhausted}};
  if (s.mode != Mode::eager) j["mode"] = std::string(to_string(s.mode));
  if (s.minimal) j["minimal_case"] = json{{"id", s.minimal->id()}, {"case", to_json(*s.minimal)}};
  else j["minimal_case"] = nullptr;
  return j;
}

Expected<Shrink> shrink_from_json(const json& j) {
  if (!j.is_object()) return make_error("a shrink must be a JSON object");
  Shrink s;
  s.device = json_text(j, "device");
  s.variant = json_text(j, "variant");
  s.original_case = json_text(j, "original_case");
  auto p = probe_from_string(json_text(j, "probe"));
  auto st = status_from_string(json_text(j, "status"));
  if (s.device.empty() || s.variant.empty() || !p || !st)
    return make_error(fmt::format("shrink of '{}' names no device, variant, probe or status",
                                  s.original_case));
  s.probe = *p;
  s.status = *st;
  if (auto problem = read_mode(j, s.mode); !problem.empty())
    return make_error(fmt::format("shrink of '{}': {}", s.original_case, problem));
  s.verdict = json_text(j, "verdict");
  s.rule = json_text(j, "rule");
  if (auto c = j.find("conditions"); c != j.end() && c->is_array())
    for (const json& w : *c) {
      if (!w.is_object()) return make_error("a shrink condition must be a JSON object");
      s.conditions.push_back({json_text(w, "axis"), json_text(w, "op"), number<int64_t>(w, "value"),
                              json_text(w, "text"), flag(w, "settled", true)});
    }
  if (auto m = j.find("minimal_case"); m != j.end() && m->is_object()) {
    auto c = case_from_json(m->value("case", json()));
    if (!c) return make_error(fmt::format("shrink of '{}': {}", s.original_case, c.error().message));
    s.minimal = *c;
  }
  if (auto t = j.find("tried"); t != j.end() && t->is_array())
    for (const json& e : *t) {
      auto status = e.is_object() ? status_from_string(json_text(e, "status")) : std::nullopt;
      if (!status) return make_error(fmt::format("shrink of '{}': a tried case has no status",
                                                 s.original_case));
      s.tried.emplace_back(json_text(e, "case_id"), *status);
    }
  s.seconds = number<double>(j, "seconds");
  s.budget_exhausted = flag(j, "budget_exhausted");
  return s;
}

json to_json(const Recommendation& r) {
  json j{{"id", r.id},
         {"device", r.device},
         {"summary", r.summary},
         {"python", r.python},
         {"cpp", r.cpp},
         {"environment", r.environment},
         {"transformers", r.transformers},
         {"vllm", r.vllm},
         {"cost", r.cost},
         {"case_ids", r.case_ids}};
  if (!r.workload.empty()) j["workload"] = r.workload;
  if (r.verification) { // absent with --no-verify
    const Verification& v = *r.verification;
    j["verified"] = v.verified();
    j["verification"] = json{{"ran", v.ran},     {"passed", v.passed}, {"total", v.total},
                             {"seconds", v.seconds}, {"how", v.how},   {"note", v.note}};
    json rejected = json::array();
    for (const RejectedRecommendation& x : r.rejected)
      rejected.push_back(json{{"id", x.id}, {"reason", x.reason}});
    j["rejected"] = rejected;
  }
  return j;
}

Expected<Recommendation> recommendation_from_json(const json& j) {
  if (!j.is_object()) return make_error("a recommendation must be a JSON object");
  Recommendation r;
  r.id = json_text(j, "id");
  r.device = json_text(j, "device");
  if (r.id.empty() || r.device.empty())
    return make_error(fmt::format("recommendation '{}' names no id or device", r.id));
  r.summary = json_text(j, "summary");
  r.python = json_text(j, "python");
  r.cpp = json_text(j, "cpp");
  r.environment = json_text(j, "environment");
  r.transformers = json_text(j, "transformers");
  r.vllm = json_text(j, "vllm");
  r.cost = json_text(j, "cost");
  r.case_ids = strings(j, "case_ids");
  r.workload = json_text(j, "workload");
  if (auto v = j.find("verification"); v != j.end() && v->is_object()) {
    r.verification = Verification{flag(*v, "ran"),          number<int>(*v, "passed"),
                                  number<int>(*v, "total"),   number<double>(*v, "seconds"),
                                  json_text(*v, "how"),            json_text(*v, "note")};
    if (auto x = j.find("rejected"); x != j.end() && x->is_array())
      for (const json& e : *x)
        if (e.is_object()) r.rejected.push_back({json_text(e, "id"), json_text(e, "reason")});
  }
  return r;
}

json to_json(const DeviceInventory& inventory) {
  json devices = json::array();
  for (const Device& d : inventory.devices) devices.push_back(device_json(d));
  json findings = json::array();
  for (const Finding& f : inventory.findings) findings.push_back(to_json(f));
  return {{"gpu_found", !inventory.devices.empty()},
          {"no_gpu_reason", string_or_null(inventory.no_gpu_reason)},
          {"devices", devices},
          {"runtime", inventory.runtime},
          {"sources_status", inventory.sources_status},
          {"findings", findings}};
}

Expected<DeviceInventory> inventory_from_json(const json& j) {
  if (!j.is_object()) return make_error("an inventory must be a JSON object");
  DeviceInventory inv;
  if (auto devs = j.find("devices"); devs != j.end() && devs->is_array())
    for (const json& d : *devs)
      if (d.is_object()) inv.devices.push_back(device_from_json(d));
  inv.runtime = string_map(j, "runtime");
  inv.sources_status = string_map(j, "sources_status");
  inv.no_gpu_reason = json_text(j, "no_gpu_reason");
  if (auto fs = j.find("findings"); fs != j.end() && fs->is_array())
    for (const json& f : *fs) {
      auto finding = finding_from_json(f);
      if (!finding) return finding.error();
      inv.findings.push_back(std::move(*finding));
    }
  return inv;
}

json to_json(const Timings& t) {
  json j = json::object();
  put_number(j, "total_ms", t.total_ms);
  put_number(j, "enumerate_ms", t.enumerate_ms);
  put_number(j, "oracle_ms", t.oracle_ms);
  put_number(j, "probes_ms", t.probes_ms);
  put_number(j, "verify_ms", t.verify_ms);
  put_number(j, "report_ms", t.report_ms);
  return j;
}

Timings timings_from_json(const json& j) {
  Timings t;
  if (!j.is_object()) return t;
  t.total_ms = read_number(j, "total_ms").value_or(0);
  t.enumerate_ms = read_number(j, "enumerate_ms").value_or(0);
  t.oracle_ms = read_number(j, "oracle_ms").value_or(0);
  t.probes_ms = read_number(j, "probes_ms").value_or(0);
  t.verify_ms = read_number(j, "verify_ms").value_or(0);
  t.report_ms = read_number(j, "report_ms").value_or(0);
  return t;
}

} // namespace sdpa_doctor
