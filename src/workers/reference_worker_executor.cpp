#include "workers/reference_worker.hpp"
#include "core/status.hpp"

#include "kernels/kernels.hpp"
#include "kernels/parallel_for.hpp"

#include <charconv>
#include <cstdio>
#include <string_view>

namespace sdpa_doctor::workers {
namespace {

// The compiler's log as a case warning: its start, the rest left to the worker's stderr log.
std::string log_excerpt(const std::string& log) {
  constexpr size_t k_max = 4000;
  if (log.size() <= k_max) return "compiler log:\n" + log;
  return "compiler log (first " + std::to_string(k_max) + " of " + std::to_string(log.size()) +
         " bytes; the rest is in the worker's stderr log):\n" + log.substr(0, k_max);
}

// -1 for "cpu", N for "cuda:N", -2 for anything else.
int device_index(std::string_view device) {
  if (device == "cpu") return -1;
  constexpr std::string_view prefix = "cuda:";
  if (device.substr(0, prefix.size()) != prefix) return -2;
  const std::string_view digits = device.substr(prefix.size());
  int n = -1;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc{} || ptr != digits.data() + digits.size() || n < 0) return -2;
  return n;
}

class ReferenceExecutor final : public CaseExecutor {
public:
  explicit ReferenceExecutor(const WorkerArgs& args)
      : m_device(device_index(args.device)), m_kernel(kernels::ref_kernel_from_string(
                                                 args.variant.name())) {}

  // On a GPU the kernels are compiled (or found in the cache) here, before the first case: a
  // compile takes seconds, and the start-up deadline, not a case's, is the one sized for it.
  HelloInfo hello() override {
    HelloInfo info;
    info.worker = "reference";
    info.versions["kernels"] = "2";
    info.facts["cpu_threads"] = std::to_string(kernels::default_thread_count());
    if (!m_kernel) {
      info.unavailable = "the reference worker runs ref-math and ref-flash only";
    } else if (m_device == -2) {
      info.unavailable = "invalid device";
    } else if (m_device >= 0) {
      const kernels::GpuKernels& gpu = kernels::gpu_kernels(*m_kernel, m_device);
      info.facts.insert(gpu.facts.begin(), gpu.facts.end());
      if (gpu.refusal) info.unavailable = gpu.failure;
      // The whole compiler log goes to the worker's stderr log; each case carries its start.
      else if (!gpu.failure.empty())
        std::fprintf(stderr, "%s\n%s\n", gpu.failure.c_str(), gpu.compiler_log.c_str());
    }
    return info;
  }

  CaseRun run(const protocol::CaseLine& line, const HostInputs& inputs,
              const EnteringBackward& entering_backward) override {
    CaseRun run;
    if (line.kase.dropout_percent > 0) {
      run.status = Status::unsupported;
      run.reason = "no dropout in our kernels: they are a deterministic witness";
      return run;
    }
    if (std::string scope = kernels::cpu_scope(*m_kernel, line.kase);
        m_device < 0 && !scope.empty()) {
      run.status = Status::unsupported;
      run.reason = std::move(scope);
      return run;
    }
    if (line.kase.backward && m_device >= 0) {
      run.status = Status::unsupported;
      run.reason = "no backward in our GPU kernels yet (ref-math and ref-flash have a CPU backward)";
      return run;
    }
    if (m_device >= 0) {
      const kernels::GpuKernels& gpu = kernels::gpu_kernels(*m_kernel, m_device);
      if (!gpu.failure.empty()) {
        run.status = gpu.refusal ? Status::unsupported : Status::error;
        run.reason = gpu.failure;
        if (!gpu.compiler_log.empty()) run.warnings.push_back(log_excerpt(gpu.compiler_log));
        return run;
      }
    }
    // Every call on the CPU compared with the first (our GPU kernels' calls are not yet).
    cases::RepeatComparer repeats(line.gradient_tolerance);
    int calls = 0;
    const kernels::EachCall each_call = [&](const std::vector<float>& out) {
      if (++calls == 1) repeats.first(out);
      else repeats.later(out);
    };
    auto result = m_device < 0
                      ? kernels::run_cpu(*m_kernel, line.kase, inputs, line.warmup, line.repeat,
                                         0, line.budget_ms, each_call)
                      : kernels::run_gpu(*m_kernel, m_device, line.kase, inputs, line.warmup,
                                         line.repeat);
    if (!result) {
      const std::string& why = result.error().message;
      // "no GPU device ..." and "no ref-flash GPU instance ..." are refusals, not failures.
      run.status = why.rfind("no ", 0) == 0 ? Status::unsupported : Status::error;
      run.reason = why;
      return run;
    }
    run.status = Status::pass;
    run.output = std::move(result->out);
    run.times_ms = std::move(result->times_ms);
    run.backend_chosen = std::string(kernels::to_string(*m_kernel));
    if (m_device < 0) run.repeats = repeats.stats();
    if (line.kase.backward) run_backward(line, inputs, entering_backward, run);
    return run;
  }

private:
  // After the forward (run.output): the backward on the CPU, its times added to the forward's.
  void run_backward(const protocol::CaseLine& line, const HostInputs& inputs,
                    const EnteringBackward& entering_backward, CaseRun& run) {
    entering_backward(run.output);
    // The backward's calls compared with its first, where the forward's all agreed.
    cases::RepeatComparer repeats(line.gradient_tolerance);
    int calls = 0;
    const kernels::EachBackwardCall each_call = [&](const std::vector<float>& dq,
                                                    const std::vector<float>& dk,
                                                    const std::vector<float>& dv) {
      if (++calls == 1) repeats.first({}, dq, dk, dv);
      else repeats.later({}, dq, dk, dv);
    };
    auto grads = kernels::run_cpu_backward(*m_kernel, line.kase, inputs, inputs.grad_out,
                                           std::max(line.warmup - 1, 0), std::max(line.repeat, 1),
                                           0, each_call);
    if (!grads) {
      run.status = Status::error;
      run.reason = grads.error().message;
      run.output.clear();
      return;
    }
    run.dq = std::move(grads->dq);
    run.dk = std::move(grads->dk);
    run.dv = std::move(grads->dv);
    for (size_t i = 0; i < run.times_ms.size() && i < grads->times_ms.size(); ++i)
      run.times_ms[i] += grads->times_ms[i];
    if (run.repeats && run.repeats->differing_call == 0 && repeats.stats().differing_call > 0)
      run.repeats = repeats.stats();
  }

  int m_device;
  std::optional<kernels::RefKernel> m_kernel;
};

} // namespace

std::unique_ptr<CaseExecutor> make_reference_executor(const WorkerArgs& args) {
  return std::make_unique<ReferenceExecutor>(args);
}

bool is_health_check(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "--health-check") return true;
  return false;
}

int run_health_check(int argc, const char* const* argv) {
  std::string_view device;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--health-check") continue;
    if (arg == "--device" && i + 1 < argc) {
      device = argv[++i];
      continue;
    }
    std::fprintf(stderr, "usage: --health-check --device cpu|cuda:N (unexpected '%s')\n", argv[i]);
    return exit_code::usage;
  }
  const int index = device_index(device);
  if (index == -2) {
    std::fprintf(stderr, "usage: --health-check --device cpu|cuda:N\n");
    return exit_code::usage;
  }
  if (index == -1) return 0;
  const kernels::GpuHealth health = kernels::gpu_health_check(index);
  if (health.problem.empty()) return 0;
  if (!health.known) {
    std::fprintf(stderr, "cannot check cuda:%d: %s\n", index, health.problem.c_str());
    return exit_code::health_unknown;
  }
  std::fprintf(stderr, "%s\n", health.problem.c_str());
  return exit_code::failures;
}

} // namespace sdpa_doctor::workers
