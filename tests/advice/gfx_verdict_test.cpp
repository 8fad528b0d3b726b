// The gfx verdict end to end over report models: torch's answers arrive as real `hello` protocol
// lines (decoded by isolate as the runner does), the verdict, its one finding, the known-issue
// match from the shipped data/known_issues.json, and the line the console and Markdown print.
#include "advice/advice.hpp"
#include "protocol/protocol.hpp"
#include "report/report.hpp"
#include "support/run_binary.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace sdpa_doctor;
using nlohmann::json;

namespace {

// What the Python worker wrote in its hello, as the runner turns it into WorkerInfo.
WorkerInfo worker_from_hello(const std::string& hello_line) {
  const json hello = json::parse(hello_line);
  WorkerInfo w;
  w.device = hello.at("device").get<std::string>();
  w.probe = hello.at("worker") == "python" ? Probe::python : Probe::torch;
  w.variant = hello.at("variant").get<std::string>();
  const protocol::Hello h = protocol::read_hello(hello);
  w.versions = h.versions;
  w.facts = h.facts;
  return w;
}

std::string hello(const std::string& arch_list, const std::string& images = "gfx942",
                  const std::string& ck = "no") {
  return json{{"v", 1},
              {"event", "hello"},
              {"worker", "python"},
              {"device", "cuda:0"},
              {"variant", "flash"},
              {"versions", {{"torch", "2.9.0+rocm6.4"}, {"python", "3.12.3"}}},
              {"facts", {{"arch_list", arch_list}, {"aotriton_images", images}, {"ck_sdpa", ck},
                         {"rocm_build", "true"}}}}
      .dump();
}

Device gpu(const std::string& gfx, const std::string& name) {
  Device d;
  d.index = 0;
  d.gfx_target = gfx;
  d.gfx_arch_name = gfx + ":sramecc-:xnack-";
  d.name = name;
  return d;
}

CaseResult cell(const std::string& variant, Status status, const std::string& reason,
                int64_t l = 64) {
  CaseResult r;
  r.kase.dtype = DType::f16;
  r.kase.lq = r.kase.lkv = l;
  r.case_id = r.kase.id();
  r.device = "cuda:0";
  r.probe = Probe::python;
  r.variant = variant;
  r.status = status;
  r.reason = reason;
  return r;
}

// Decide, then apply, as `check` does.
void settle(Report& r) { advice::apply_gfx_truth(advice::settle_gfx_truth(r), r); }

Report report_for(Device d, const std::string& hello_line) {
  Report r;
  r.targets = {"cuda:0"};
  r.inventory.devices.push_back(std::move(d));
  r.workers.push_back(worker_from_hello(hello_line));
  return r;
}

advice::KnownIssues shipped() {
  auto issues = advice::load_known_issues(sdpa_test::source_path("data/known_issues.json"));
  EXPECT_TRUE(issues) << issues.error().message;
  return issues ? *issues : advice::KnownIssues{};
}

// settle, then advise, as `check` does.
advice::AdviceResult settle_and_advise(Report& r) {
  settle(r);
  advice::AdviceResult a = advice::advise(r, shipped(), {});
  r.findings = a.findings;
  r.known_issues = a.known_issues;
  return a;
}

// One passing cell, then settle and advise: the verdict of the report's only device.
const GfxTruth& verdict_after_a_pass(Report& r, advice::AdviceResult& a) {
  r.results.push_back(cell("flash", Status::pass, ""));
  a = settle_and_advise(r);
  return *r.inventory.devices[0].gfx;
}

int count_id(const std::vector<Finding>& findings, const std::string& id) {
  int n = 0;
  for (const Finding& f : findings) n += f.id == id;
  return n;
}

TEST(GfxVerdict, Rdna4WithATorchBuiltForCdnaOnlyIsMissingWithOneFindingAndTheKnownIssue) {
  Report r = report_for(gpu("gfx1201", "AMD Radeon RX 9070 XT"), hello("gfx90a,gfx942"));
  const std::string hip = "torch.AcceleratorError: HIP error: invalid device function";
  for (const char* v : {"flash", "mem_efficient", "math", "default"}) {
    r.results.push_back(cell(v, Status::error, hip, 64));
    r.results.push_back(cell(v, Status::error, hip, 128));
  }
  const advice::AdviceResult a = settle_and_advise(r);
  const GfxTruth& g = *r.inventory.devices[0].gfx;
  EXPECT_EQ(g.verdict, "missing");
  EXPECT_EQ(g.physical, "gfx1201");
  EXPECT_EQ(g.effective, "gfx1201");
  EXPECT_EQ(g.compiled_for, (std::vector<std::string>{"gfx90a", "gfx942"}));
  EXPECT_NE(g.remedy.find("rocm6.4"), std::string::npos) << g.remedy;
  EXPECT_NE(g.remedy.find("torch[device-gfx120X]"), std::string::npos) << g.remedy;

  ASSERT_EQ(count_id(a.findings, "torch-not-built-for-arch"), 1);
  for (const Finding& f : a.findings) {
    if (f.id != "torch-not-built-for-arch") continue;
    EXPECT_EQ(f.device, "cuda:0");
    EXPECT_EQ(f.case_ids.size(), 2u); // the two shapes, named once for all four variants
    EXPECT_NE(f.message.find("python torch 2.9.0+rocm6.4"), std::string::npos) << f.message;
  }
  bool matched = false;
  for (const KnownIssueMatch& m : a.known_issues) matched |= m.issue_id == "torch-wheel-lacks-gfx-kernels";
  EXPECT_TRUE(matched);

  report::ConsoleOptions wide;
  wide.width = 400; // one line unwrapped, to compare it whole
  const std::string console = report::render_console(r, wide);
  EXPECT_NE(console.find("gfx: physical gfx1201 · effective gfx1201 · torch built for "
                         "gfx90a,gfx942 · AOTriton images gfx942 · CK SDPA no → missing: "),
            std::string::npos)
      << console;
  // Under the device's matrix header, not somewhere else.
  const size_t header = console.find("cuda:0 · AMD Radeon RX 9070 XT");
  ASSERT_NE(header, std::string::npos) << console;
  EXPECT_EQ(console.find("  gfx: physical", header), console.find('\n', header) + 1) << console;
  const std::string md = report::render_markdown(r);
  EXPECT_NE(md.find("\n\ngfx: physical gfx1201 · effective gfx1201"), std::string::npos) << md;
  const json doc = json::parse(report::render_json(r));
  EXPECT_EQ(doc["inventory"]["devices"][0]["gfx"]["verdict"], "missing");
  EXPECT_EQ(doc["inventory"]["devices"][0]["gfx"]["compiled_for"], json({"gfx90a", "gfx942"}));
}

TEST(GfxVerdict, Rx6700XtUnderHsaOverrideIsOverrideAndNamesTheRisk) {
  Device d = gpu("gfx1031", "AMD Radeon RX 6700 XT");
  d.sources["gfx_target"]["sysfs"] = "gfx1031";
  d.sources["gfx_target"]["effective"] = "gfx1030"; // what devices::merge_sources records
  Report r = report_for(d, hello("gfx900,gfx906,gfx908,gfx90a,gfx1030,gfx1100,gfx942"));
  r.environment["HSA_OVERRIDE_GFX_VERSION"] = "10.3.0";
  advice::AdviceResult a;
  const GfxTruth& g = verdict_after_a_pass(r, a);
  EXPECT_EQ(g.verdict, "override");
  EXPECT_EQ(g.physical, "gfx1031");
  EXPECT_EQ(g.effective, "gfx1030");
  EXPECT_EQ(g.override_env, "HSA_OVERRIDE_GFX_VERSION=10.3.0");
  EXPECT_NE(g.detail.find("wrong results or GPU memory faults"), std::string::npos) << g.detail;
  EXPECT_EQ(count_id(a.findings, "torch-not-built-for-arch"), 0);
  EXPECT_NE(report::render_console(r).find(
                "physical gfx1031 · effective gfx1030 (HSA_OVERRIDE_GFX_VERSION=10.3.0)"),
            std::string::npos);
}

TEST(GfxVerdict, Mi300xWithGfx942InTheListIsNativeIgnoringFeatureSuffixes) {
  Device d = gpu("", "AMD Instinct MI300X");
  d.gfx_arch_name = "gfx942:sramecc+:xnack-";
  Report r = report_for(d, hello("gfx90a:sramecc+:xnack-,gfx942:sramecc+:xnack-", "gfx942", "yes"));
  advice::AdviceResult a;
  const GfxTruth& g = verdict_after_a_pass(r, a);
  EXPECT_EQ(g.verdict, "native");
  EXPECT_EQ(g.physical, "gfx942");
  EXPECT_EQ(g.ck_sdpa, "yes");
  EXPECT_TRUE(g.remedy.empty());
  EXPECT_EQ(count_id(a.findings, "torch-not-built-for-arch"), 0);
  for (const KnownIssueMatch& m : a.known_issues) EXPECT_NE(m.issue_id, "torch-wheel-lacks-gfx-kernels");
}

TEST(GfxVerdict, Rdna2WithoutAnOverrideIsMissingAndSuggestsTheSameFamilyOverride) {
  Report r = report_for(gpu("gfx1031", "AMD Radeon RX 6700 XT"), hello("gfx1030,gfx1100"));
  settle(r);
  const GfxTruth& g = *r.inventory.devices[0].gfx;
  EXPECT_EQ(g.verdict, "missing");
  EXPECT_NE(g.remedy.find("HSA_OVERRIDE_GFX_VERSION=10.3.0"), std::string::npos) << g.remedy;
}

TEST(GfxVerdict, AnOverrideThatNamesAnArchTorchLacksIsMissing) {
  Device d = gpu("gfx1100", "AMD Radeon RX 7900 XTX");
  d.sources["gfx_target"]["effective"] = "gfx1030";
  Report r = report_for(d, hello("gfx1100,gfx942"));
  r.environment["HSA_OVERRIDE_GFX_VERSION"] = "10.3.0";
  settle(r);
  EXPECT_EQ(r.inventory.devices[0].gfx->verdict, "missing");
  EXPECT_EQ(r.inventory.devices[0].gfx->remedy, "unset HSA_OVERRIDE_GFX_VERSION");
}

TEST(GfxVerdict, NoTorchAnswerIsUnknown) {
  // A CPU-only torch answers n/a; a LibTorch worker alone has no arch list; no worker at all.
  Report cpu_only = report_for(gpu("gfx1100", "x"), hello("n/a", "n/a", "n/a"));
  settle(cpu_only);
  EXPECT_EQ(cpu_only.inventory.devices[0].gfx->verdict, "unknown");
  EXPECT_NE(cpu_only.inventory.devices[0].gfx->detail.find("CPU-only"), std::string::npos);

  Report none;
  none.inventory.devices.push_back(gpu("gfx1100", "x"));
  settle(none);
  EXPECT_EQ(none.inventory.devices[0].gfx->verdict, "unknown");
  EXPECT_EQ(json::parse(report::render_json(none))["inventory"]["devices"][0]["gfx"]["verdict"],
            "unknown");
}

TEST(GfxVerdict, SettlingDecidesWithoutChangingTheReport) {
  // A GPU torch alone saw (no gfx target) is not an AMD GPU: it gets no verdict.
  Device nvidia;
  nvidia.index = 1;
  nvidia.sources["seen_by"]["torch"] = "yes";
  Report r = report_for(gpu("gfx1100", "AMD Radeon RX 7900 XTX"), hello("gfx1100"));
  r.inventory.devices.push_back(nvidia);
  const advice::GfxSettlement s = advice::settle_gfx_truth(r);
  EXPECT_FALSE(r.inventory.devices[0].gfx);
  ASSERT_EQ(s.verdicts.size(), 1u);
  EXPECT_EQ(s.verdicts[0].first, 0u);
  EXPECT_EQ(s.verdicts[0].second.verdict, "native");
  advice::apply_gfx_truth(s, r);
  ASSERT_TRUE(r.inventory.devices[0].gfx);
  EXPECT_EQ(r.inventory.devices[0].gfx->verdict, "native");
  EXPECT_FALSE(r.inventory.devices[1].gfx);
}

TEST(GfxVerdict, TheRemedyNamesTheShippedRocmWheelIndex) {
  // The index comes from data/rocm_wheels.json, compiled in.
  Report r = report_for(gpu("gfx942", "AMD Instinct MI300X"), hello("gfx1100"));
  settle(r);
  EXPECT_EQ(r.inventory.devices[0].gfx->remedy,
            "every ROCm wheel of download.pytorch.org carries gfx942 (pip install torch "
            "--index-url https://download.pytorch.org/whl/rocm6.4)");
}

TEST(GfxVerdict, BaseNamesDropFeatureSuffixes) {
  EXPECT_EQ(advice::base_gfx("gfx942:sramecc+:xnack-"), "gfx942");
  EXPECT_EQ(advice::base_gfx(" gfx1201"), "gfx1201");
  EXPECT_EQ(advice::base_gfx("sm_90"), "");
  EXPECT_EQ(advice::base_gfx("n/a"), "");
}

TEST(DevicePoisoned, AFailedCanaryNamesItsCaseOnce) {
  Report r;
  r.targets = {"cpu"};
  CaseResult ok = cell("math", Status::pass, "");
  ok.device = "cpu";
  ok.canary = "ok";
  CaseResult bad = cell("math", Status::error, "poisoned the device: canary failed after it: x", 128);
  bad.device = "cpu";
  bad.canary = "failed: x";
  r.results = {ok, bad};
  std::vector<Finding> f;
  advice::poisoned_findings(r, f);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].id, "device-poisoned");
  EXPECT_EQ(f[0].case_ids, std::vector<std::string>{bad.case_id});
  EXPECT_EQ(f[0].message.rfind("cpu python math: " + bad.case_id + " poisoned the device", 0), 0u)
      << f[0].message;
}

// Every case one worker (device, probe, variant) poisoned the device with is one finding, so its
// remedy is said once; another worker's cases are another finding.
TEST(DevicePoisoned, OneWorkersPoisoningCasesAreOneFinding) {
  Report r;
  std::vector<std::string> flash_ids;
  for (int64_t l : {16, 32, 48, 64, 80}) {
    CaseResult x = cell("flash", Status::error, "poisoned the device", l);
    x.canary = fmt::format("failed: HIP error: invalid argument ({})", l);
    r.results.push_back(x);
    flash_ids.push_back(x.case_id);
  }
  CaseResult ok = cell("flash", Status::pass, "", 96);
  ok.canary = "ok";
  CaseResult libtorch = cell("flash", Status::error, "poisoned the device", 128);
  libtorch.probe = Probe::torch;
  libtorch.canary = "failed: x";
  CaseResult other_gpu = libtorch;
  other_gpu.device = "cuda:1";
  r.results.insert(r.results.begin() + 2, {ok, libtorch, other_gpu});
  std::vector<Finding> f;
  advice::poisoned_findings(r, f);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].case_ids, flash_ids);
  EXPECT_EQ(f[0].device, "cuda:0");
  // Three cases by name, the rest counted; the first's canary.
  EXPECT_EQ(f[0].message.rfind(fmt::format("cuda:0 python flash: 5 cases poisoned the device ({}, "
                                           "{}, {} and 2 more)",
                                           flash_ids[0], flash_ids[1], flash_ids[2]),
                               0),
            0u)
      << f[0].message;
  EXPECT_NE(f[0].message.find("invalid argument (16)"), std::string::npos) << f[0].message;
  EXPECT_NE(f[0].remedy.find("treat flash as broken for these cases"), std::string::npos);
  EXPECT_EQ(f[1].case_ids, std::vector<std::string>{libtorch.case_id});
  EXPECT_EQ(f[1].message.rfind("cuda:0 libtorch flash: ", 0), 0u) << f[1].message;
  EXPECT_EQ(f[2].device, "cuda:1");
}

// Two HIP runtimes in one worker's own process: one finding per set of files, naming each worker
// that saw it; one runtime, or none (a CPU torch), says nothing.
TEST(TwoHipRuntimes, EachSetOfFilesIsSaidOnceNamingItsWorkers) {
  const auto worker = [](Probe probe, const std::string& variant, const std::string& count,
                         const std::string& files) {
    WorkerInfo w;
    w.device = "cuda:0";
    w.probe = probe;
    w.variant = variant;
    if (!count.empty()) {
      w.facts["hip_runtime_count"] = count;
      w.facts["hip_runtimes"] = files;
    }
    return w;
  };
  const std::string two = "/opt/rocm-6.4.0/lib/libamdhip64.so.6, /venv/torch/lib/libamdhip64.so";
  Report r;
  r.workers = {worker(Probe::torch, "flash", "2", two), worker(Probe::torch, "math", "2", two),
               worker(Probe::reference, "ref-math", "1", "/venv/torch/lib/libamdhip64.so"),
               worker(Probe::python, "flash", "", "")};
  std::vector<Finding> f;
  advice::mapped_runtime_findings(r, f);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].id, "two-hip-runtimes");
  EXPECT_EQ(f[0].severity, Severity::problem);
  EXPECT_NE(f[0].message.find("libtorch flash on cuda:0; libtorch math on cuda:0"),
            std::string::npos)
      << f[0].message;
  EXPECT_NE(f[0].message.find(two), std::string::npos);
  EXPECT_NE(f[0].remedy.find("pytorch/pytorch#141014"), std::string::npos);

  r.workers.resize(2);
  r.workers[1].facts["hip_runtimes"] = "/a/libamdhip64.so.6, /b/libamdhip64.so.7";
  f.clear();
  advice::mapped_runtime_findings(r, f);
  EXPECT_EQ(f.size(), 2u) << "two different sets of files are two causes";
}

} // namespace

// An NVIDIA GPU's verdict: the same words, from sm_XY and compute_XY entries (a cubin runs on its
// major version's later minors, PTX on any newer GPU).
TEST(SmVerdict, CubinsPtxAndMissingArchs) {
  Device d;
  d.sm_target = "sm_86";
  const auto verdict = [&](const std::string& list) {
    return advice::sm_truth(d, {{"arch_list", list}}, "python torch 2.14.1+cu130");
  };
  EXPECT_EQ(verdict("sm_80,sm_86,sm_90").verdict, "native");
  EXPECT_EQ(verdict("sm_80,sm_86,sm_90").detail, "this torch carries sm_86 kernels");
  const GfxTruth compatible = verdict("sm_75,sm_80,sm_90");
  EXPECT_EQ(compatible.verdict, "native");
  EXPECT_NE(compatible.detail.find("sm_80 kernels run on sm_86"), std::string::npos);
  const GfxTruth ptx = verdict("sm_90,compute_75");
  EXPECT_EQ(ptx.verdict, "native");
  EXPECT_NE(ptx.detail.find("compute_75 PTX"), std::string::npos) << ptx.detail;
  // sm_87 is a later minor than sm_86: its cubin does not run here; sm_90 is another major.
  const GfxTruth missing = verdict("sm_87,sm_90,compute_90");
  EXPECT_EQ(missing.verdict, "missing");
  EXPECT_NE(missing.remedy.find("TORCH_CUDA_ARCH_LIST=8.6"), std::string::npos) << missing.remedy;
  EXPECT_EQ(missing.compiled_for, (std::vector<std::string>{"sm_87", "sm_90", "compute_90"}));
  EXPECT_EQ(verdict("n/a").verdict, "unknown");
  EXPECT_NE(verdict("n/a").detail.find("CPU-only"), std::string::npos);
  EXPECT_EQ(advice::sm_truth(d, {}, "").verdict, "unknown");
  // Blackwell's three-digit sm: 10.0 is not 12.0.
  d.sm_target = "sm_120";
  EXPECT_EQ(verdict("sm_100").verdict, "missing");
  EXPECT_EQ(verdict("sm_100,sm_120").verdict, "native");
}

// settle_gfx_truth gives an NVIDIA GPU of the inventory its verdict from the python worker, and a
// missing one becomes the torch-not-built-for-arch finding.
TEST(SmVerdict, SettledForNvidiaGpusOfTheInventory) {
  Report report;
  Device d;
  d.index = 0;
  d.name = "NVIDIA GeForce RTX 5090";
  d.sm_target = "sm_120";
  report.inventory.devices.push_back(d);
  WorkerInfo w;
  w.device = "cuda:0";
  w.probe = Probe::python;
  w.versions = {{"torch", "2.6.0+cu124"}};
  w.facts = {{"arch_list", "sm_50,sm_60,sm_70,sm_75,sm_80,sm_86,sm_90"}};
  report.workers.push_back(w);
  advice::apply_gfx_truth(advice::settle_gfx_truth(report), report);
  ASSERT_TRUE(report.inventory.devices[0].gfx);
  EXPECT_EQ(report.inventory.devices[0].gfx->verdict, "missing");
  EXPECT_EQ(report.inventory.devices[0].gfx->source, "python torch 2.6.0+cu124");
  std::vector<Finding> findings;
  advice::gfx_findings(report, findings);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].id, "torch-not-built-for-arch");
  EXPECT_NE(findings[0].message.find("cuda:0 (sm_120)"), std::string::npos) << findings[0].message;
}
