// The plan is pure data from the request and the inventory: no process, no file.
#include "run/launch.hpp"
#include "run/run.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>

using namespace sdpa_doctor;
using namespace sdpa_doctor::run;

namespace {

Case spec(const char* text) { return *parse_case_spec(text); }

DeviceInventory two_gpus() {
  DeviceInventory inv;
  for (int i : {0, 1}) {
    Device d;
    d.index = i;
    d.gfx_target = "gfx1201";
    inv.devices.push_back(d);
  }
  Device hidden; // HIP did not see it: no cuda:N target for it
  hidden.gfx_target = "gfx1036";
  inv.devices.push_back(hidden);
  return inv;
}

std::vector<std::string> variant_names(const Plan& plan, const std::string& target, Probe probe) {
  std::vector<std::string> out;
  for (const PlannedRun& r : plan.runs)
    if (r.target == target && r.probe == probe) out.push_back(r.variant.name());
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

} // namespace

TEST(Plan, TargetsAreTheCpuAndEveryGpuHipSees) {
  const Plan plan = make_plan({{spec("h=1,l=8,d=16")}, {Probe::torch}, {}, {}}, two_gpus());
  EXPECT_EQ(plan.targets, (std::vector<std::string>{"cpu", "cuda:0", "cuda:1"}));
}

TEST(Plan, RunsAreGroupedByTargetInOrder) {
  const Plan plan =
      make_plan({{spec("h=1,l=8,d=16")}, {Probe::torch, Probe::reference}, {}, {}}, two_gpus());
  std::vector<std::string> order;
  for (const PlannedRun& r : plan.runs)
    if (order.empty() || order.back() != r.target) order.push_back(r.target);
  EXPECT_EQ(order, plan.targets) << "a target's runs must be contiguous";
}

TEST(Plan, GpuOnlyVariantsAreOnlyPlannedOnGpus) {
  const Plan plan = make_plan({{spec("h=1,l=8,d=16")}, {Probe::torch}, {}, {}}, two_gpus());
  const auto cpu = variant_names(plan, "cpu", Probe::torch);
  const auto gpu = variant_names(plan, "cuda:0", Probe::torch);
  EXPECT_TRUE(contains(cpu, "math"));
  EXPECT_TRUE(contains(cpu, "flash"));
  EXPECT_FALSE(contains(cpu, "flash[ck]"));
  EXPECT_TRUE(contains(gpu, "flash[ck]"));
  EXPECT_TRUE(contains(gpu, "flash[aotriton,experimental]"));
  for (const auto& v : cpu) EXPECT_TRUE(contains(gpu, v)) << v;
}

// ROCm's flash switches (ck, aotriton) select nothing on an NVIDIA GPU: not planned there.
TEST(Plan, RocmOnlyVariantsAreNotPlannedOnNvidiaGpus) {
  DeviceInventory inv = two_gpus();
  inv.devices[1].gfx_target.clear();
  inv.devices[1].sm_target = "sm_90";
  const Plan plan = make_plan({{spec("h=1,l=8,d=16")}, {Probe::torch}, {}, {}}, inv);
  const auto amd = variant_names(plan, "cuda:0", Probe::torch);
  const auto nvidia = variant_names(plan, "cuda:1", Probe::torch);
  EXPECT_TRUE(contains(amd, "flash[ck]"));
  EXPECT_TRUE(contains(nvidia, "flash"));
  EXPECT_TRUE(contains(nvidia, "cudnn"));
  for (const auto& v : nvidia) EXPECT_EQ(v.find('['), std::string::npos) << v;
}

TEST(Plan, CasesAreUniqueByIdKeepingTheFirst) {
  Case a = spec("dtype=fp16,h=2,l=8,d=16");
  Case b = spec("dtype=bf16,h=2,l=8,d=16");
  const Plan plan = make_plan({{a, b, a, b, a}, {Probe::reference}, {}, {"cpu"}}, {});
  ASSERT_EQ(plan.cases.size(), 2u);
  EXPECT_EQ(plan.cases[0].id(), a.id());
  EXPECT_EQ(plan.cases[1].id(), b.id());
}

TEST(Plan, FilterByBackendSelectsEveryVariantOfIt) {
  const Plan plan =
      make_plan({{spec("h=1,l=8,d=16")}, {Probe::torch}, {"flash"}, {"cuda:0"}}, two_gpus());
  ASSERT_FALSE(plan.runs.empty());
  for (const PlannedRun& r : plan.runs) EXPECT_EQ(r.variant.backend, "flash") << r.variant.name();
  EXPECT_GT(plan.runs.size(), 1u) << "flash, flash[ck], flash[aotriton], ...";
}

TEST(Plan, FilterByExactNameSelectsOne) {
  const Plan plan = make_plan(
      {{spec("h=1,l=8,d=16")}, {Probe::torch, Probe::reference}, {"flash[ck]"}, {}}, two_gpus());
  ASSERT_EQ(plan.runs.size(), 2u); // cuda:0 and cuda:1, libtorch only
  for (const PlannedRun& r : plan.runs) {
    EXPECT_EQ(r.variant.name(), "flash[ck]");
    EXPECT_EQ(r.probe, Probe::torch);
  }
}

TEST(Plan, ExplicitTargetsReplaceTheInventory) {
  const Plan plan = make_plan({{spec("h=1,l=8,d=16")}, {Probe::reference}, {}, {"cpu"}}, two_gpus());
  EXPECT_EQ(plan.targets, std::vector<std::string>{"cpu"});
  for (const PlannedRun& r : plan.runs) EXPECT_EQ(r.target, "cpu");
  EXPECT_EQ(variant_names(plan, "cpu", Probe::reference),
            (std::vector<std::string>{"ref-math", "ref-flash"}));
}

TEST(Plan, NoProbesPlansNoRuns) {
  const Plan plan = make_plan({{spec("h=1,l=8,d=16")}, {}, {}, {}}, two_gpus());
  EXPECT_TRUE(plan.runs.empty());
  EXPECT_EQ(plan.cases.size(), 1u);
}

TEST(Plan, UnknownVariantsAreNamedInOrder) {
  EXPECT_TRUE(unknown_variants({"flash", "math", "flash[ck]", "ref-flash"}).empty());
  EXPECT_EQ(unknown_variants({"flahs", "math", "fast"}),
            (std::vector<std::string>{"flahs", "fast"}));
  const auto known = known_variant_names();
  EXPECT_TRUE(contains(known, "mem_efficient[aotriton,experimental]"));
  EXPECT_TRUE(contains(known, "ref-math"));
}

TEST(Verify, EnvironmentLinesAreThePrintedPairsAsTheyStand) {
  using P = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(environment_lines(""), P{});
  EXPECT_EQ(environment_lines("TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1\nTORCH_ROCM_FA_PREFER_CK=0"),
            (P{{"TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL", "1"}, {"TORCH_ROCM_FA_PREFER_CK", "0"}}));
  // A value keeps its own '=', blank lines and lines without a name are not variables.
  EXPECT_EQ(environment_lines("\nA=b=c\n=x\nno-equals\n"), (P{{"A", "b=c"}}));
}

TEST(Verify, AVerifyRunSurvivesTheJournalsPlanAndStartsWithOnlyItsEnvironment) {
  Plan plan;
  plan.targets = {"cpu"};
  plan.cases = {parse_case_spec("dtype=fp32,b=1,h=2,l=8,d=16").value()};
  plan.runs = {{"cpu", Probe::python, Variant{"default", {}},
                VerifyRun{"disable-flash", "/tmp/snippet.py", {{"TORCH_ROCM_FA_PREFER_CK", "0"}}},
                Mode::eager, {}}};
  auto back = plan_from_json(to_json(plan));
  ASSERT_TRUE(back) << back.error().message;
  ASSERT_EQ(back->runs.size(), 1u);
  ASSERT_TRUE(back->runs[0].verify.has_value());
  EXPECT_EQ(back->runs[0].verify->id, "disable-flash");
  EXPECT_EQ(back->runs[0].verify->snippet, "/tmp/snippet.py");
  EXPECT_EQ(back->runs[0].verify->environment, plan.runs[0].verify->environment);

  ExecuteOptions exec;
  exec.python = "/usr/bin/python3";
  const WorkerLaunch launch = worker_launch(plan.runs[0], exec, "/tmp/server.sock");
  ASSERT_TRUE(launch.command) << launch.why_not;
  const auto& argv = launch.command->argv;
  const auto at = std::find(argv.begin(), argv.end(), "--verify");
  ASSERT_NE(at, argv.end());
  EXPECT_EQ(*(at + 1), "disable-flash");
  EXPECT_EQ(*(at + 2), "--snippet");
  EXPECT_EQ(*(at + 3), "/tmp/snippet.py");
  // Exactly the recommendation's environment; no start-up server (its interpreter lacks it).
  EXPECT_EQ(launch.command->env, plan.runs[0].verify->environment);

  // Without an environment to set, a fork of the server is as fresh as a new interpreter.
  PlannedRun bare = plan.runs[0];
  bare.verify->environment.clear();
  const WorkerLaunch forked = worker_launch(bare, exec, "/tmp/server.sock");
  ASSERT_TRUE(forked.command) << forked.why_not;
  EXPECT_EQ(forked.command->env,
            (std::vector<std::pair<std::string, std::string>>{
                {"SDPA_DOCTOR_PROBE_SERVER", "/tmp/server.sock"}}));
}

// Where the diagnosed torch keeps its libraries reaches the reference worker, which looks there
// first for the GPU runtime and compiler; the torch workers need no telling.
TEST(Launch, TheReferenceWorkerLooksWhereTheTorchUnderTestKeepsItsLibraries) {
  ::unsetenv("SDPA_DOCTOR_TORCH_LIB_DIRS");
  sdpa_test::TempDir dir; // a worker folder with a stand-in reference worker
  const std::string worker = dir.file("sdpa-doctor-ref-worker");
  sdpa_test::write_file(worker, "#!/bin/sh\n");
  std::filesystem::permissions(worker, std::filesystem::perms::owner_all);
  ExecuteOptions exec;
  exec.worker_dir = dir.path();
  const PlannedRun reference{"cuda:0", Probe::reference, Variant{"ref-flash", {}}, std::nullopt,
                             Mode::eager, {}};
  const auto env_of = [&](const PlannedRun& run) {
    const WorkerLaunch launch = worker_launch(run, exec);
    EXPECT_TRUE(launch.command) << launch.why_not;
    std::map<std::string, std::string> env;
    if (launch.command) env.insert(launch.command->env.begin(), launch.command->env.end());
    return env;
  };
  EXPECT_EQ(env_of(reference).count("SDPA_DOCTOR_TORCH_LIB_DIRS"), 0u);
  exec.torch_lib_dirs = {"/venv/lib/python3.12/site-packages/torch/lib", "/opt/sdk/lib"};
  EXPECT_EQ(env_of(reference)["SDPA_DOCTOR_TORCH_LIB_DIRS"],
            "/venv/lib/python3.12/site-packages/torch/lib:/opt/sdk/lib");
  // The user's own setting is not overridden: it reaches the worker from the environment.
  ::setenv("SDPA_DOCTOR_TORCH_LIB_DIRS", "/mine", 1);
  EXPECT_EQ(env_of(reference).count("SDPA_DOCTOR_TORCH_LIB_DIRS"), 0u);
  ::unsetenv("SDPA_DOCTOR_TORCH_LIB_DIRS");
}

// Compiled cells: the python probe's variants that run on the target, over the compile family
// only; never for libtorch or the reference kernels; filtered by mode; kept in the journal's plan.
TEST(Plan, CompiledCellsArePlannedForThePythonProbeOverTheCompileFamilyOnly) {
  const Case a = spec("h=1,l=8,d=16"), b = spec("h=1,l=8,d=16,causal");
  const PlanRequest request{{a, b}, {Probe::torch, Probe::python, Probe::reference}, {}, {"cpu"}};
  ModeRequest modes{{}, {b.id()}};
  const Plan plan = make_plan(request, {}, modes);
  std::vector<std::string> compiled;
  for (const PlannedRun& r : plan.runs)
    if (r.mode == Mode::compiled) {
      EXPECT_EQ(r.probe, Probe::python);
      EXPECT_EQ(r.case_ids, std::vector<std::string>{b.id()});
      EXPECT_TRUE(r.takes(b));
      EXPECT_FALSE(r.takes(a));
      compiled.push_back(r.variant.name());
    } else {
      EXPECT_TRUE(r.takes(a) && r.takes(b));
    }
  // No kernel on a CPU for mem_efficient and cudnn: no rows of `unsupported` noise.
  EXPECT_EQ(compiled, (std::vector<std::string>{"math", "flash", "default"}));
  auto back = plan_from_json(to_json(plan));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(to_json(*back), to_json(plan));

  modes.modes = {Mode::compiled};
  for (const PlannedRun& r : make_plan(request, {}, modes).runs) EXPECT_EQ(r.mode, Mode::compiled);
  modes.modes = {Mode::eager};
  for (const PlannedRun& r : make_plan(request, {}, modes).runs) EXPECT_EQ(r.mode, Mode::eager);
  const Plan eager_only = make_plan(request, {}); // no compile family named: eager cells only
  EXPECT_TRUE(std::none_of(eager_only.runs.begin(), eager_only.runs.end(),
                           [](const PlannedRun& r) { return r.mode == Mode::compiled; }));
  // A compiled cell is another cell than the eager one of the same case.
  EXPECT_NE(cell_key("cpu", Probe::python, "flash", Mode::compiled, b.id()),
            cell_key("cpu", Probe::python, "flash", Mode::eager, b.id()));
}
