// Backward passes on the CPU: the float64 oracle's gradients row-wise (the "before") and blocked,
// and ref-flash's (and with --math ref-math's) fp32 backward, on a few shapes. Prints per case
// and kernel the wall and CPU seconds and GFLOP/s over the backward's usual count, 2.5 times the
// forward's (five products of the forward's two sizes: 10*B*Hq*Lq*Lkv*D, halved for causal),
// and the largest difference between the two oracles (relative to each gradient's largest
// |value|); the blocked forward oracle's time beside them for scale (GFLOP/s over the forward's
// count). The oracle's time includes the forward it runs for O and the log-sum-exp; ref-flash's
// forward runs once beforehand, untimed, as run_cpu_backward does.
//   --case SPEC    a case (parse_case_spec); repeatable. Default: B1 H8 L1024 D64 and
//                  B1 H8 L4096 D128, bf16.
//   --no-reference skip the row-wise oracle (slow at long lengths)
//   --math         also ref-math's backward
//   --threads N    threads for the blocked oracle and the kernels (default: every core); the
//                  row-wise oracle uses every core
//   --repeat N     timed runs of each kernel, the best reported (default 1)
// usage: backward_bench [--case SPEC]... [--no-reference] [--math] [--threads N] [--repeat N]
#include "kernels/kernels.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/resource.h>

namespace {

using namespace sdpa_doctor;
using Clock = std::chrono::steady_clock;

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct Timing {
  double wall = INFINITY, cpu = 0;
};

// Best wall time of `repeat` calls of fn, and the CPU seconds of that call.
template <typename Fn> Timing best_of(int repeat, Fn&& fn) {
  Timing t;
  for (int r = 0; r < std::max(repeat, 1); ++r) {
    const double cpu0 = cpu_seconds();
    const auto t0 = Clock::now();
    fn();
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    if (wall < t.wall) t = {wall, cpu_seconds() - cpu0};
  }
  return t;
}

double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

// flop_factor: 2.5 for a backward, 1 for the forward.
void print(const Case& c, const char* kernel, const Timing& t, double flop_factor,
           const std::string& extra = {}) {
  const double gflop = flop_factor * c.flops() / 1e9;
  char cpu[16] = "        -"; // not measured
  if (!std::isnan(t.cpu)) std::snprintf(cpu, sizeof cpu, "%9.3f", t.cpu);
  std::printf("%-34s %-15s %9.3f %s %9.2f%s\n", c.id().c_str(), kernel, t.wall, cpu,
              gflop / t.wall, extra.c_str());
  std::fflush(stdout);
}

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> specs;
  bool reference = true, math = false;
  int threads = 0, repeat = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--case" && i + 1 < argc) specs.push_back(argv[++i]);
    else if (a == "--no-reference") reference = false;
    else if (a == "--math") math = true;
    else if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--repeat" && i + 1 < argc) repeat = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: %s [--case SPEC]... [--no-reference] [--math] [--threads N] "
                   "[--repeat N]\n",
                   argv[0]);
      return 2;
    }
  }
  if (specs.empty())
    specs = {"dtype=bf16,b=1,h=8,l=1024,d=64", "dtype=bf16,b=1,h=8,l=4096,d=128"};
  const std::string level = kernels::oracle_isa_levels().front();
  std::printf("oracle level=%s threads=%d repeat=%d\n", level.c_str(), threads, repeat);
  std::printf("%-34s %-15s %9s %9s %9s\n", "case", "kernel", "wall s", "CPU s", "GFLOP/s");
  for (const std::string& spec : specs) {
    auto parsed = parse_case_spec(spec);
    if (!parsed) {
      std::fprintf(stderr, "%s\n", parsed.error().message.c_str());
      return 2;
    }
    const Case& c = *parsed;
    const HostInputs in = make_inputs(c);
    std::vector<double> dout(size_t(c.q_elements()));
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (double& g : dout) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      g = round_to_dtype(c.dtype, float(double(x >> 11) * 0x1p-52 - 1.0));
    }
    // The blocked forward for scale: the backward runs it once inside.
    print(c, "oracle-forward", best_of(repeat, [&] {
            kernels::oracle_attention_at(level, c, in, nullptr, threads);
          }),
          1.0);
    kernels::OracleGradients blocked;
    print(c, "oracle-blocked", best_of(repeat, [&] {
            blocked = kernels::oracle_attention_backward_at(level, c, in, dout, nullptr, threads);
          }),
          2.5);
    if (reference) {
      kernels::OracleGradients row_wise;
      const Timing t = best_of(repeat, [&] {
        row_wise = kernels::oracle_attention_backward_reference(c, in, dout);
      });
      const double diff = std::max({relative_error(blocked.dq, row_wise.dq),
                                    relative_error(blocked.dk, row_wise.dk),
                                    relative_error(blocked.dv, row_wise.dv)});
      char extra[64];
      std::snprintf(extra, sizeof extra, "  max diff to blocked %.1e", diff);
      print(c, "oracle-rowwise", t, 2.5, extra);
    }
    const std::vector<float> dout_f(dout.begin(), dout.end());
    for (kernels::RefKernel kernel : {kernels::RefKernel::flash, kernels::RefKernel::math}) {
      if (kernel == kernels::RefKernel::math && !math) continue;
      auto run = kernels::run_cpu_backward(kernel, c, in, dout_f, 0, std::max(repeat, 1), threads);
      if (!run) {
        std::fprintf(stderr, "%s\n", run.error().message.c_str());
        return 1;
      }
      Timing t;
      t.wall = *std::min_element(run->times_ms.begin(), run->times_ms.end()) / 1e3;
      t.cpu = NAN; // run_cpu_backward times the backward alone; its CPU time is not split out
      print(c, std::string(kernels::to_string(kernel)).c_str(), t, 2.5);
    }
  }
  return 0;
}
