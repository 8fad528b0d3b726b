// Cost of isolation: N trivial cases through one fault worker (as the runner runs a variant) vs
// the same N case lines handled in-process. Prints the ratio and the per-case overhead.
#include "isolate/isolate.hpp"

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

using namespace sdpa_doctor::isolate;

namespace {

std::vector<PlannedCase> plan(int n) {
  std::vector<PlannedCase> cases;
  for (int i = 0; i < n; ++i) {
    std::string id = "case-" + std::to_string(i);
    cases.push_back({id, R"({"v":1,"id":")" + id + R"(","fault":"ok"})",
                     std::chrono::milliseconds(10'000)});
  }
  return cases;
}

// The in-process baseline does what the worker does per case: parse the line, build the events.
std::size_t run_in_process(const std::vector<PlannedCase>& cases) {
  std::size_t bytes = 0;
  for (const auto& c : cases) {
    auto line = nlohmann::json::parse(c.line);
    nlohmann::json begin{{"v", 1}, {"event", "begin"}, {"case", line["id"]}};
    nlohmann::json result{{"v", 1}, {"event", "result"}, {"case", line["id"]}, {"status", "pass"}};
    bytes += begin.dump().size() + result.dump().size();
  }
  return bytes;
}

void BM_Isolated(benchmark::State& state) {
  const auto cases = plan(static_cast<int>(state.range(0)));
  WorkerCommand cmd;
  cmd.argv = {SDPA_DOCTOR_BINARY, "__fault-worker"};
  RunnerOptions options;
  for (auto _ : state) {
    auto report = run_worker(cmd, cases, options);
    benchmark::DoNotOptimize(report.outcomes.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_InProcess(benchmark::State& state) {
  const auto cases = plan(static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(run_in_process(cases));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

BENCHMARK(BM_Isolated)->Arg(1)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_InProcess)->Arg(1)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);

double seconds_for(int n, bool isolated, int reps) {
  const auto cases = plan(n);
  WorkerCommand cmd;
  cmd.argv = {SDPA_DOCTOR_BINARY, "__fault-worker"};
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) {
    if (isolated) {
      auto report = run_worker(cmd, cases, RunnerOptions{});
      benchmark::DoNotOptimize(report.outcomes.data());
    } else {
      benchmark::DoNotOptimize(run_in_process(cases));
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / reps;
}

} // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  const int n = 1000;
  const double isolated = seconds_for(n, true, 5);
  const double in_process = seconds_for(n, false, 5);
  std::printf("\n%d trivial cases: isolated %.2f ms, in-process %.2f ms, ratio %.1fx, "
              "overhead %.1f us/case (one worker for all)\n",
              n, isolated * 1e3, in_process * 1e3, isolated / in_process,
              (isolated - in_process) / n * 1e6);
  benchmark::Shutdown();
  return 0;
}
