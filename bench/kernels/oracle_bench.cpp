// The float64 oracle over every case of a suite (default: full), as a check computes it once per
// case: inputs from core make_inputs (timed apart), then the oracle. Prints one line per case and
// the totals: seconds and GFLOP/s (4*B*Hq*Lq*Lkv*D, halved for causal, as Case::flops).
//   --reference   the plain row-at-a-time oracle (the "before") instead of the blocked one
//   --both        both on every case, one after the other, and the largest difference between
//                 them (relative to the case's largest |output|)
//   --level L     the blocked oracle's loops of ISA level L (x86-64-v4, x86-64-v3, generic)
//   --threads N   threads (default: every core, as the doctor)
// Without --level and --threads the "blocked" side is oracle_attention exactly as the doctor
// calls it (which hands decode shapes to the plain loop); with either, the blocked loops always.
//   --only TEXT   only the cases whose id contains TEXT
//   --quiet       totals only
// usage: oracle_bench [--suite quick|full] [--reference|--both] [--level L] [--threads N]
//                     [--only TEXT] [--quiet]
#include "kernels/kernels.hpp"
#include "cases/cases.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/resource.h>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU seconds of this process, every thread: under load from elsewhere, wall time swells but
// this much less, so it is printed beside it.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct Total {
  double seconds = 0;
  double cpu = 0;
  double flop = 0;
};

} // namespace

int main(int argc, char** argv) {
  using namespace sdpa_doctor;
  std::string suite = "full", level, only;
  bool reference = false, both = false, quiet = false;
  int threads = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--suite" && i + 1 < argc) suite = argv[++i];
    else if (a == "--reference") reference = true;
    else if (a == "--both") both = true;
    else if (a == "--level" && i + 1 < argc) level = argv[++i];
    else if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--quiet") quiet = true;
    else {
      std::fprintf(stderr,
                   "usage: %s [--suite quick|full] [--reference|--both] [--level L] "
                   "[--threads N] [--only TEXT] [--quiet]\n",
                   argv[0]);
      return 2;
    }
  }
  auto cases = cases::suite_cases(suite);
  if (!cases) {
    std::fprintf(stderr, "%s\n", cases.error().message.c_str());
    return 2;
  }
  const auto levels = kernels::oracle_isa_levels();
  if (!level.empty() && std::find(levels.begin(), levels.end(), level) == levels.end()) {
    std::fprintf(stderr, "level %s does not run on this CPU\n", level.c_str());
    return 2;
  }
  // Without --level and --threads: oracle_attention itself, as the doctor calls it.
  const bool as_doctor = level.empty() && threads == 0;
  auto blocked = [&](const Case& c, const HostInputs& in) {
    return as_doctor ? kernels::oracle_attention(c, in)
                     : kernels::oracle_attention_at(level, c, in, nullptr, threads);
  };
  // The reference takes no thread count: it uses every core, as the doctor did.
  auto plain = [](const Case& c, const HostInputs& in) {
    return kernels::oracle_attention_reference(c, in);
  };

  std::printf("suite=%s kernel=%s level=%s threads=%d\n", suite.c_str(),
              both ? "both" : reference ? "reference" : "blocked",
              level.empty() ? levels.front().c_str() : level.c_str(), threads);
  if (!quiet)
    std::printf("%-40s %9s %9s %10s %9s%s\n", "case", "GFLOP", "inputs s", "oracle s", "GFLOP/s",
                both ? "  reference s  GFLOP/s  max diff" : "");
  Total inputs, first, second;
  double max_diff = 0;
  for (const Case& c : *cases) {
    const std::string id = c.id();
    if (!only.empty() && id.find(only) == std::string::npos) continue;
    auto t0 = Clock::now();
    const HostInputs in = make_inputs(c);
    const double t_in = seconds_since(t0);
    inputs.seconds += t_in;
    t0 = Clock::now();
    double cpu0 = cpu_seconds();
    const std::vector<double> a = reference && !both ? plain(c, in) : blocked(c, in);
    const double t_a = seconds_since(t0);
    first.seconds += t_a;
    first.cpu += cpu_seconds() - cpu0;
    first.flop += c.flops();
    if (!both) {
      if (!quiet)
        std::printf("%-40s %9.3f %9.3f %10.3f %9.2f\n", id.c_str(), c.flops() / 1e9, t_in, t_a,
                    c.flops() / t_a / 1e9);
      std::fflush(stdout);
      continue;
    }
    t0 = Clock::now();
    cpu0 = cpu_seconds();
    const std::vector<double> b = plain(c, in);
    const double t_b = seconds_since(t0);
    second.seconds += t_b;
    second.cpu += cpu_seconds() - cpu0;
    second.flop += c.flops();
    double largest = 0, diff = 0;
    for (size_t x = 0; x < b.size(); ++x) {
      largest = std::max(largest, std::abs(b[x]));
      diff = std::max(diff, std::abs(a[x] - b[x]));
    }
    const double rel = largest > 0 ? diff / largest : diff;
    max_diff = std::max(max_diff, rel);
    if (!quiet)
      std::printf("%-40s %9.3f %9.3f %10.3f %9.2f  %11.3f %8.2f  %8.1e\n", id.c_str(),
                  c.flops() / 1e9, t_in, t_a, c.flops() / t_a / 1e9, t_b, c.flops() / t_b / 1e9,
                  rel);
    std::fflush(stdout);
  }
  std::printf("total: %.1f GFLOP, inputs %.1f s, oracle %.1f s (%.2f GFLOP/s), %.1f CPU s\n",
              first.flop / 1e9, inputs.seconds, first.seconds, first.flop / first.seconds / 1e9,
              first.cpu);
  if (both)
    std::printf("reference: oracle %.1f s (%.2f GFLOP/s), %.1f CPU s; blocked %.1fx faster "
                "(%.1fx in CPU time); largest difference %.1e of the case's largest |output|\n",
                second.seconds, second.flop / second.seconds / 1e9, second.cpu,
                second.seconds / first.seconds, second.cpu / first.cpu, max_diff);
  return 0;
}
