#include "advice/advice.hpp"

#include <gtest/gtest.h>

#include <algorithm>

using namespace sdpa_doctor;
using namespace sdpa_doctor::advice;

namespace {

Case make(DType d, int64_t l) {
  Case c;
  c.dtype = d;
  c.lq = c.lkv = l;
  return c;
}

struct Builder {
  Report report;
  explicit Builder(std::string device = "cuda:0", std::string torch = "2.9.0") {
    report.targets = {device};
    report.versions["torch"] = std::move(torch);
    Device d;
    d.index = 0;
    d.gfx_target = "gfx1201";
    report.inventory.devices.push_back(d);
  }
  Builder& add(const std::string& variant, const Case& c, Status s, double ms = 1.0,
               Probe probe = Probe::torch) {
    CaseResult r;
    r.kase = c;
    r.case_id = c.id();
    r.device = report.targets[0];
    r.variant = variant;
    r.probe = probe;
    r.status = s;
    if (s == Status::pass) r.metrics.time_ms = ms;
    report.results.push_back(r);
    return *this;
  }
  // The same status for every case of the standard four.
  Builder& all(const std::string& variant, Status s, double ms = 1.0) {
    for (const Case& c : cases()) add(variant, c, s, ms);
    return *this;
  }
  static std::vector<Case> cases() {
    return {make(DType::f16, 128), make(DType::f16, 256), make(DType::bf16, 128),
            make(DType::bf16, 256)};
  }
};

const Recommendation* rec_for(const AdviceResult& a, const std::string& device) {
  for (const Recommendation& r : a.recommendations) {
    if (r.device == device) return &r;
  }
  return nullptr;
}

bool has_finding(const AdviceResult& a, const std::string& id) {
  for (const Finding& f : a.findings) {
    if (f.id == id) return true;
  }
  return false;
}

} // namespace

TEST(Recommend, KeepsDefaultsWhenFlashPassesEverything) {
  Builder b;
  b.all("flash", Status::pass, 1).all("mem_efficient", Status::pass, 1.2).all("math", Status::pass, 5);
  const AdviceResult a = advise(b.report, {}, {});
  const Recommendation* r = rec_for(a, "cuda:0");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->id, "keep-defaults");
  EXPECT_NE(r->summary.find("default dispatch (flash"), std::string::npos);
  EXPECT_EQ(r->case_ids.size(), 4u);
  EXPECT_TRUE(r->cost.empty()) << "math served nothing: " << r->cost;
}

// What an interrupt left unmeasured is counted by its cause; a report written before results
// carried one, by its reason's words.
TEST(Recommend, AnInterruptedRunCountsItsUnmeasuredCellsByTheirCause) {
  Builder b;
  b.all("math", Status::skipped);
  b.report.interrupted = true;
  std::vector<CaseResult>& cells = b.report.results;
  cells[0].cause = cells[1].cause = SkipCause::interrupted;
  cells[2].reason = "interrupted";
  cells[3].cause = SkipCause::memory_guard;
  cells[3].reason = "interrupted"; // words a recorded cause outranks
  const AdviceResult a = advise(b.report, {}, {});
  const auto said = std::find_if(a.findings.begin(), a.findings.end(), [](const Finding& f) {
    return f.id == "no-working-configuration";
  });
  ASSERT_NE(said, a.findings.end());
  EXPECT_NE(said->remedy.find("interrupted: 3 of 4 cells not measured"), std::string::npos)
      << said->remedy;
}

TEST(Recommend, PrefersFlashOverFasterMath) {
  // Probe shapes are small; math being quicker there must not win over a passing fused kernel.
  Builder b;
  b.all("flash", Status::pass, 3).all("math", Status::pass, 1);
  const AdviceResult a = advise(b.report, {}, {});
  ASSERT_NE(rec_for(a, "cuda:0"), nullptr);
  // mem-efficient is never reached: flash serves every case, so the defaults are proven.
  EXPECT_EQ(rec_for(a, "cuda:0")->id, "keep-defaults");
}

TEST(Recommend, AvoidsAVariantThatCrashed) {
  Builder b;
  b.all("flash", Status::pass).all("mem_efficient", Status::pass).all("math", Status::pass);
  b.report.results[1].status = Status::crash; // flash, second case
  const AdviceResult a = advise(b.report, {}, {});
  const Recommendation* r = rec_for(a, "cuda:0");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->id, "disable-flash");
  EXPECT_NE(r->python.find("torch.backends.cuda.enable_flash_sdp(False)"), std::string::npos);
  EXPECT_NE(r->python.find("sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])"),
            std::string::npos);
  EXPECT_NE(r->cpp.find("at::globalContext().setSDPUseFlash(false);"), std::string::npos);
  EXPECT_NE(r->cpp.find("setSDPUseOverrideable(false)"), std::string::npos);
  EXPECT_TRUE(has_finding(a, "variant-crash"));
}

TEST(Recommend, CkCrashLeadsToAotritonWithItsLibraryCall) {
  Builder b;
  b.all("flash[ck]", Status::pass).all("flash[aotriton]", Status::pass).all("math", Status::pass);
  b.report.results[0].status = Status::crash;
  AdviceResult a = advise(b.report, {}, {});
  ASSERT_NE(rec_for(a, "cuda:0"), nullptr);
  EXPECT_EQ(rec_for(a, "cuda:0")->id, "prefer-aotriton");
  EXPECT_NE(rec_for(a, "cuda:0")->python.find("preferred_rocm_fa_library(\"aotriton\")"),
            std::string::npos);
  EXPECT_EQ(rec_for(a, "cuda:0")->environment, "TORCH_ROCM_FA_PREFER_CK=0");
  EXPECT_TRUE(has_finding(a, "disable-ck-flash"));

  // torch 2.6 has no preferred_rocm_fa_library: never emit it there.
  b.report.versions["torch"] = "2.6.0";
  a = advise(b.report, {}, {});
  ASSERT_NE(rec_for(a, "cuda:0"), nullptr);
  EXPECT_EQ(rec_for(a, "cuda:0")->python.find("preferred_rocm_fa_library"), std::string::npos);
}

TEST(Recommend, CkEnvironmentOnlyWhenCkWasProven) {
  Builder b;
  b.all("flash[ck]", Status::pass, 0.5).all("flash", Status::pass, 1).all("math", Status::pass, 4);
  AdviceResult a = advise(b.report, {}, {});
  ASSERT_NE(rec_for(a, "cuda:0"), nullptr);
  EXPECT_EQ(rec_for(a, "cuda:0")->id, "prefer-ck");
  EXPECT_EQ(rec_for(a, "cuda:0")->environment, "TORCH_ROCM_FA_PREFER_CK=1");
  b.report.results[2].status = Status::mismatch;
  a = advise(b.report, {}, {});
  ASSERT_NE(rec_for(a, "cuda:0"), nullptr);
  EXPECT_EQ(rec_for(a, "cuda:0")->environment.find("PREFER_CK=1"), std::string::npos);
}

TEST(Recommend, NeverRecommendsAnUnmeasuredConfiguration) {
  // flash passed fp16 but never ran bf16: only math, measured on everything, may be recommended.
  Builder b;
  for (const Case& c : Builder::cases()) {
    if (c.dtype == DType::f16) b.add("flash", c, Status::pass);
  }
  b.all("math", Status::pass, 2);
  AdviceOptions o;
  o.target = parse_case_spec("b=1,h=32,l=8192,d=128").value();
  const AdviceResult a = advise(b.report, {}, o);
  const Recommendation* r = rec_for(a, "cuda:0");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->id, "use-math-only");
  EXPECT_NE(r->cost.find("16 GiB for b=1,h=32,l=8192,d=128"), std::string::npos) << r->cost;

  // Restricting to the dtypes the user needs makes flash eligible.
  o.dtypes = {DType::f16};
  const AdviceResult f16 = advise(b.report, {}, o);
  ASSERT_NE(rec_for(f16, "cuda:0"), nullptr);
  EXPECT_EQ(rec_for(f16, "cuda:0")->id, "keep-defaults");
}

TEST(Recommend, NothingWhenNothingPassesEverywhere) {
  Builder b;
  b.all("flash", Status::unsupported).all("math", Status::pass);
  b.report.results.back().status = Status::nonfinite;
  const AdviceResult a = advise(b.report, {}, {});
  EXPECT_EQ(rec_for(a, "cuda:0"), nullptr);
  EXPECT_TRUE(has_finding(a, "no-working-configuration"));
}

TEST(Recommend, SkippedCasesAreNotMeasured) {
  Builder b;
  b.all("flash", Status::pass).all("math", Status::pass);
  b.report.results[3].status = Status::skipped;
  const AdviceResult a = advise(b.report, {}, {});
  ASSERT_NE(rec_for(a, "cuda:0"), nullptr);
  EXPECT_EQ(rec_for(a, "cuda:0")->id, "use-math-only");
  EXPECT_TRUE(has_finding(a, "cases-skipped"));
}

TEST(Recommend, RefusalFallsThroughToTheNextBackend) {
  // flash refuses bf16 cleanly and math passes it: flash-then-math is proven, with a cost note.
  Builder b;
  for (const Case& c : Builder::cases())
    b.add("flash", c, c.dtype == DType::bf16 ? Status::unsupported : Status::pass, 1);
  b.all("math", Status::pass, 4);
  const AdviceResult a = advise(b.report, {}, {});
  ASSERT_NE(rec_for(a, "cuda:0"), nullptr);
  EXPECT_EQ(rec_for(a, "cuda:0")->id, "disable-mem-efficient");
  EXPECT_NE(rec_for(a, "cuda:0")->cost.find("math serves 2 of 4 cases (bf16)"), std::string::npos)
      << rec_for(a, "cuda:0")->cost;
}

TEST(Recommend, ExperimentalGateIsProvenAndNamed) {
  Builder b;
  b.all("flash", Status::unsupported).all("flash[experimental]", Status::pass).all("math", Status::pass);
  const AdviceResult a = advise(b.report, {}, {});
  ASSERT_NE(rec_for(a, "cuda:0"), nullptr);
  EXPECT_EQ(rec_for(a, "cuda:0")->id, "enable-aotriton-experimental");
  EXPECT_EQ(rec_for(a, "cuda:0")->environment, "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1");
  EXPECT_TRUE(has_finding(a, "enable-aotriton-experimental"));
}

TEST(Recommend, AFailureInEitherProbeDisqualifies) {
  Builder b;
  b.all("flash", Status::pass).all("math", Status::pass);
  b.add("flash", Builder::cases()[0], Status::mismatch, 1, Probe::python);
  const AdviceResult a = advise(b.report, {}, {});
  ASSERT_NE(rec_for(a, "cuda:0"), nullptr);
  EXPECT_EQ(rec_for(a, "cuda:0")->id, "use-math-only");
}

TEST(Recommend, AProbeThatNeverStartedMeasuredNothing) {
  // The python probe passes everything; the libtorch worker is not built in, so its "unsupported"
  // cells are no backend's refusal and must not hide the python probe's proof.
  Builder b;
  for (const std::string variant : {"flash", "math"}) {
    for (const Case& c : Builder::cases()) {
      b.add(variant, c, Status::pass, 1, Probe::python);
      b.add(variant, c, Status::unsupported, 1, Probe::torch);
    }
    WorkerInfo w;
    w.device = "cuda:0";
    w.probe = Probe::torch;
    w.variant = variant;
    w.available = "the libtorch worker is not built in";
    b.report.workers.push_back(w);
  }
  const AdviceResult a = advise(b.report, {}, {});
  ASSERT_NE(rec_for(a, "cuda:0"), nullptr);
  EXPECT_EQ(rec_for(a, "cuda:0")->id, "keep-defaults");

  // The same cells from a worker that did start are refusals: nothing serves the C++ path then.
  b.report.workers.clear();
  const AdviceResult refused = advise(b.report, {}, {});
  EXPECT_EQ(rec_for(refused, "cuda:0"), nullptr);
  EXPECT_TRUE(has_finding(refused, "no-working-configuration"));
}

TEST(Recommend, ACaseOneProbeSkippedStandsOnTheOtherProbesMeasurement) {
  Builder b;
  b.all("flash", Status::pass).all("math", Status::pass);
  for (const Case& c : Builder::cases()) b.add("flash", c, Status::skipped, 1, Probe::python);
  const AdviceResult a = advise(b.report, {}, {});
  ASSERT_NE(rec_for(a, "cuda:0"), nullptr);
  EXPECT_EQ(rec_for(a, "cuda:0")->id, "keep-defaults");
}

TEST(Recommend, ReferencePassingWhereTorchCrashesBlamesTheBackend) {
  Builder b;
  b.all("flash", Status::crash).all("math", Status::pass);
  for (const Case& c : Builder::cases()) b.add("ref-flash", c, Status::pass, 1, Probe::reference);
  const AdviceResult a = advise(b.report, {}, {});
  EXPECT_TRUE(has_finding(a, "backend-fault-not-device"));
  EXPECT_EQ(rec_for(a, "cuda:0")->id, "use-math-only");
}

// Our kernel source not compiling for the card is our defect: the finding says so, not "check the
// device", and torch's backends are not blamed.
TEST(Findings, OurKernelNotCompilingIsTheDoctorsDefect) {
  Builder b;
  b.all("flash", Status::pass).all("math", Status::pass);
  for (const Case& c : Builder::cases()) {
    b.add("ref-flash", c, Status::error, 1, Probe::reference);
    b.report.results.back().reason = std::string(k_reference_compile_failure) +
                                     " for gfx1201 (hipRTC 7.1): attention_gpu.cu:9:1: error: x";
  }
  const AdviceResult a = advise(b.report, {}, {});
  const Finding* ours = nullptr;
  for (const Finding& f : a.findings)
    if (f.id == "variant-error") ours = &f;
  ASSERT_NE(ours, nullptr);
  EXPECT_NE(ours->message.find("ref-flash (reference) raised an error on cuda:0 in 4 of 4 cases: "
                               "our reference kernel did not compile for gfx1201"),
            std::string::npos)
      << ours->message;
  EXPECT_NE(ours->remedy.find("sdpa-doctor's own kernel source"), std::string::npos)
      << ours->remedy;
  EXPECT_EQ(ours->remedy.find("check the device"), std::string::npos) << ours->remedy;
  EXPECT_EQ(rec_for(a, "cuda:0")->id, "keep-defaults");

  for (CaseResult& r : b.report.results)
    if (r.probe == Probe::reference) r.reason = "hipModuleLaunchKernel: hipErrorLaunchFailure";
  for (const Finding& f : advise(b.report, {}, {}).findings) {
    if (f.id == "variant-error") {
      EXPECT_NE(f.remedy.find("check the device and driver"), std::string::npos) << f.remedy;
    }
  }
}

TEST(FailOn, SaysWhichResultsFail) {
  Builder b;
  b.all("flash", Status::pass).all("math", Status::unsupported);
  EXPECT_FALSE(any_failing(b.report.results));
  b.report.results[0].status = Status::crash;
  EXPECT_TRUE(any_failing(b.report.results));
  EXPECT_FALSE(any_failing(b.report.results, parse_fail_on("mismatch,nonfinite").value()));
  EXPECT_TRUE(any_failing(b.report.results, parse_fail_on("crash").value()));
  EXPECT_FALSE(any_failing(b.report.results, parse_fail_on("none").value()));
  b.report.results[0].status = Status::unsupported;
  EXPECT_FALSE(any_failing(b.report.results));
  EXPECT_TRUE(any_failing(b.report.results, parse_fail_on("default,unsupported").value()));
}

TEST(ExitCode, ParsesFailOnLists) {
  EXPECT_EQ(parse_fail_on("all").value(), default_fail_on());
  EXPECT_EQ(default_fail_on(), (std::set<Status>{Status::mismatch, Status::nonfinite, Status::error,
                                                 Status::crash, Status::timeout}));
  EXPECT_EQ(parse_fail_on(" crash , timeout ").value(),
            (std::set<Status>{Status::crash, Status::timeout}));
  auto bad = parse_fail_on("crash,boom");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("'boom'"), std::string::npos);
  EXPECT_FALSE(parse_fail_on(""));
}

TEST(Recommend, OffersTheNextProvenConfigurationsInRankOrderEachOnce) {
  Builder b;
  b.all("default", Status::pass, 1)
      .all("flash", Status::pass, 1)
      .all("mem_efficient", Status::pass, 1.2)
      .all("math", Status::pass, 5);
  const AdviceResult a = advise(b.report, {}, {});
  ASSERT_EQ(a.recommendations.size(), 1u);
  EXPECT_EQ(a.recommendations[0].id, "keep-defaults");
  // The `default` variant and the flash, mem-efficient, math chain are the same advice: once.
  std::vector<std::string> ids;
  for (const Recommendation& r : a.alternatives) {
    EXPECT_EQ(r.device, "cuda:0");
    EXPECT_FALSE(r.python.empty());
    ids.push_back(r.id);
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"disable-mem-efficient", "disable-flash"}));
  EXPECT_LE(a.alternatives.size(), k_max_alternatives);
}

TEST(Recommend, OffersNoAlternativeWhereOnlyOneConfigurationIsProven) {
  Builder b;
  b.all("flash", Status::crash).all("mem_efficient", Status::crash).all("math", Status::pass, 5);
  const AdviceResult a = advise(b.report, {}, {});
  ASSERT_EQ(a.recommendations.size(), 1u);
  EXPECT_EQ(a.recommendations[0].id, "use-math-only");
  EXPECT_TRUE(a.alternatives.empty());
}

TEST(Recommend, KeepDefaultsSaysWhatTheDispatcherChoseWhereItWasMeasured) {
  // Newer torch on some GPUs tries cuDNN first: the summary names what ran, not a fixed order.
  Builder b;
  const std::vector<Case> cases = Builder::cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    b.add("default", cases[i], Status::pass);
    b.report.results.back().backend_chosen = i < 3 ? "cudnn" : "mem_efficient";
  }
  b.all("flash", Status::pass).all("mem_efficient", Status::pass).all("math", Status::pass, 5);
  const AdviceResult a = advise(b.report, {}, {});
  const Recommendation* r = rec_for(a, "cuda:0");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->id, "keep-defaults");
  EXPECT_NE(r->summary.find("default dispatch (it chose cudnn for 3 cases, mem_efficient for 1 "
                            "case)"),
            std::string::npos)
      << r->summary;
}

TEST(Findings, ARuleFindingCountsTheCasesItNames) {
  Builder b;
  for (const Case& c : Builder::cases()) {
    b.add("default", c, Status::pass);
    b.report.results.back().backend_chosen = "math";
  }
  const AdviceResult a = advise(b.report, {}, {});
  bool found = false;
  for (const Finding& f : a.findings) {
    if (f.id != "default-falls-back-to-math") continue;
    found = true;
    EXPECT_EQ(f.case_ids.size(), 4u);
    EXPECT_NE(f.message.find("chose math for 4 cases"), std::string::npos) << f.message;
  }
  EXPECT_TRUE(found);
}
