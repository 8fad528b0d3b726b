#include "fixtures.hpp"

#include "advice/advice.hpp"
#include "support/run_binary.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <stdexcept>

using namespace sdpa_doctor;

namespace sdpa_fixtures {

namespace {

Case make_case(DType dtype, int64_t l, int64_t d, bool causal = false, int64_t hq = 8,
               int64_t hkv = 8) {
  Case c;
  c.dtype = dtype;
  c.b = 1;
  c.hq = hq;
  c.hkv = hkv;
  c.lq = l;
  c.lkv = l;
  c.d = d;
  c.causal = causal;
  return c;
}

Tolerance tol_for(DType d) {
  return d == DType::f32 ? Tolerance{1e-5, 1e-5} : d == DType::bf16 ? Tolerance{1.6e-2, 1.6e-2}
                                                                    : Tolerance{2e-3, 2e-3};
}

CaseResult pass(const std::string& device, Probe probe, const std::string& variant, const Case& c,
                double time_ms, const std::string& chosen = "") {
  CaseResult r;
  r.case_id = c.id();
  r.kase = c;
  r.device = device;
  r.probe = probe;
  r.variant = variant;
  r.status = Status::pass;
  r.tolerance = tol_for(c.dtype);
  r.metrics.max_abs_err = c.dtype == DType::f32 ? 3.1e-7 : 4.8e-4;
  r.metrics.rel_l2_err = c.dtype == DType::f32 ? 1.2e-7 : 2.5e-4;
  r.metrics.frac_outside_tol = 0;
  r.metrics.time_ms = time_ms;
  r.metrics.time_min_ms = time_ms * 0.95;
  r.metrics.timed_runs = 3;
  r.metrics.tflops = c.flops() / (time_ms * 1e-3) / 1e12;
  r.backend_chosen = chosen.empty() ? variant.substr(0, variant.find('[')) : chosen;
  return r;
}

CaseResult with_status(CaseResult r, Status s, const std::string& reason) {
  r.status = s;
  r.reason = reason;
  r.metrics = Metrics{};
  r.backend_chosen.clear();
  return r;
}

WorkerInfo worker(const std::string& device, Probe probe, const std::string& variant,
                  std::map<std::string, std::string> versions) {
  WorkerInfo w;
  w.device = device;
  w.probe = probe;
  w.variant = variant;
  w.versions = std::move(versions);
  return w;
}

Report base(const std::string& started) {
  Report r;
  r.tool_version = "0.1.0";
  r.git_revision = "0123456789ab";
  r.started_at = started;
  r.host = {{"hostname", "ws-lab-07"},
            {"user", "alice"},
            {"os", "Ubuntu 24.04.1 LTS"},
            {"kernel", "6.8.0-45-generic"}};
  r.environment = {{"HIP_VISIBLE_DEVICES", "0"}, {"PYTORCH_ROCM_ARCH", "gfx1201"}};
  r.suite = "quick";
  r.timings = Timings{4210.5, 180.25, 95.0, 3890.0, 12.5};
  return r;
}

Device gpu(int index, std::string name, std::string gfx, std::string family, int64_t vram,
           std::string bdf) {
  Device d;
  d.index = index;
  d.name = std::move(name);
  d.gfx_target = gfx;
  d.gfx_arch_name = gfx;
  d.family = std::move(family);
  d.matrix_instructions = "WMMA";
  d.wave_size = 32;
  d.compute_units = 64;
  d.vram_total_bytes = vram;
  d.pci_bdf = std::move(bdf);
  d.driver_version = "6.10.5";
  d.kfd_node = "1";
  d.render_node = "/dev/dri/renderD128";
  return d;
}

} // namespace

Report crash_with_known_issue() {
  Report r = base("2026-09-14T09:30:00Z");
  r.versions = {{"rocm", "7.0.2"}, {"hip_runtime", "7.0.51831"}, {"python", "3.12.3"},
                {"aotriton", "0.11b"}};
  r.inventory.devices.push_back(gpu(0, "AMD Radeon RX 9070 XT", "gfx1201", "RDNA4",
                                    int64_t{16} << 30, "0000:03:00.0"));
  r.inventory.runtime = {{"hip_runtime_version", "7.0.51831"}};
  r.targets = {"cuda:0"};
  const std::map<std::string, std::string> torch_v = {{"torch", "2.9.0+rocm7.0"},
                                                      {"hip", "7.0.51831"}};
  for (const char* v : {"flash[ck]", "flash", "mem_efficient", "math"})
    r.workers.push_back(worker("cuda:0", Probe::torch, v, torch_v));
  r.workers.push_back(worker("cuda:0", Probe::reference, "ref-flash", {{"hip", "7.0.51831"}}));

  const std::vector<Case> cases = {make_case(DType::f16, 128, 64), make_case(DType::f16, 1024, 128, true),
                                   make_case(DType::bf16, 128, 64), make_case(DType::bf16, 1024, 128, true)};
  const std::string ck_stderr =
      "[W914 09:30:02] Warning: Attempting to use CK on an unsupported architecture! Cannot set "
      "backend to CK\n"
      "/pytorch/aten/src/ATen/native/transformers/hip/flash_attn/ck/launch_kernel_pt.hpp:21: "
      "kentry_pt: Device-side assertion `false && \"Fatal! Attempting to call a CK SDPA kernel on "
      "unsupported hardware\"' failed.\n"
      ":0:rocdevice.cpp            :3020: 12345678 us: [pid:4242 tid:0x7f] Callback: Queue 0x7f00 "
      "aborting with error : HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware "
      "exception. code: 0x1016\n";
  for (size_t i = 0; i < cases.size(); ++i) {
    CaseResult c = pass("cuda:0", Probe::torch, "flash[ck]", cases[i], 0.1);
    if (i == 0) {
      c = with_status(c, Status::crash, "worker died by SIGABRT while running the case");
      c.process_end = ProcessEnd{std::nullopt, 6, "SIGABRT", true, false};
      c.stderr_tail = ck_stderr;
      c.signatures = {"hsa-hardware-exception"};
    } else {
      c = with_status(c, Status::skipped, "device unhealthy after " + cases[0].id());
    }
    r.results.push_back(c);
  }
  const double t[] = {0.081, 0.412, 0.083, 0.405};
  for (size_t i = 0; i < cases.size(); ++i)
    r.results.push_back(pass("cuda:0", Probe::torch, "flash", cases[i], t[i]));
  for (size_t i = 0; i < cases.size(); ++i)
    r.results.push_back(pass("cuda:0", Probe::torch, "mem_efficient", cases[i], t[i] * 1.3));
  for (size_t i = 0; i < cases.size(); ++i)
    r.results.push_back(pass("cuda:0", Probe::torch, "math", cases[i], t[i] * 6.5));
  for (size_t i = 0; i < cases.size(); ++i)
    r.results.push_back(pass("cuda:0", Probe::reference, "ref-flash", cases[i], t[i] * 20));
  return r;
}

Report timeout_and_mismatch() {
  Report r = base("2026-09-14T10:00:00Z");
  r.versions = {{"rocm", "6.4.1"}, {"python", "3.11.9"}};
  r.environment = {{"HIP_VISIBLE_DEVICES", "0"}, {"OMP_NUM_THREADS", "8"}};
  r.inventory.devices.push_back(gpu(0, "AMD Radeon RX 7900 XTX", "gfx1100", "RDNA3",
                                    int64_t{24} << 30, "0000:0c:00.0"));
  r.targets = {"cuda:0"};
  const std::map<std::string, std::string> py_v = {
      {"torch", "2.9.1+rocm6.4"}, {"python", "3.11.9"}, {"aotriton", "0.11b"}};
  for (const char* v : {"flash", "mem_efficient", "math"})
    r.workers.push_back(worker("cuda:0", Probe::python, v, py_v));
  r.workers[0].restarts = 1;

  const std::vector<Case> cases = {make_case(DType::f16, 256, 64), make_case(DType::f16, 2048, 128, true),
                                   make_case(DType::f32, 256, 64)};
  // flash: fp16 pass, the long causal case hangs; fp32 refused.
  r.results.push_back(pass("cuda:0", Probe::python, "flash", cases[0], 0.12));
  CaseResult hang = with_status(pass("cuda:0", Probe::python, "flash", cases[1], 1),
                                Status::timeout, "no result within 30 s; worker killed");
  hang.process_end = ProcessEnd{std::nullopt, 9, "SIGKILL", false, true};
  hang.stderr_tail = "HW Exception by GPU node-1 (Agent handle: 0x5633c0a1e2b0) reason :GPU Hang\n";
  r.results.push_back(hang);
  r.results.push_back(with_status(pass("cuda:0", Probe::python, "flash", cases[2], 1),
                                  Status::unsupported,
                                  "No available kernel. Aborting execution. (Expected query, key "
                                  "and value to all be of dtype: {Half, BFloat16})"));
  r.results.back().attempt = 1;
  // mem_efficient: NaN on fp16, mismatch on the causal case, fp32 passes.
  CaseResult nan = with_status(pass("cuda:0", Probe::python, "mem_efficient", cases[0], 0.2),
                               Status::nonfinite, "512 NaN in the output, the oracle has none");
  nan.metrics.max_abs_err = std::numeric_limits<double>::quiet_NaN();
  nan.metrics.rel_l2_err = std::numeric_limits<double>::infinity();
  nan.metrics.nan_count = 512;
  nan.metrics.time_ms = 0.2;
  nan.tolerance = tol_for(DType::f16);
  r.results.push_back(nan);
  CaseResult bad = with_status(pass("cuda:0", Probe::python, "mem_efficient", cases[1], 0.9),
                               Status::mismatch, "3.2% of outputs outside tolerance");
  bad.metrics.max_abs_err = 0.4375;
  bad.metrics.rel_l2_err = 0.061;
  bad.metrics.frac_outside_tol = 0.032;
  bad.metrics.time_ms = 0.9;
  bad.tolerance = tol_for(DType::f16);
  r.results.push_back(bad);
  r.results.push_back(pass("cuda:0", Probe::python, "mem_efficient", cases[2], 0.31));
  const double t[] = {0.55, 9.8, 0.9};
  for (size_t i = 0; i < cases.size(); ++i)
    r.results.push_back(pass("cuda:0", Probe::python, "math", cases[i], t[i]));
  // Compiled cells of the compile family: rows of their own, never merged with the eager ones.
  for (const char* v : {"flash", "math"}) {
    r.workers.push_back(worker("cuda:0", Probe::python, v, py_v));
    r.workers.back().mode = Mode::compiled;
    r.workers.back().facts["compile_backend"] = "aot_eager";
    r.results.push_back(pass("cuda:0", Probe::python, v, cases[0], 0.14));
    r.results.back().mode = Mode::compiled;
  }
  return r;
}

Report all_unsupported() {
  Report r = base("2026-09-14T11:00:00Z");
  r.versions = {{"rocm", "6.4.1"}, {"torch", "2.8.0+rocm6.4"}, {"python", "3.12.3"}};
  Device d = gpu(0, "AMD Radeon RX 6800 XT", "gfx1030", "RDNA2", int64_t{16} << 30, "0000:2d:00.0");
  d.matrix_instructions = "none";
  r.inventory.devices.push_back(d);
  r.targets = {"cuda:0"};
  const std::map<std::string, std::string> v = {{"torch", "2.8.0+rocm6.4"}};
  r.workers.push_back(worker("cuda:0", Probe::torch, "flash", v));
  r.workers.push_back(worker("cuda:0", Probe::torch, "mem_efficient", v));
  WorkerInfo py = worker("cuda:0", Probe::python, "flash", {});
  py.available = "no python with torch found (set SDPA_DOCTOR_PYTHON)";
  r.workers.push_back(py);
  const std::vector<Case> cases = {make_case(DType::f16, 128, 64), make_case(DType::bf16, 128, 64),
                                   make_case(DType::f16, 512, 128, false, 8, 2)};
  for (const char* variant : {"flash", "mem_efficient"}) {
    const std::string backend = std::string(variant) == "flash" ? "Flash" : "Mem Efficient";
    for (const Case& c : cases) {
      CaseResult x = with_status(pass("cuda:0", Probe::torch, variant, c, 1), Status::unsupported,
                                 "No available kernel. Aborting execution.");
      x.warnings = {backend + " attention was not compiled for current AMD GPU architecture. "
                              "Attempting to run on architecture gfx1030"};
      r.results.push_back(x);
    }
  }
  return r;
}

// A machine without a GPU and a CPU build of torch: the CPU probe target only.
Report cpu_host(const std::string& started) {
  Report r = base(started);
  r.host.erase("user");
  r.environment = {{"OMP_NUM_THREADS", "4"}};
  r.versions = {{"torch", "2.13.0+cpu"}, {"python", "3.11.2"}};
  r.inventory.no_gpu_reason = "/dev/kfd does not exist: the amdgpu kernel driver is not loaded";
  r.targets = {"cpu"};
  return r;
}

Report no_gpu() {
  Report r = cpu_host("2026-09-14T12:00:00Z");
  r.inventory.sources_status = {{"hip", "hipGetDeviceCount: no ROCm-capable device is detected"},
                                {"sysfs", "no KFD topology nodes with a GPU"}};
  Finding f;
  f.id = "kfd-missing";
  f.severity = Severity::problem;
  f.message = "/dev/kfd does not exist";
  f.remedy = "load the amdgpu driver (modprobe amdgpu) or pass the device into the container";
  r.inventory.findings.push_back(f);
  const std::map<std::string, std::string> v = {{"torch", "2.13.0+cpu"}};
  for (const char* name : {"flash", "math"}) r.workers.push_back(worker("cpu", Probe::torch, name, v));
  r.workers.push_back(worker("cpu", Probe::reference, "ref-math", {}));
  const std::vector<Case> cases = {make_case(DType::f32, 64, 32), make_case(DType::bf16, 64, 32, true),
                                   make_case(DType::f32, 96, 64, false, 4, 2)};
  const double t[] = {0.21, 0.34, 0.45};
  for (size_t i = 0; i < cases.size(); ++i)
    r.results.push_back(pass("cpu", Probe::torch, "flash", cases[i], t[i]));
  for (size_t i = 0; i < cases.size(); ++i)
    r.results.push_back(pass("cpu", Probe::torch, "math", cases[i], t[i] * 1.8));
  for (size_t i = 0; i < cases.size(); ++i)
    r.results.push_back(pass("cpu", Probe::reference, "ref-math", cases[i], t[i] * 4));
  return r;
}

Report budget_spent() {
  Report r = cpu_host("2026-09-14T13:00:00Z");
  const std::map<std::string, std::string> v = {{"torch", "2.13.0+cpu"}};
  r.workers.push_back(worker("cpu", Probe::torch, "flash", v));
  r.workers.back().restarts = 4;
  r.workers.push_back(worker("cpu", Probe::torch, "math", v));
  r.workers.push_back(
      worker("cpu", Probe::python, "flash", {{"torch", "2.13.0+cpu"}, {"python", "3.11.2"}}));
  std::vector<Case> cases;
  for (DType d : {DType::f16, DType::bf16, DType::f32})
    for (int64_t l : {16, 64}) cases.push_back(make_case(d, l, 32, false, 2, 2));
  cases.push_back(make_case(DType::f16, 64, 32, true, 2, 2));
  cases.push_back(make_case(DType::f32, 64, 32, true, 2, 2));
  // libtorch flash aborts on every case it starts: five workers die, the budget (4 restarts) is
  // spent, the last three cases are not run.
  for (size_t i = 0; i < cases.size(); ++i) {
    CaseResult c = pass("cpu", Probe::torch, "flash", cases[i], 0.1);
    if (i < 5) {
      c = with_status(c, Status::crash, "worker died by SIGABRT while running the case");
      c.process_end = ProcessEnd{std::nullopt, 6, "SIGABRT", true, false};
      c.attempt = int(i);
      c.stderr_tail = fmt::format("[W914 13:00:0{}] flash: starting {}\nterminate called: abort "
                                  "in the flash kernel\n",
                                  i, c.case_id);
    } else {
      c = with_status(c, Status::skipped, "restart budget spent after " + cases[4].id());
    }
    r.results.push_back(c);
  }
  for (const Case& c : cases) r.results.push_back(pass("cpu", Probe::torch, "math", c, 0.2));
  // python flash is wrong on the causal cases only.
  for (const Case& c : cases) {
    CaseResult x = pass("cpu", Probe::python, "flash", c, 0.15);
    if (c.causal) {
      x = with_status(
          x, Status::mismatch,
          fmt::format("{}% of outputs outside tolerance", c.dtype == DType::f16 ? 12 : 31));
      x.metrics.max_abs_err = 0.25;
      x.metrics.rel_l2_err = 0.04;
      x.metrics.frac_outside_tol = c.dtype == DType::f16 ? 0.12 : 0.31;
      x.tolerance = tol_for(c.dtype);
    }
    r.results.push_back(x);
  }
  Shrink everywhere;
  everywhere.device = "cpu";
  everywhere.probe = Probe::torch;
  everywhere.variant = "flash";
  everywhere.status = Status::crash;
  everywhere.original_case = cases[0].id();
  everywhere.verdict = "everywhere";
  everywhere.rule = "flash on cpu: crash for every case tried";
  everywhere.minimal = make_case(DType::f16, 1, 8, false, 1, 1);
  everywhere.tried = {{everywhere.minimal->id(), Status::crash}};
  everywhere.seconds = 1.5;
  Shrink causal = everywhere;
  causal.probe = Probe::python;
  causal.status = Status::mismatch;
  causal.original_case = cases[6].id();
  causal.verdict = "boundary";
  causal.rule = "flash on cpu: mismatch only when causal";
  causal.conditions = {ShrinkCondition{"causal", "=", 1, "causal", true}};
  causal.minimal = make_case(DType::f16, 2, 8, true, 1, 1);
  causal.tried = {{causal.minimal->id(), Status::mismatch}, {cases[0].id(), Status::pass}};
  causal.seconds = 2.25;
  r.shrinks = {everywhere, causal};
  return r;
}

void advise(Report& report) {
  static const auto shipped =
      advice::load_known_issues(sdpa_test::source_path("data/known_issues.json"));
  if (!shipped) throw std::runtime_error(shipped.error().message);
  advice::AdviceOptions options;
  options.target = parse_case_spec("dtype=bf16,b=1,h=32,l=8192,d=128").value();
  advice::AdviceResult a = advice::advise(report, *shipped, options);
  report.findings = a.findings;
  report.recommendations = a.recommendations;
  report.known_issues = a.known_issues;
  report.exit_code = advice::any_failing(report.results) ? exit_code::failures : exit_code::ok;
}

std::vector<Named> all_fixtures() {
  std::vector<Named> out = {{"crash_known_issue", crash_with_known_issue()},
                            {"timeout_mismatch", timeout_and_mismatch()},
                            {"all_unsupported", all_unsupported()},
                            {"no_gpu", no_gpu()},
                            {"budget_spent", budget_spent()}};
  for (Named& n : out) {
    advise(n.report);
    // The advice's re-runs as `check --verify` records them: a fallback, and one not re-run.
    if (n.report.recommendations.empty()) continue;
    Recommendation& rec = n.report.recommendations.front();
    const int cases = int(rec.case_ids.size());
    if (n.name == "crash_known_issue") {
      rec.verification = Verification{true, cases, cases, 2.4, "a fresh python worker", ""};
      rec.rejected = {{"prefer-ck",
                       fmt::format("{} of {} cases failed under these flags; first {}: crash: "
                                   "worker killed by SIGABRT",
                                   cases, cases, rec.case_ids.front())}};
      n.report.timings.verify_ms = 5100;
    } else if (n.name == "no_gpu") {
      rec.verification = Verification{false, 0, 0, 0, "a fresh python worker",
                                      "the python probe is not part of this check"};
    }
  }
  return out;
}

} // namespace sdpa_fixtures
