// ref-flash on the CPU beside PyTorch's CPU flash SDPA, same machine, same run, same thread
// count: B=1, H=8, L x D, for each dtype and causal setting asked. GFLOP/s = 4*B*H*L*L*D (halved
// for causal) / time. Ours and torch's run one call at a time, alternately (torch in a child
// process that stays up), so load from elsewhere hits both alike; each side reports its median.
// Before the table it measures the machine's peak (see machine_peak) and prints each kernel's
// fraction of it: fp32 FMA peak for fp32 and fp16 (neither kernel has fp16 arithmetic on a
// CPU), for bf16 the peak of the unit ref-flash's path uses (AMX tiles or AVX512_BF16 dots).
// --cpu-time (one thread) times each call by the calling thread's CPU time instead of the wall
// clock, on both sides: time other processes take from the core is not counted, so on a shared
// machine it shows what each kernel does with a core it has (not the goal's measure, which is
// wall time at the default thread count).
// usage: kernels_flash_vs_torch [--python PATH] [--threads N] [--repeat N] [--cpu-time]
//          [--dtype fp32,bf16,fp16] [--causal 0,1] [--l 1024,2048,4096] [--d 64,128]
#include "kernels/cpu_isa.hpp"
#include "kernels/kernels.hpp"
#include "kernels/parallel_for.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? -1 : v[v.size() / 2];
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// --- machine peak ------------------------------------------------------------------------------
// The clock: a chain of dependent register-register adds, each reading the last one's result
// (latency 1 on every x86 core we know), so adds per second is the core clock. Not `add $1`:
// Golden Cove and later fold immediate adds of a chain at rename, so such a chain "runs" at
// several adds per cycle (it gave 19.4 GHz on a Sapphire Rapids). A chain of 64-bit imuls
// (latency 3 on Intel since Nehalem and on AMD since Zen) is timed too, as a check: the two
// agree where neither is folded. Sampled in short slices (~0.2 ms) on every bench thread at
// once, and the 90th percentile kept: slices that lost the core to another process come out
// slow, never fast. The FLOP per cycle of each unit: independent accumulators enough to cover
// its latency (twelve zmm for vfmadd231ps and vdpbf16ps; six tiles for AMX tdpbf16ps), timed
// the same way, divided by that clock. Peak = FLOP/cycle x clock x threads. Under a hypervisor
// the steady clock is the host's and the vCPU may lose time to it: every figure is approximate
// there.

constexpr long k_slice_iters = 100000;

double add_chain_ghz() {
  long x = 0, one = 1;
  asm volatile("" : "+r"(one)); // an unknown register value: nothing to fold
  const double t0 = seconds_now();
  for (long i = 0; i < k_slice_iters; ++i)
    asm volatile("add %1,%0\n\tadd %1,%0\n\tadd %1,%0\n\tadd %1,%0\n\t"
                 "add %1,%0\n\tadd %1,%0\n\tadd %1,%0\n\tadd %1,%0"
                 : "+r"(x)
                 : "r"(one));
  return 8.0 * k_slice_iters / (seconds_now() - t0) / 1e9;
}

// Clock from a chain of 64-bit imuls, latency 3.
double imul_chain_ghz() {
  long x = 3, m = 5;
  asm volatile("" : "+r"(m));
  const double t0 = seconds_now();
  for (long i = 0; i < k_slice_iters / 4; ++i)
    asm volatile("imul %1,%0\n\timul %1,%0\n\timul %1,%0\n\timul %1,%0\n\t"
                 "imul %1,%0\n\timul %1,%0\n\timul %1,%0\n\timul %1,%0"
                 : "+r"(x)
                 : "r"(m));
  return 3.0 * 8.0 * (k_slice_iters / 4) / (seconds_now() - t0) / 1e9;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define SDPA_TWELVE(op)                                                                           \
  op " %%zmm13,%%zmm14,%%zmm0\n\t" op " %%zmm13,%%zmm14,%%zmm1\n\t" op                            \
     " %%zmm13,%%zmm14,%%zmm2\n\t" op " %%zmm13,%%zmm14,%%zmm3\n\t" op                            \
     " %%zmm13,%%zmm14,%%zmm4\n\t" op " %%zmm13,%%zmm14,%%zmm5\n\t" op                            \
     " %%zmm13,%%zmm14,%%zmm6\n\t" op " %%zmm13,%%zmm14,%%zmm7\n\t" op                            \
     " %%zmm13,%%zmm14,%%zmm8\n\t" op " %%zmm13,%%zmm14,%%zmm9\n\t" op                            \
     " %%zmm13,%%zmm14,%%zmm10\n\t" op " %%zmm13,%%zmm14,%%zmm11"
#define SDPA_CLOBBERS                                                                             \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11"

// GFLOP/s of one slice: 12 zmm FMAs = 12 x 16 x 2 FLOP per iteration.
__attribute__((target("avx512f"))) double fma_gflops() {
  asm volatile("vxorps %%xmm13,%%xmm13,%%xmm13\n\tvxorps %%xmm14,%%xmm14,%%xmm14" ::
                   : "xmm13", "xmm14");
  const double t0 = seconds_now();
  for (long i = 0; i < k_slice_iters / 4; ++i) asm volatile(SDPA_TWELVE("vfmadd231ps")::: SDPA_CLOBBERS);
  return 12.0 * 32 * (k_slice_iters / 4) / (seconds_now() - t0) / 1e9;
}

// 12 vdpbf16ps zmm = 12 x 16 lanes x 2 products x 2 FLOP per iteration.
__attribute__((target("avx512f,avx512bf16"))) double bf16_gflops() {
  asm volatile("vxorps %%xmm13,%%xmm13,%%xmm13\n\tvxorps %%xmm14,%%xmm14,%%xmm14" ::
                   : "xmm13", "xmm14");
  const double t0 = seconds_now();
  for (long i = 0; i < k_slice_iters / 4; ++i) asm volatile(SDPA_TWELVE("vdpbf16ps")::: SDPA_CLOBBERS);
  return 12.0 * 64 * (k_slice_iters / 4) / (seconds_now() - t0) / 1e9;
}

// Six tdpbf16ps into independent accumulator tiles (0-5) from tiles 6 and 7, all 16 x 64 bytes:
// each one 16 x 16 results x 32 products x 2 FLOP. Zeros in, zeros out: the rate does not
// depend on the values. Run only after cpu_isa().amx_bf16 (the kernel's permission included).
struct alignas(64) AmxConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
__attribute__((target("amx-tile,amx-bf16"))) double amx_gflops() {
  const AmxConfig cfg;
  asm volatile("ldtilecfg %0" ::"m"(cfg)); // GCC 12's _tile_loadconfig reads 8 bytes of it

  // The tile numbers are immediates: spelt out.
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  _tile_zero(4); _tile_zero(5); _tile_zero(6); _tile_zero(7);
  const long iters = k_slice_iters / 64;
  const double t0 = seconds_now();
  for (long i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 6, 7); _tile_dpbf16ps(1, 6, 7); _tile_dpbf16ps(2, 6, 7);
    _tile_dpbf16ps(3, 6, 7); _tile_dpbf16ps(4, 6, 7); _tile_dpbf16ps(5, 6, 7);
  }
  const double seconds = seconds_now() - t0;
  _tile_release();
  return 6.0 * 16 * 16 * 32 * 2 * double(iters) / seconds / 1e9;
}
#endif

bool under_hypervisor() {
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return false;
  char line[4096];
  bool found = false;
  while (!found && std::fgets(line, sizeof line, f))
    found = std::string(line).rfind("flags", 0) == 0 && std::strstr(line, " hypervisor");
  std::fclose(f);
  return found;
}

struct Peak {
  double ghz = 0;            // measured core clock (add chain) with every bench thread busy
  double imul_ghz = 0;       // the same from the imul chain, as a check
  double fp32_per_cycle = 0; // FLOP/cycle/core of fp32 FMA (0: not measured)
  double bf16_per_cycle = 0; // FLOP/cycle/core of vdpbf16ps (0: no AVX512_BF16)
  double amx_per_cycle = 0;  // FLOP/cycle/core of AMX tdpbf16ps (0: no AMX-BF16)
  int threads = 1;
  double gflops(double per_cycle) const { return per_cycle * ghz * threads; }
};

double p90(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() * 9 / 10];
}

Peak machine_peak(int threads) {
  Peak peak;
  peak.threads = threads;
#if defined(__x86_64__) && defined(__GNUC__)
  // The same answer the kernels dispatch on, so the peak is that of the path that runs.
  const sdpa_doctor::kernels::CpuIsa& isa = sdpa_doctor::kernels::cpu_isa();
  const bool has[5] = {true, true, isa.avx512, isa.avx512_bf16, isa.amx_bf16};
  double (*const probe[5])() = {add_chain_ghz, imul_chain_ghz, fma_gflops, bf16_gflops,
                                amx_gflops};
  std::vector<std::vector<double>> per(size_t(threads) * 5);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int n = 0; n < 1000; ++n)
        for (size_t k = 0; k < 5; ++k)
          if (has[k]) per[size_t(t) * 5 + k].push_back(probe[k]());
    });
  for (auto& t : pool) t.join();
  double value[5] = {};
  for (size_t k = 0; k < 5; ++k) {
    if (!has[k]) continue;
    std::vector<double> each;
    for (int t = 0; t < threads; ++t) each.push_back(p90(per[size_t(t) * 5 + k]));
    value[k] = median(each);
  }
  peak.ghz = value[0];
  peak.imul_ghz = value[1];
  peak.fp32_per_cycle = value[2] / peak.ghz;
  peak.bf16_per_cycle = value[3] / peak.ghz;
  peak.amx_per_cycle = value[4] / peak.ghz;
#endif
  return peak;
}

// --- torch in a child process ------------------------------------------------------------------

class TorchTimer {
public:
  TorchTimer(const std::string& python, const std::string& script, int threads, bool cpu_time) {
    if (python.empty()) return;
    int to_child[2], from_child[2];
    if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0) return;
    m_pid = fork();
    if (m_pid == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      const int devnull = open("/dev/null", O_WRONLY);
      if (devnull >= 0) dup2(devnull, 2);
      const std::string t = std::to_string(threads);
      execl(python.c_str(), python.c_str(), script.c_str(), t.c_str(), cpu_time ? "cpu" : nullptr,
            nullptr);
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    m_in = fdopen(to_child[1], "w");
    m_out = fdopen(from_child[0], "r");
  }
  ~TorchTimer() {
    if (m_in) fclose(m_in);
    if (m_out) fclose(m_out);
    if (m_pid > 0) waitpid(m_pid, nullptr, 0);
  }
  TorchTimer(const TorchTimer&) = delete;
  TorchTimer& operator=(const TorchTimer&) = delete;

  // Milliseconds of one call; negative when torch could not run it (the reason on stderr once).
  double time_ms(const sdpa_doctor::Case& c) {
    if (!m_in || !m_out) return -1;
    std::fprintf(m_in, "%lld %lld %lld %lld %s %d\n", static_cast<long long>(c.b),
                 static_cast<long long>(c.hq), static_cast<long long>(c.lq),
                 static_cast<long long>(c.d), std::string(to_string(c.dtype)).c_str(),
                 int(c.causal));
    std::fflush(m_in);
    char line[512];
    if (!std::fgets(line, sizeof line, m_out)) return -1;
    if (std::string(line).rfind("error", 0) == 0) {
      std::fprintf(stderr, "torch: %s", line);
      return -1;
    }
    return std::atof(line);
  }

private:
  pid_t m_pid = -1;
  FILE* m_in = nullptr;
  FILE* m_out = nullptr;
};

} // namespace

int main(int argc, char** argv) {
  using namespace sdpa_doctor;
  std::string python = SDPA_BENCH_PYTHON;
  int threads = kernels::default_thread_count();
  int repeat = 5;
  bool cpu_time = false;
  std::vector<std::string> dtypes = {"fp32", "bf16", "fp16"};
  std::vector<std::string> causals = {"0", "1"};
  std::vector<std::string> ls = {"1024", "2048", "4096"};
  std::vector<std::string> ds = {"64", "128"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--python" && has) python = argv[++i];
    else if (a == "--threads" && has) threads = std::max(1, std::atoi(argv[++i]));
    else if (a == "--repeat" && has) repeat = std::max(1, std::atoi(argv[++i]));
    else if (a == "--cpu-time") cpu_time = true;
    else if (a == "--dtype" && has) dtypes = split(argv[++i]);
    else if (a == "--causal" && has) causals = split(argv[++i]);
    else if (a == "--l" && has) ls = split(argv[++i]);
    else if (a == "--d" && has) ds = split(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: %s [--python PATH] [--threads N] [--repeat N] [--cpu-time]"
                   " [--dtype fp32,bf16,fp16] [--causal 0,1] [--l 1024,2048,4096] [--d 64,128]\n",
                   argv[0]);
      return 2;
    }
  }
  for (const std::string& name : dtypes)
    if (!dtype_from_string(name)) {
      std::fprintf(stderr, "unknown dtype '%s'\n", name.c_str());
      return 2;
    }

  if (cpu_time) threads = 1; // one thread runs the call on the calling thread: its CPU time is it
  const Peak peak = machine_peak(threads);
  std::printf("threads=%d repeat=%d time=%s (median of the timed calls, after one warm-up each)\n",
              threads, repeat, cpu_time ? "thread CPU" : "wall");
  std::printf("ISA: %s%s%s\n", kernels::cpu_isa_level(kernels::cpu_isa()).c_str(),
              kernels::cpu_isa().forced.empty() ? "" : " (SDPA_DOCTOR_CPU_ISA=",
              kernels::cpu_isa().forced.empty() ? ""
                                                : (kernels::cpu_isa().forced + ")").c_str());
  std::printf("peak: clock %.2f GHz from a dependent register-register add chain (imul chain, "
              "latency 3: %.2f GHz), p90 of 1000 ~0.2 ms slices per thread, all threads busy%s\n",
              peak.ghz, peak.imul_ghz,
              under_hypervisor() ? "; a VM (hypervisor flag): clock and peaks approximate" : "");
  std::printf("peak: per core, from throughput loops of independent accumulators over that "
              "clock: fp32 FMA %.1f FLOP/cycle -> %.0f GFLOP/s; vdpbf16ps %.1f -> %.0f; AMX "
              "tdpbf16ps %.1f -> %.0f (x%d threads; 0: no such unit)\n",
              peak.fp32_per_cycle, peak.gflops(peak.fp32_per_cycle), peak.bf16_per_cycle,
              peak.gflops(peak.bf16_per_cycle), peak.amx_per_cycle,
              peak.gflops(peak.amx_per_cycle), threads);
  std::printf("%%pk: each side against the peak of the unit ref-flash runs for the dtype (fp32 "
              "FMA for fp32 and fp16, the bf16 unit of its path for bf16)\n");
  std::printf("%-5s %-6s %-5s %-4s %10s %9s %10s %9s %6s %7s %7s\n", "dtype", "causal", "L", "D",
              "ours ms", "ours GF/s", "torch ms", "torch GF/s", "ratio", "ours %pk",
              "torch %pk");
  std::fflush(stdout);

  TorchTimer torch(python, SDPA_BENCH_TORCH_SCRIPT, threads, cpu_time);
  const auto now = [&] { return cpu_time ? thread_cpu_seconds() : seconds_now(); };
  for (const std::string& dtype_name : dtypes)
    for (const std::string& causal : causals)
      for (const std::string& l_text : ls)
        for (const std::string& d_text : ds) {
          Case c;
          c.dtype = *dtype_from_string(dtype_name);
          c.b = 1;
          c.hq = c.hkv = 8;
          c.lq = c.lkv = std::atoll(l_text.c_str());
          c.d = std::atoll(d_text.c_str());
          c.causal = causal == "1";
          const HostInputs in = make_inputs(c);
          std::vector<float> o(size_t(c.q_elements()));
          kernels::AttnParams p = kernels::params_for(c);
          p.q = in.q.data();
          p.k = in.k.data();
          p.v = in.v.data();
          p.o = o.data();
          std::vector<double> ours, theirs;
          for (int r = 0; r <= repeat; ++r) { // r == 0: warm-up of both
            const double t0 = now();
            const std::string refused = kernels::cpu_flash_attention(p, threads);
            const double ms = (now() - t0) * 1e3;
            if (!refused.empty()) {
              std::fprintf(stderr, "ref-flash: %s\n", refused.c_str());
              return 1;
            }
            const double torch_ms = torch.time_ms(c);
            if (r == 0) continue;
            ours.push_back(ms);
            if (torch_ms > 0) theirs.push_back(torch_ms);
          }
          const kernels::CpuFlashPath path = kernels::cpu_flash_path_for(p);
          const double peak_gf =
              peak.gflops(path == kernels::CpuFlashPath::amx_bf16      ? peak.amx_per_cycle
                          : path == kernels::CpuFlashPath::avx512_bf16 ? peak.bf16_per_cycle
                                                                        : peak.fp32_per_cycle);
          const double gf_ours = c.flops() / median(ours) / 1e6;
          std::printf("%-5s %-6s %-5lld %-4lld %10.2f %9.1f", dtype_name.c_str(), causal.c_str(),
                      static_cast<long long>(c.lq), static_cast<long long>(c.d), median(ours),
                      gf_ours);
          if (theirs.size() == ours.size()) {
            const double gf_torch = c.flops() / median(theirs) / 1e6;
            std::printf(" %10.2f %9.1f %6.2f", median(theirs), gf_torch, gf_ours / gf_torch);
            if (peak_gf > 0)
              std::printf(" %6.0f%% %6.0f%%\n", 100 * gf_ours / peak_gf, 100 * gf_torch / peak_gf);
            else
              std::printf(" %7s %7s\n", "n/a", "n/a");
          } else {
            std::printf(" %10s %9s %6s %7s %7s\n", "n/a", "n/a", "n/a", "n/a", "n/a");
          }
          std::fflush(stdout);
        }
  return 0;
}
