// google-benchmark view of the CPU kernels: ref-flash and ref-math, fp32, B=1 H=8, L x D.
#include "kernels/kernels.hpp"

#include <benchmark/benchmark.h>

namespace {

void bench(benchmark::State& state, sdpa_doctor::kernels::RefKernel kernel, bool causal) {
  using namespace sdpa_doctor;
  Case c;
  c.dtype = DType::f32;
  c.b = 1;
  c.hq = c.hkv = 8;
  c.lq = c.lkv = state.range(0);
  c.d = state.range(1);
  c.causal = causal;
  const HostInputs in = make_inputs(c);
  for (auto _ : state) {
    auto run = kernels::run_cpu(kernel, c, in, 0, 1);
    if (!run) state.SkipWithError(run.error().message.c_str());
    benchmark::DoNotOptimize(run);
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(c.flops() * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

} // namespace

BENCHMARK_CAPTURE(bench, ref_flash, sdpa_doctor::kernels::RefKernel::flash, false)
    ->ArgsProduct({{512, 2048, 4096}, {64, 128}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(bench, ref_flash_causal, sdpa_doctor::kernels::RefKernel::flash, true)
    ->ArgsProduct({{2048}, {64, 128}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(bench, ref_math, sdpa_doctor::kernels::RefKernel::math, false)
    ->ArgsProduct({{512}, {64, 128}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_MAIN();
