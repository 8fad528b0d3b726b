#include "core/measure.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <string>

namespace sdpa_doctor {

namespace {

nlohmann::json number(double x) { return std::isfinite(x) ? nlohmann::json(x) : nullptr; }

nlohmann::json tensor_json(const TensorErrors& t) {
  return {{"n", t.n},
          {"atol", number(t.tolerance.atol)},
          {"rtol", number(t.tolerance.rtol)},
          {"max_abs_err", number(t.max_abs_err)},
          {"rel_l2_err", number(t.rel_l2_err)},
          {"outside", t.outside},
          {"first_mismatch", t.first_mismatch},
          {"mismatch_got", number(t.mismatch_got)},
          {"mismatch_expected", number(t.mismatch_expected)},
          {"nan_count", t.nan_count},
          {"inf_count", t.inf_count},
          {"first_nonfinite", t.first_nonfinite},
          {"nonfinite_in_masked_rows", t.nonfinite_in_masked_rows},
          {"expected_nan", t.expected_nan},
          {"finite_where_nan", t.finite_where_nan},
          {"all_zero", t.all_zero},
          {"oracle_all_zero", t.oracle_all_zero}};
}

// Reads the fields of one object, each error naming the field by its path ("dq.outside").
class FieldReader {
public:
  FieldReader(const nlohmann::json& j, std::string path) : m_j(j), m_path(std::move(path)) {}

  void count(const char* key, int64_t& into, int64_t min = 0) {
    auto it = m_j.find(key);
    if (it == m_j.end() || !it->is_number_integer() || it->get<int64_t>() < min)
      return fail(key, min < 0 ? "an integer >= -1" : "a count");
    into = it->get<int64_t>();
  }
  void real(const char* key, double& into) { // null: not finite (written so)
    auto it = m_j.find(key);
    if (it != m_j.end() && it->is_null()) into = std::numeric_limits<double>::quiet_NaN();
    else if (it != m_j.end() && it->is_number()) into = it->get<double>();
    else fail(key, "a number or null");
  }
  void text(const char* key, std::string& into) {
    auto it = m_j.find(key);
    if (it == m_j.end() || !it->is_string()) return fail(key, "a string");
    into = it->get<std::string>();
  }
  void flag(const char* key, bool& into) {
    auto it = m_j.find(key);
    if (it == m_j.end() || !it->is_boolean()) return fail(key, "true or false");
    into = it->get<bool>();
  }
  const std::string& error() const { return m_error; }

private:
  void fail(const char* key, const char* what) {
    if (m_error.empty()) m_error = fmt::format("measured.{}.{} must be {}", m_path, key, what);
  }
  const nlohmann::json& m_j;
  std::string m_path;
  std::string m_error;
};

Expected<TensorErrors> tensor_from_json(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object()) return make_error(fmt::format("measured.{} must be an object", path));
  TensorErrors t;
  FieldReader r(j, path);
  r.count("n", t.n);
  r.real("atol", t.tolerance.atol);
  r.real("rtol", t.tolerance.rtol);
  r.real("max_abs_err", t.max_abs_err);
  r.real("rel_l2_err", t.rel_l2_err);
  r.count("outside", t.outside);
  r.count("first_mismatch", t.first_mismatch, -1);
  r.real("mismatch_got", t.mismatch_got);
  r.real("mismatch_expected", t.mismatch_expected);
  r.count("nan_count", t.nan_count);
  r.count("inf_count", t.inf_count);
  r.count("first_nonfinite", t.first_nonfinite, -1);
  r.count("nonfinite_in_masked_rows", t.nonfinite_in_masked_rows);
  r.count("expected_nan", t.expected_nan);
  r.count("finite_where_nan", t.finite_where_nan);
  r.flag("all_zero", t.all_zero);
  r.flag("oracle_all_zero", t.oracle_all_zero);
  if (!r.error().empty()) return make_error(r.error());
  // An index must point into the tensor: a reason quotes it.
  if (t.first_mismatch >= t.n || t.first_nonfinite >= t.n || t.outside > t.n)
    return make_error(fmt::format("measured.{} counts or indexes past its {} elements", path, t.n));
  return t;
}

Expected<DropoutStats> dropout_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return make_error("measured.dropout must be an object");
  DropoutStats d;
  FieldReader r(j, "dropout");
  r.real("p", d.p);
  r.count("counted", d.counted);
  r.count("dropped", d.dropped);
  r.count("differ_same_seed", d.differ_same_seed);
  r.count("differ_other_seed", d.differ_other_seed);
  if (!r.error().empty()) return make_error(r.error());
  if (!(d.p > 0 && d.p < 1)) return make_error("measured.dropout.p must be in (0, 1)");
  return d;
}

Expected<RepeatStats> repeats_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return make_error("measured.repeats must be an object");
  RepeatStats r;
  int64_t calls = 0, differing_call = 0;
  FieldReader f(j, "repeats");
  f.count("calls", calls, 1);
  f.count("differing_call", differing_call);
  f.text("tensor", r.tensor);
  f.count("differing", r.differing);
  f.real("max_abs_delta", r.max_abs_delta);
  f.count("nan_count", r.nan_count);
  f.count("inf_count", r.inf_count);
  if (!f.error().empty()) return make_error(f.error());
  if (calls > 1'000'000 || differing_call > calls || differing_call == 1)
    return make_error(fmt::format("measured.repeats: call {} of {} cannot differ from call 1",
                                  differing_call, calls));
  if (differing_call > 0 && r.tensor != "out" && r.tensor != "dq" && r.tensor != "dk" &&
      r.tensor != "dv")
    return make_error("measured.repeats.tensor must be out, dq, dk or dv");
  r.calls = int(calls);
  r.differing_call = int(differing_call);
  return r;
}

} // namespace

nlohmann::json to_json(const Measured& m) {
  nlohmann::json j = nlohmann::json::object();
  if (m.out) j["out"] = tensor_json(*m.out);
  if (m.dropout)
    j["dropout"] = {{"p", number(m.dropout->p)},
                    {"counted", m.dropout->counted},
                    {"dropped", m.dropout->dropped},
                    {"differ_same_seed", m.dropout->differ_same_seed},
                    {"differ_other_seed", m.dropout->differ_other_seed}};
  if (m.dq) j["dq"] = tensor_json(*m.dq);
  if (m.dk) j["dk"] = tensor_json(*m.dk);
  if (m.dv) j["dv"] = tensor_json(*m.dv);
  if (m.repeats)
    j["repeats"] = {{"calls", m.repeats->calls},
                    {"differing_call", m.repeats->differing_call},
                    {"tensor", m.repeats->tensor},
                    {"differing", m.repeats->differing},
                    {"max_abs_delta", number(m.repeats->max_abs_delta)},
                    {"nan_count", m.repeats->nan_count},
                    {"inf_count", m.repeats->inf_count}};
  return j;
}

Expected<Measured> measured_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return make_error("measured must be an object");
  Measured m;
  for (const auto& [key, slot] : {std::pair{"out", &m.out}, std::pair{"dq", &m.dq},
                                  std::pair{"dk", &m.dk}, std::pair{"dv", &m.dv}}) {
    if (!j.contains(key)) continue;
    auto t = tensor_from_json(j.at(key), key);
    if (!t) return t.error();
    *slot = *t;
  }
  if (j.contains("dropout")) {
    auto d = dropout_from_json(j.at("dropout"));
    if (!d) return d.error();
    m.dropout = *d;
  }
  if (j.contains("repeats")) {
    auto r = repeats_from_json(j.at("repeats"));
    if (!r) return r.error();
    m.repeats = *r;
  }
  if (!m.out) return make_error("measured has no \"out\"");
  if (m.dropout && (m.dq || m.dk || m.dv))
    return make_error("measured has dropout statistics and gradients: a dropout case has no backward");
  if (bool(m.dq) != bool(m.dk) || bool(m.dk) != bool(m.dv))
    return make_error("measured has some gradients of dq, dk and dv but not all");
  return m;
}

} // namespace sdpa_doctor
