// One judge whichever probe measured: the same outputs measured by the Python probe
// (sdpa_probe/oracle.py, under the test's torch) and by the C++ workers' cases::measure_* give the
// same measurements, hence the same verdict and the same reason words from cases::judge. The
// fixtures cover every branch of a verdict: a mismatch, NaN and Inf, an all-zero output, fully
// masked rows under both semantics, a gradient's scaled atol, and dropout's properties.
#include "cases/cases.hpp"
#include "core/measure.hpp"
#include "support/run_binary.hpp"
#include "support/torch_probes.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace sdpa_doctor;

namespace {

constexpr float k_nan = std::numeric_limits<float>::quiet_NaN();
constexpr float k_inf = std::numeric_limits<float>::infinity();

struct TensorFixture {
  std::string name;
  std::vector<float> out;
  std::vector<double> ref;
  Tolerance tol{0.01, 0.01};
  cases::MaskedRows rows{};
  bool gradient = false;
};

struct DropoutFixture {
  std::string name;
  std::vector<float> first, same, other;
  std::vector<double> probs;
  double p = 0.25;
};

std::string py_number(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return fmt::format("{:.17g}", x);
}

template <typename T> std::string py_list(const std::vector<T>& v) {
  std::string out = "[";
  for (const T& x : v) out += py_number(double(x)) + ",";
  return out + "]";
}

std::vector<TensorFixture> tensor_fixtures() {
  std::vector<TensorFixture> f;
  { // finite where the oracle is NaN (torch < 2.5's masked rows), then a value off
    TensorFixture t{"masked-rows-nan", std::vector<float>(16, 0.5f), std::vector<double>(16, 0.5)};
    for (int i : {6, 7, 14, 15}) t.ref[size_t(i)] = std::nan("");
    t.out[6] = t.out[15] = k_nan;
    t.out[7] = t.out[14] = 0.0f;
    t.out[9] = 0.9f;
    t.rows = {8, 2};
    f.push_back(t);
  }
  { // NaN after a value off: each example is of its own kind
    TensorFixture t{"nan-after-mismatch", std::vector<float>(16, 0.5f), std::vector<double>(16, 0.5)};
    t.out[3] = 0.9f;
    t.out[10] = k_nan;
    f.push_back(t);
  }
  f.push_back({"all-zero", std::vector<float>(16, 0.0f), std::vector<double>(16, 0.5)});
  { // NaN only in the fully masked rows, where torch >= 2.5 returns 0
    TensorFixture t{"nan-in-masked-rows", std::vector<float>(16, 0.5f), std::vector<double>(16, 0.5)};
    for (int i : {6, 7, 14, 15}) t.ref[size_t(i)] = 0.0, t.out[size_t(i)] = 0.0f;
    t.out[6] = t.out[15] = k_nan;
    t.rows = {8, 2};
    f.push_back(t);
  }
  { // a gradient: atol per unit of its largest |oracle|
    TensorFixture t{"gradient-scale", {40.05f, -10.0f, 0.25f, 0.05f, 0.3f},
                    {40.0, -10.0, 0.25, 0.0, 0.1}};
    t.tol = {0.002, 0.002};
    t.gradient = true;
    f.push_back(t);
  }
  {
    TensorFixture t{"inf", std::vector<float>(8, -0.25f), std::vector<double>(8, -0.25)};
    t.out[2] = k_inf;
    t.out[5] = -k_inf;
    f.push_back(t);
  }
  { // within the tolerance everywhere
    TensorFixture t{"pass", {}, {}};
    for (int i = 0; i < 64; ++i) {
      t.ref.push_back(std::sin(0.37 * i) * 0.8);
      t.out.push_back(float(t.ref.back() + 1e-3 * std::cos(1.3 * i)));
    }
    f.push_back(t);
  }
  return f;
}

DropoutFixture healthy_dropout(std::string name, size_t n, double p) {
  DropoutFixture d{std::move(name), {}, {}, {}, {}, p};
  uint64_t state = 11;
  auto uniform = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return double(state >> 11) * 0x1.0p-53;
  };
  for (size_t i = 0; i < n; ++i) d.probs.push_back(0.002 + 0.02 * double(i % 17));
  for (std::vector<float>* out : {&d.first, &d.other})
    for (size_t i = 0; i < n; ++i)
      out->push_back(uniform() < p ? 0.0f : float(d.probs[i] / (1 - p)));
  d.same = d.first;
  return d;
}

std::vector<DropoutFixture> dropout_fixtures() {
  std::vector<DropoutFixture> f;
  f.push_back(healthy_dropout("healthy", 2000, 0.25));
  DropoutFixture broken = healthy_dropout("corrupted-not-reproducible", 2000, 0.25);
  broken.first[3] = 7.0f;
  broken.first[10] = 0.31f;
  broken.same[100] = 1.0f;
  f.push_back(broken);
  DropoutFixture nan = healthy_dropout("nan", 64, 0.5);
  nan.first[10] = k_nan;
  f.push_back(nan);
  DropoutFixture ignored = healthy_dropout("seed-ignored-drops-nothing", 2000, 0.25);
  for (size_t i = 0; i < ignored.first.size(); ++i)
    ignored.first[i] = float(ignored.probs[i] / (1 - ignored.p));
  ignored.same = ignored.other = ignored.first;
  f.push_back(ignored);
  return f;
}

// The Python probe's measurements of every fixture, one JSON object per line, in order.
std::vector<nlohmann::json> python_measurements(const std::vector<TensorFixture>& tensors,
                                                const std::vector<DropoutFixture>& dropouts) {
  std::string script = R"(
import json, torch
from sdpa_probe.oracle import measure, measure_dropout
from sdpa_probe.worker import finite_numbers
nan, inf = float("nan"), float("inf")
def f32(x): return torch.tensor(x, dtype=torch.float32)
def f64(x): return torch.tensor(x, dtype=torch.float64)
)";
  for (const TensorFixture& t : tensors)
    script += fmt::format(
        "print(json.dumps(finite_numbers({{'out': measure(torch, f32({}), f64({}), ({}, {}), {}, "
        "{})}})))\n",
        py_list(t.out), py_list(t.ref), py_number(t.tol.atol), py_number(t.tol.rtol),
        t.rows.lq > 0 ? fmt::format("({}, {})", t.rows.lq, t.rows.d) : "None",
        t.gradient ? "True" : "False");
  for (const DropoutFixture& d : dropouts)
    script += fmt::format("print(json.dumps(finite_numbers(measure_dropout(torch, f32({}), "
                          "f32({}), f32({}), f64({}), {}, (0.001, 0.001)))))\n",
                          py_list(d.first), py_list(d.same), py_list(d.other), py_list(d.probs),
                          py_number(d.p));
  // A file, not -c: the fixtures are past the kernel's limit on one argument.
  sdpa_test::TempDir dir;
  sdpa_test::write_file(dir.file("measure.py"), script);
  sdpa_test::RunOptions options;
  options.set_env = {{"PYTHONPATH", sdpa_test::source_path("src/workers/python")}};
  const auto r = sdpa_test::run_binary({sdpa_test::k_test_python, dir.file("measure.py")}, options);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<nlohmann::json> out;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Equal but for the last bits of a sum, which torch and a loop add up in other orders.
void expect_same(const TensorErrors& py, const TensorErrors& cc, const std::string& name) {
  TensorErrors a = py, b = cc;
  EXPECT_NEAR(a.rel_l2_err, b.rel_l2_err, 1e-12 * std::max(1.0, b.rel_l2_err)) << name;
  a.rel_l2_err = b.rel_l2_err = 0;
  EXPECT_EQ(a, b) << name << "\n  python: " << to_json(output_only(py)).dump()
                  << "\n  c++:    " << to_json(output_only(cc)).dump();
}

void expect_same_verdict(const Measured& py, const Measured& cc, const std::string& name) {
  const cases::Verdict a = cases::judge(py), b = cases::judge(cc);
  EXPECT_EQ(a.all.status, b.all.status) << name;
  EXPECT_EQ(a.all.reason, b.all.reason) << name;
}

TEST(MeasureCrossProbe, BothProbesMeasureAlikeAndGetTheSameVerdict) {
  if (!sdpa_test::python_has_torch()) GTEST_SKIP() << "no torch in " << sdpa_test::k_test_python;
  const auto tensors = tensor_fixtures();
  const auto dropouts = dropout_fixtures();
  const auto python = python_measurements(tensors, dropouts);
  ASSERT_EQ(python.size(), tensors.size() + dropouts.size());
  std::set<Status> seen;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorFixture& t = tensors[i];
    auto py = measured_from_json(python[i]);
    ASSERT_TRUE(py) << t.name << ": " << py.error().message;
    const Measured cc = output_only(cases::measure_tensor(t.out.data(), t.ref.data(),
                                                          t.out.size(), t.tol, t.rows, t.gradient));
    expect_same(*py->out, *cc.out, t.name);
    expect_same_verdict(*py, cc, t.name);
    seen.insert(cases::judge(cc).all.status);
  }
  for (size_t i = 0; i < dropouts.size(); ++i) {
    const DropoutFixture& d = dropouts[i];
    auto py = measured_from_json(python[tensors.size() + i]);
    ASSERT_TRUE(py) << d.name << ": " << py.error().message;
    const Measured cc = cases::measure_dropout({d.first.data(), d.same.data(), d.other.data()},
                                               d.probs.data(), d.probs.size(), d.p, {0.001, 0.001});
    expect_same(*py->out, *cc.out, d.name);
    EXPECT_EQ(py->dropout, cc.dropout) << d.name;
    expect_same_verdict(*py, cc, d.name);
    seen.insert(cases::judge(cc).all.status);
  }
  // The fixtures reach every verdict a measurement can give.
  EXPECT_EQ(seen, (std::set<Status>{Status::pass, Status::mismatch, Status::nonfinite}));
}

// The examples a reason gives are of the kind it counts, whichever probe measured.
TEST(MeasureCrossProbe, ReasonsGiveAnExampleOfTheKindTheyCount) {
  const auto t = tensor_fixtures();
  const auto judged = [&](size_t i) {
    return cases::judge_tensor(cases::measure_tensor(t[i].out.data(), t[i].ref.data(),
                                                     t[i].out.size(), t[i].tol, t[i].rows));
  };
  EXPECT_EQ(judged(0).status, Status::mismatch);
  EXPECT_NE(judged(0).reason.find("(first at index 9: got 0.9, expected 0.5)"), std::string::npos)
      << judged(0).reason;
  EXPECT_EQ(judged(1).reason, "1 NaN and 0 Inf of 16 output elements (first at index 10)");
  EXPECT_EQ(judged(2).reason.rfind(cases::k_all_zero_output, 0), 0u) << judged(2).reason;
  EXPECT_EQ(judged(3).reason, "2 NaN and 0 Inf of 16 output elements (first at index 6), all in "
                              "fully masked rows, where torch >= 2.5 returns 0");
}

// Every later call against the first: the Python probe's RepeatCompare and the C++ workers'
// RepeatComparer describe the same call in the same numbers, so the judge says the same words.
TEST(MeasureCrossProbe, BothProbesCompareLaterCallsAlike) {
  if (!sdpa_test::python_has_torch()) GTEST_SKIP() << "no torch in " << sdpa_test::k_test_python;
  struct Calls {
    std::string name;
    std::vector<std::vector<float>> outs, dqs; // dqs empty: a forward case
    bool bitwise = false;
  };
  const float ulp_up = std::nextafter(0.25f, 1.0f);
  const std::vector<Calls> sequences = {
      {"equal", {{0.5f, 0.25f}, {0.5f, 0.25f}, {0.5f, 0.25f}}, {}},
      {"ulp-then-nan", {{0.5f, 0.25f}, {0.5f, 0.25f}, {0.5f, ulp_up}, {k_nan, 0.25f}}, {}},
      {"nan-first", {{0.5f, 0.25f}, {k_nan, -k_inf}}, {}},
      {"gradient-within", {{0.5f}, {0.5f}}, {{1.0f, 2.0f}, {1.0f, 2.000001f}}},
      {"gradient-bitwise", {{0.5f}, {0.5f}}, {{1.0f, 2.0f}, {1.0f, 2.000001f}}, true},
      {"gradient-beyond", {{0.5f}, {0.5f}, {0.5f}}, {{1.0f, 2.0f}, {1.0f, 2.0f}, {1.0f, 2.5f}}},
  };
  std::string script = R"(
import json, torch
from sdpa_probe.oracle import RepeatCompare
nan, inf = float("nan"), float("inf")
def t(x): return torch.tensor(x, dtype=torch.float32)
)";
  for (const Calls& c : sequences) {
    const bool grads = !c.dqs.empty();
    auto grads_of = [&](size_t i) {
      return grads ? fmt::format("[t({}), t([3.0]), t([4.0])]", py_list(c.dqs[i])) : "None";
    };
    script += fmt::format("r = RepeatCompare(torch, (0.002, 0.002), {})\n",
                          c.bitwise ? "True" : "False");
    script += fmt::format("r.set_first(t({}), {})\n", py_list(c.outs[0]), grads_of(0));
    for (size_t i = 1; i < c.outs.size(); ++i)
      script += fmt::format("r.later(t({}), {})\n", py_list(c.outs[i]), grads_of(i));
    script += "print(json.dumps(r.stats))\n";
  }
  const auto r = sdpa_test::run_probe_snippet(script);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  for (const Calls& c : sequences) {
    std::string line;
    ASSERT_TRUE(std::getline(lines, line)) << c.name;
    Measured from_python;
    from_python.out = TensorErrors{};
    nlohmann::json j = to_json(from_python);
    j["repeats"] = nlohmann::json::parse(line);
    auto py = measured_from_json(j);
    ASSERT_TRUE(py) << c.name << ": " << py.error().message;
    cases::RepeatComparer cc({0.002, 0.002}, c.bitwise);
    const std::vector<float> dk{3.0f}, dv{4.0f}, none;
    const bool grads = !c.dqs.empty();
    cc.first(c.outs[0], grads ? c.dqs[0] : none, grads ? dk : none, grads ? dv : none);
    for (size_t i = 1; i < c.outs.size(); ++i)
      cc.later(c.outs[i], grads ? c.dqs[i] : none, grads ? dk : none, grads ? dv : none);
    EXPECT_EQ(*py->repeats, cc.stats()) << c.name << "\n  python: " << line;
    EXPECT_EQ(cases::judge_repeats(*py->repeats).reason, cases::judge_repeats(cc.stats()).reason)
        << c.name;
  }
}

} // namespace
