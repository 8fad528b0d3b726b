// Our GPU ref-flash and ref-math (compiled at run time for the device, kernels/rtc.hpp) beside
// PyTorch's SDPA backends on the same GPU: flash, mem_efficient, cuDNN and math, in TFLOP/s
// (4*B*H*L*L*D per call, halved for causal, over the median time; kernels alone, timed by device
// events on both sides). It states the machine first: the GPU, its arch, the runtime and compiler
// our kernels used, torch's build. Torch runs in a child process (torch_gpu_sdpa_time.py) after
// ours, so the two never share the device. Only where a GPU is: elsewhere it says "no GPU" and
// exits 77.
// usage: gpu_flash_vs_torch [--python PATH|none] [--device N] [--repeat N] [--b N] [--h N]
//          [--dtype fp16,bf16,fp32] [--causal 0,1] [--l 1024,4096] [--d 64,128]
#include "kernels/kernels.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace {

using sdpa_doctor::Case;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t comma; (comma = s.find(',', start)) != std::string::npos; start = comma + 1)
    out.push_back(s.substr(start, comma - start));
  out.push_back(s.substr(start));
  return out;
}

std::string shell_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double tflops(const Case& c, double ms) {
  const double flop = 4.0 * double(c.b) * double(c.hq) * double(c.lq) * double(c.lkv) *
                      double(c.d) * (c.causal ? 0.5 : 1.0);
  return ms > 0 ? flop / (ms * 1e-3) / 1e12 : -1;
}

std::string cell(double tf) { return tf < 0 ? "       -" : std::to_string(tf).substr(0, 8); }

// torch's times for every shape: "machine <json>" and per shape "BACKEND MS|error ..." lines.
struct TorchTimes {
  std::string machine;
  std::vector<std::map<std::string, double>> per_shape; // backend -> ms, -1 when it refused
};

TorchTimes torch_times(const std::string& python, const std::string& script, int device,
                       int repeat, const std::vector<Case>& cases) {
  TorchTimes out;
  std::string cmd = shell_quoted(python) + " " + shell_quoted(script) + " " +
                    std::to_string(device) + " " + std::to_string(repeat);
  for (const Case& c : cases)
    cmd += " " + std::to_string(c.b) + "," + std::to_string(c.hq) + "," + std::to_string(c.lq) +
           "," + std::to_string(c.d) + "," + std::string(to_string(c.dtype)) + "," +
           (c.causal ? "1" : "0");
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return out;
  char line[1024];
  while (std::fgets(line, sizeof line, pipe)) {
    std::string text(line);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    if (text.rfind("machine ", 0) == 0) {
      out.machine = text.substr(8);
      continue;
    }
    const size_t space = text.find(' ');
    const std::string backend = text.substr(0, space);
    if (backend == "flash") out.per_shape.emplace_back();
    if (out.per_shape.empty() || space == std::string::npos) continue;
    const std::string rest = text.substr(space + 1);
    const bool refused = rest.rfind("error", 0) == 0;
    if (refused) std::fprintf(stderr, "torch %s: %s\n", backend.c_str(), rest.c_str());
    out.per_shape.back()[backend] = refused ? -1 : std::atof(rest.c_str());
  }
  ::pclose(pipe);
  return out;
}

} // namespace

int main(int argc, char** argv) {
  using namespace sdpa_doctor;
  std::string python = SDPA_BENCH_PYTHON;
  int device = 0, repeat = 10, b = 1, h = 16;
  std::vector<std::string> dtypes = {"fp16", "bf16", "fp32"}, causals = {"0", "1"},
                           ls = {"1024", "4096"}, ds = {"64", "128"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--python" && has) python = argv[++i];
    else if (a == "--device" && has) device = std::atoi(argv[++i]);
    else if (a == "--repeat" && has) repeat = std::max(1, std::atoi(argv[++i]));
    else if (a == "--b" && has) b = std::max(1, std::atoi(argv[++i]));
    else if (a == "--h" && has) h = std::max(1, std::atoi(argv[++i]));
    else if (a == "--dtype" && has) dtypes = split(argv[++i]);
    else if (a == "--causal" && has) causals = split(argv[++i]);
    else if (a == "--l" && has) ls = split(argv[++i]);
    else if (a == "--d" && has) ds = split(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: %s [--python PATH|none] [--device N] [--repeat N] [--b N] [--h N]"
                   " [--dtype fp16,bf16,fp32] [--causal 0,1] [--l 1024,4096] [--d 64,128]\n",
                   argv[0]);
      return 2;
    }
  }
  if (const std::string why = kernels::gpu_unavailable_reason(device); !why.empty()) {
    std::printf("gpu_flash_vs_torch: no GPU: %s\n", why.c_str());
    return 77;
  }

  std::vector<Case> cases;
  for (const std::string& dtype : dtypes)
    for (const std::string& causal : causals)
      for (const std::string& l : ls)
        for (const std::string& d : ds) {
          auto c = parse_case_spec("dtype=" + dtype + ",b=" + std::to_string(b) + ",h=" +
                                   std::to_string(h) + ",l=" + l + ",d=" + d +
                                   (causal == "1" ? ",causal" : ""));
          if (!c) {
            std::fprintf(stderr, "gpu_flash_vs_torch: %s\n", c.error().message.c_str());
            return 2;
          }
          cases.push_back(*c);
        }

  // The machine, as our kernels found it.
  const kernels::GpuKernels& flash = kernels::gpu_kernels(kernels::RefKernel::flash, device);
  const kernels::GpuKernels& math = kernels::gpu_kernels(kernels::RefKernel::math, device);
  for (const auto& [key, value] : flash.facts)
    std::printf("%-13s %s\n", key.c_str(), value.c_str());
  for (const kernels::GpuKernels* k : {&flash, &math})
    if (!k->failure.empty()) std::printf("ours: %s\n", k->failure.c_str());

  std::vector<std::map<std::string, double>> ours(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const HostInputs in = make_inputs(cases[i]);
    for (auto kernel : {kernels::RefKernel::flash, kernels::RefKernel::math}) {
      auto run = kernels::run_gpu(kernel, device, cases[i], in, 2, repeat);
      if (!run) std::fprintf(stderr, "%s %s: %s\n", std::string(to_string(kernel)).c_str(),
                             cases[i].id().c_str(), run.error().message.c_str());
      ours[i][std::string(to_string(kernel))] = run ? median(run->times_ms) : -1;
    }
  }
  TorchTimes torch;
  if (python != "none")
    torch = torch_times(python, SDPA_BENCH_TORCH_GPU_SCRIPT, device, repeat, cases);
  std::printf("torch         %s\n", torch.machine.empty() ? "(not run)" : torch.machine.c_str());

  std::printf("\nTFLOP/s (median of %d)        ref-flash ref-math    flash  mem_eff    cudnn"
              "     math\n",
              repeat);
  for (size_t i = 0; i < cases.size(); ++i) {
    std::printf("%-30s", cases[i].id().c_str());
    for (const char* k : {"ref-flash", "ref-math"})
      std::printf(" %s", cell(tflops(cases[i], ours[i][k])).c_str());
    for (const char* k : {"flash", "mem_efficient", "cudnn", "math"}) {
      const bool have = i < torch.per_shape.size() && torch.per_shape[i].count(k);
      std::printf(" %s", cell(have ? tflops(cases[i], torch.per_shape[i].at(k)) : -1).c_str());
    }
    std::printf("\n");
  }
  return 0;
}
