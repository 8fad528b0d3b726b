// ref-flash on the CPU beside PyTorch's CPU flash SDPA, same machine, same run, same thread
// count: B=1, H=8, L in {512, 2048, 4096}, D in {64, 128}, fp32, GFLOP/s = 4*B*H*L*L*D (halved
// for causal) / time. Each shape runs ours then torch's, so load from elsewhere hits both alike.
// usage: kernels_flash_vs_torch [--python PATH] [--threads N] [--repeat N] [--causal]
#include "kernels/kernels.hpp"
#include "kernels/parallel_for.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median milliseconds from the torch script; negative when it could not run.
double torch_ms(const std::string& python, const std::string& script, const sdpa_doctor::Case& c,
                int threads, int repeat) {
  const std::string cmd = "'" + python + "' '" + script + "' " + std::to_string(c.b) + " " +
                          std::to_string(c.hq) + " " + std::to_string(c.lq) + " " +
                          std::to_string(c.d) + " " + (c.causal ? "1" : "0") + " " +
                          std::to_string(threads) + " 2 " + std::to_string(repeat) + " 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) return -1;
  std::array<char, 128> buf{};
  if (!fgets(buf.data(), int(buf.size()), pipe.get())) return -1;
  return std::atof(buf.data());
}

} // namespace

int main(int argc, char** argv) {
  using namespace sdpa_doctor;
  std::string python = SDPA_BENCH_PYTHON;
  int threads = kernels::default_thread_count();
  int repeat = 5;
  bool causal = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--python" && i + 1 < argc) python = argv[++i];
    else if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--repeat" && i + 1 < argc) repeat = std::max(1, std::atoi(argv[++i]));
    else if (a == "--causal") causal = true;
    else {
      std::fprintf(stderr, "usage: %s [--python PATH] [--threads N] [--repeat N] [--causal]\n",
                   argv[0]);
      return 2;
    }
  }
  const std::string script = SDPA_BENCH_TORCH_SCRIPT;
  std::printf("threads=%d repeat=%d causal=%d python=%s\n", threads, repeat, int(causal),
              python.c_str());
  std::printf("%-6s %-4s %12s %12s %12s %12s %7s\n", "L", "D", "ours ms", "ours GF/s", "torch ms",
              "torch GF/s", "ratio");
  for (int64_t l : {512, 2048, 4096})
    for (int64_t d : {64, 128}) {
      Case c;
      c.dtype = DType::f32;
      c.b = 1;
      c.hq = c.hkv = 8;
      c.lq = c.lkv = l;
      c.d = d;
      c.causal = causal;
      const HostInputs in = make_inputs(c);
      auto run = kernels::run_cpu(kernels::RefKernel::flash, c, in, 1, repeat, threads);
      if (!run) {
        std::fprintf(stderr, "ref-flash: %s\n", run.error().message.c_str());
        return 1;
      }
      const double ours = median(run->times_ms);
      const double theirs = python.empty() ? -1 : torch_ms(python, script, c, threads, repeat);
      const double gf_ours = c.flops() / ours / 1e6;
      if (theirs > 0) {
        const double gf_torch = c.flops() / theirs / 1e6;
        std::printf("%-6lld %-4lld %12.2f %12.1f %12.2f %12.1f %7.2f\n", static_cast<long long>(l),
                    static_cast<long long>(d), ours, gf_ours, theirs, gf_torch, gf_ours / gf_torch);
      } else {
        std::printf("%-6lld %-4lld %12.2f %12.1f %12s %12s %7s\n", static_cast<long long>(l),
                    static_cast<long long>(d), ours, gf_ours, "n/a", "n/a", "n/a");
      }
      std::fflush(stdout);
    }
  return 0;
}
