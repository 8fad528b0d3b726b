// The check pipeline's pure parts: which fact decides the exit code, the request parsed once and
// kept in the journal, and the journal header read back in both formats.
#include "check/exit_code.hpp"
#include "check/journal_header.hpp"
#include "check/request.hpp"
#include "check/steps.hpp"
#include "cases/cases.hpp"
#include "core/status.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <fstream>

using namespace sdpa_doctor;
using namespace sdpa_doctor::check;
using nlohmann::json;

namespace {

TEST(ExitCode, EachFactAloneGivesItsCode) {
  EXPECT_EQ(exit_code_for({}), exit_code::ok);
  EXPECT_EQ(exit_code_for({.failed_cells = true}), exit_code::failures);
  EXPECT_EQ(exit_code_for({.missing_required_gpu = true}), exit_code::no_gpu);
  EXPECT_EQ(exit_code_for({.interrupt_signal = SIGINT}), exit_code::interrupted_int);
  EXPECT_EQ(exit_code_for({.interrupt_signal = SIGTERM}), exit_code::interrupted_term);
  EXPECT_EQ(exit_code_for({.interrupt_signal = SIGHUP}), exit_code::interrupted_hup);
  EXPECT_EQ(exit_code_for({.named_python_unusable = true}), exit_code::usage);
  EXPECT_EQ(exit_code_for({.run_dir_unwritable = true}), exit_code::internal);
  EXPECT_EQ(exit_code_for({.report_unwritten = true}), exit_code::internal);
}

TEST(ExitCode, TheWeightierFactWins) {
  // No GPU where one was required says more than the CPU cells that failed.
  EXPECT_EQ(exit_code_for({.failed_cells = true, .missing_required_gpu = true}), exit_code::no_gpu);
  // A --python that cannot run the probe is the user's input, whatever the cells said.
  EXPECT_EQ(exit_code_for({.failed_cells = true, .missing_required_gpu = true,
                           .named_python_unusable = true}),
            exit_code::usage);
  // An interrupt says the run is unfinished: it outranks what it left unmeasured.
  EXPECT_EQ(exit_code_for({.failed_cells = true, .interrupt_signal = SIGTERM,
                           .named_python_unusable = true, .run_dir_unwritable = true}),
            exit_code::interrupted_term);
  // A report that was not written outranks everything: what was measured was not delivered.
  EXPECT_EQ(exit_code_for({.interrupt_signal = SIGINT, .report_unwritten = true}),
            exit_code::internal);
}

CheckOptions some_flags() {
  CheckOptions o;
  o.case_specs = {"dtype=bf16,b=1,h=4,l=64,d=64,causal", "dtype=fp32,b=2,h=2,l=16,d=32"};
  o.probes = {"reference,libtorch"};
  o.variants = {"math"};
  o.fail_on = "crash,timeout";
  o.tolerance = "bf16=0.5:0.25";
  o.target = "b=1,h=32,l=8192,d=128";
  o.shrink_budget = "7,9s";
  o.case_timeout_s = 1.5;
  o.no_oracle_cache = true;
  return o;
}

TEST(Request, FlagsAreTypedOnce) {
  const CheckRequest r = parse_request(some_flags());
  ASSERT_EQ(r.cases.size(), 2u);
  EXPECT_EQ(r.suite, "custom");
  EXPECT_EQ(r.probes, (std::vector<Probe>{Probe::reference, Probe::torch}));
  EXPECT_EQ(r.fail_on, (std::set<Status>{Status::crash, Status::timeout}));
  EXPECT_EQ(r.tolerances.bf16.atol, 0.5);
  EXPECT_EQ(r.tolerances.bf16.rtol, 0.25);
  ASSERT_TRUE(r.advice_target.has_value());
  EXPECT_EQ(r.advice_target->lq, 8192);
  ASSERT_TRUE(r.shrink.has_value());
  EXPECT_EQ(r.shrink->cases, 7);
  EXPECT_EQ(r.case_timeout, Millis(1500));
  EXPECT_TRUE(r.oracle_cache_dir.empty());
  EXPECT_FALSE(r.runs_python());
}

TEST(Request, ABadFlagIsFatalNamingIt) {
  CheckOptions o = some_flags();
  o.fail_on = "crash,explode";
  try {
    parse_request(o);
    FAIL() << "accepted --fail-on crash,explode";
  } catch (const Fatal& e) {
    EXPECT_EQ(e.exit_code, exit_code::usage);
    EXPECT_NE(e.message.find("explode"), std::string::npos) << e.message;
  }
}

TEST(Request, ItsJournalFormReadsBackToTheSameRequest) {
  CheckOptions o = some_flags();
  o.shrink = false;
  const CheckRequest r = parse_request(o);
  auto back = request_from_json(json::parse(to_json(r).dump()));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(to_json(*back), to_json(r));
  EXPECT_FALSE(back->shrink.has_value());
  EXPECT_EQ(back->cases.size(), r.cases.size());
  EXPECT_EQ(back->cases[0].id(), r.cases[0].id());
}

TEST(Request, AFieldThatIsNotWhatTheDoctorWritesIsNamed) {
  json j = to_json(parse_request(some_flags()));
  j["repeat"] = "three";
  auto back = request_from_json(j);
  ASSERT_FALSE(back);
  EXPECT_NE(back.error().message.find("\"repeat\""), std::string::npos) << back.error().message;
}

JournalHeader some_header() {
  JournalHeader h;
  h.request = parse_request(some_flags());
  h.started.tool_version = "0.1.0";
  h.started.started_at = "2026-12-06T00:00:00Z";
  h.started.host = {{"hostname", "node7"}, {"os", "Debian"}};
  h.started.versions = {{"hip_runtime", "7.1"}};
  h.started.targets = {"cpu"};
  h.started.suite = "custom";
  h.started.inventory.no_gpu_reason = "no /dev/kfd";
  return h;
}

TEST(JournalHeader, KeepsTheRequestAndTheMeasuredFactsAsData) {
  const json j = journal_header_to_json(some_header());
  EXPECT_EQ(j.at("format"), k_journal_header_format);
  EXPECT_FALSE(j.contains("report")) << "a rendered report, not data";
  auto back = read_journal_header(j);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->started.host.at("hostname"), "node7");
  EXPECT_EQ(back->started.versions.at("hip_runtime"), "7.1");
  EXPECT_EQ(back->started.inventory.no_gpu_reason, "no /dev/kfd");
  EXPECT_EQ(to_json(back->request), to_json(some_header().request));
  EXPECT_FALSE(back->redact);
}

TEST(JournalHeader, ARedactedRunKeepsNoHostnameAndSaysSo) {
  JournalHeader h = some_header();
  h.redact = true;
  const json j = journal_header_to_json(h);
  EXPECT_EQ(j.dump().find("node7"), std::string::npos);
  auto back = read_journal_header(j);
  ASSERT_TRUE(back);
  EXPECT_TRUE(back->redact);
}

TEST(JournalHeader, AJournalOfTheFormatBeforeTheRequestStillReads) {
  std::ifstream in(sdpa_test::source_path("tests/fixtures/journal-format0/journal.jsonl"));
  std::string first;
  std::getline(in, first);
  auto back = read_journal_header(json::parse(first).at("header"));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->request.cases.size(), 2u);
  EXPECT_EQ(back->request.probes, (std::vector<Probe>{Probe::reference}));
  EXPECT_TRUE(back->redact);
  EXPECT_FALSE(back->started.inventory.no_gpu_reason.empty());
}

TEST(JournalHeader, ANewerFormatIsRefusedNamingIt) {
  json j = journal_header_to_json(some_header());
  j["format"] = 7;
  auto back = read_journal_header(j);
  ASSERT_FALSE(back);
  EXPECT_NE(back.error().message.find("format 7"), std::string::npos) << back.error().message;
  EXPECT_EQ(back.error().message.find('\n'), std::string::npos);
}

} // namespace

// The full suite's GPU-only cases (batch x heads past a launch grid's limit) are kept apart from
// the cases every target runs, in the dtypes asked for, and go into the journal's request.
TEST(Request, TheSuitesGpuOnlyCasesAreKeptApart) {
  CheckOptions o;
  o.suite = "full";
  const CheckRequest full = parse_request(o);
  ASSERT_FALSE(full.gpu_cases.empty());
  for (const Case& c : full.gpu_cases) {
    EXPECT_GT(c.b * c.hq, cases::k_max_grid_yz) << c.id();
    for (const Case& every : full.cases) EXPECT_NE(every.id(), c.id());
  }
  auto back = request_from_json(json::parse(to_json(full).dump()));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->gpu_cases.size(), full.gpu_cases.size());

  o.dtypes = {"fp32"}; // the GPU-only cases are fp16 and bf16
  EXPECT_TRUE(parse_request(o).gpu_cases.empty());
  EXPECT_TRUE(parse_request(CheckOptions{}).gpu_cases.empty()); // the quick suite has none
}

TEST(Plan, GpuOnlyCasesArePlannedOnlyWhereAGpuIsATarget) {
  CheckOptions o;
  o.suite = "full";
  o.probes = {"reference"};
  const CheckRequest r = parse_request(o);
  const auto planned = [](const run::Plan& plan, const std::string& id) {
    return std::any_of(plan.cases.begin(), plan.cases.end(),
                       [&](const Case& c) { return c.id() == id; });
  };
  const std::string gpu_only = r.gpu_cases.front().id();
  DeviceInventory cpu_only;
  const run::Plan on_cpu = checked_plan(r, cpu_only);
  EXPECT_FALSE(planned(on_cpu, gpu_only));
  EXPECT_EQ(on_cpu.cases.size(), r.cases.size());

  DeviceInventory with_gpu;
  Device gpu;
  gpu.index = 0;
  with_gpu.devices.push_back(gpu);
  const run::Plan on_gpu = checked_plan(r, with_gpu);
  EXPECT_TRUE(planned(on_gpu, gpu_only));
  EXPECT_EQ(on_gpu.cases.size(), r.cases.size() + r.gpu_cases.size());
  // A CPU target in the same check does not run them.
  EXPECT_FALSE(cases::target_guard(r.gpu_cases.front(), "cpu").empty());
  EXPECT_TRUE(cases::target_guard(r.gpu_cases.front(), "cuda:0").empty());
}
