#include <malloc.h>
#include "workers/worker.hpp"
#include "core/status.hpp"

#include "kernels/kernels.hpp"
#include "loader/loader.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fcntl.h>

namespace sdpa_doctor::workers {

Expected<WorkerArgs> parse_worker_args(int argc, const char* const* argv) {
  WorkerArgs args;
  bool have_variant = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) return make_error(fmt::format("'{}' needs a value", flag));
    const std::string_view value = argv[++i];
    if (flag == "--device") {
      if (!cases::is_valid_target(value))
        return make_error(fmt::format("invalid --device '{}' (cpu or cuda:N)", value));
      args.device = std::string(value);
    } else if (flag == "--variant") {
      auto v = parse_variant(value);
      if (!v) return v.error();
      args.variant = *v;
      have_variant = true;
    } else if (flag == "--results-fd") {
      int fd = -1;
      auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), fd);
      if (ec != std::errc{} || ptr != value.data() + value.size() || fd < 3)
        return make_error(fmt::format("invalid --results-fd '{}' (a descriptor >= 3: stdout and "
                                      "stderr belong to the libraries)",
                                      value));
      args.results_fd = fd;
    } else if (flag == "--cases") {
      args.cases_path = std::string(value);
    } else {
      return make_error(fmt::format("unknown argument '{}' (--device, --variant, --results-fd, "
                                    "--cases)",
                                    flag));
    }
  }
  if (args.device.empty()) return make_error("missing --device");
  if (!have_variant) return make_error("missing --variant");
  if (args.results_fd < 0) return make_error("missing --results-fd");
  if (args.cases_path.empty()) return make_error("missing --cases");
  if (::fcntl(args.results_fd, F_GETFD) < 0)
    return make_error(fmt::format("--results-fd {} is not an open descriptor", args.results_fd));
  return args;
}

MaskedRowSemantics masked_row_semantics_of(const std::map<std::string, std::string>& versions) {
  const auto torch = versions.find("torch");
  if (torch == versions.end()) return MaskedRowSemantics::zero; // our own kernels
  int major = 0, minor = 0;
  if (std::sscanf(torch->second.c_str(), "%d.%d", &major, &minor) != 2)
    return MaskedRowSemantics::zero;
  return major > 2 || (major == 2 && minor >= 5) ? MaskedRowSemantics::zero
                                                 : MaskedRowSemantics::nan;
}

void set_timing(Metrics& metrics, std::vector<double> times_ms) {
  metrics.timed_runs = int(times_ms.size());
  if (times_ms.empty()) return;
  std::sort(times_ms.begin(), times_ms.end());
  const size_t n = times_ms.size();
  metrics.time_ms = n % 2 ? times_ms[n / 2] : 0.5 * (times_ms[n / 2 - 1] + times_ms[n / 2]);
  metrics.time_min_ms = times_ms.front();
}

namespace {

// Once torch or our kernels are loaded, every HIP runtime this process maps: two are a broken
// install (the advice says so). Nothing is said where there is none (a CPU or CUDA torch).
void add_mapped_hip_runtimes(std::map<std::string, std::string>& facts) {
  const std::vector<std::string> files = loader::mapped_files("libamdhip64");
  if (files.empty()) return;
  facts["hip_runtime_count"] = std::to_string(files.size());
  facts["hip_runtimes"] = fmt::format("{}", fmt::join(files, ", "));
}

// The forward's float64 oracle: the doctor's file, whose fully masked rows are 0, else computed
// here under `semantics` (a masked_rows case under other semantics computes its own).
Expected<std::vector<double>> oracle_values(const protocol::CaseLine& line, const HostInputs& inputs,
                                            MaskedRowSemantics semantics) {
  const bool own_oracle = line.kase.masked_rows && semantics != MaskedRowSemantics::zero;
  if (!line.oracle_path.empty() && !own_oracle)
    return read_oracle_file(line.oracle_path, size_t(line.kase.q_elements()));
  std::vector<double> oracle = compute_oracle(line.kase.forward_only(), inputs);
  kernels::apply_masked_row_semantics(line.kase, inputs, semantics, oracle);
  return oracle;
}

// A case's result event from what was measured (the doctor judges it: cases::judge), or with
// the error that kept the case from being measured.
protocol::ResultEvent measured_result(const protocol::CaseLine& line,
                                      const Expected<Measured>& measured) {
  protocol::ResultEvent ev;
  ev.case_id = line.id;
  ev.tolerance = line.tolerance;
  if (!measured) {
    ev.status = Status::error;
    ev.reason = measured.error().message;
    return ev;
  }
  ev.measured = *measured;
  ev.awaiting_verdict = true;
  return ev;
}

// The forward's output measured against the oracle (the doctor's file, else computed here), after
// a planted corruption. The doctor's file has fully masked rows at 0: a masked_rows case under
// other semantics computes its own. The semantics used goes into the result in `evaluate`.
Expected<TensorErrors> measure_output(const protocol::CaseLine& line, const HostInputs& inputs,
                                      std::vector<float> output, FaultAction corrupt,
                                      MaskedRowSemantics semantics) {
  const size_t n = size_t(line.kase.q_elements());
  if (output.size() != n)
    return make_error(fmt::format("the backend returned {} values, expected {}", output.size(), n));
  corrupt_output(corrupt, output, line.kase);
  auto oracle = oracle_values(line, inputs, semantics);
  if (!oracle) return oracle.error();
  return cases::measure_tensor(output.data(), oracle->data(), n, line.tolerance,
                               cases::masked_rows_of(line.kase));
}

// A dropout case's three outputs measured against the probabilities (the oracle of its forward:
// V is the identity), after a planted corruption of the checked run's output.
Expected<Measured> measure_dropout_output(const protocol::CaseLine& line, const HostInputs& inputs,
                                          CaseRun& run, FaultAction corrupt,
                                          MaskedRowSemantics semantics) {
  const size_t n = size_t(line.kase.q_elements());
  if (run.output.size() != n || run.same_seed_output.size() != n ||
      run.other_seed_output.size() != n)
    return make_error(fmt::format("the dropout runs returned {}, {} and {} values, expected {} each",
                                  run.output.size(), run.same_seed_output.size(),
                                  run.other_seed_output.size(), n));
  corrupt_output(corrupt, run.output, line.kase);
  auto probs = oracle_values(line, inputs, semantics);
  if (!probs) return probs.error();
  return cases::measure_dropout({run.output.data(), run.same_seed_output.data(),
                                 run.other_seed_output.data()},
                                probs->data(), n, line.kase.dropout_p(), line.tolerance);
}

// dq, dk and dv measured against the float64 oracle's gradients for the same upstream gradient
// (computed here: gradients are not cached), after a planted corruption of dq.
Expected<Measured> measure_backward(const protocol::CaseLine& line, const HostInputs& inputs,
                                    CaseRun& run, FaultAction corrupt,
                                    MaskedRowSemantics semantics) {
  const Case& c = line.kase;
  const size_t nq = size_t(c.q_elements()), nkv = size_t(c.kv_elements());
  if (run.dq.size() != nq || run.dk.size() != nkv || run.dv.size() != nkv)
    return make_error(fmt::format("the backward returned {}, {} and {} gradient values, expected "
                                  "{}, {} and {}",
                                  run.dq.size(), run.dk.size(), run.dv.size(), nq, nkv, nkv));
  corrupt_output(corrupt, run.dq, c);
  const std::vector<double> dout(inputs.grad_out.begin(), inputs.grad_out.end());
  kernels::OracleGradients want = kernels::oracle_attention_backward(c, inputs, dout);
  kernels::apply_masked_row_semantics(c, inputs, semantics, want.dq);
  return cases::measure_gradients({"dq", run.dq.data(), want.dq.data(), nq, cases::masked_rows_of(c)},
                                  {"dk", run.dk.data(), want.dk.data(), nkv},
                                  {"dv", run.dv.data(), want.dv.data(), nkv},
                                  line.gradient_tolerance);
}

// What a case measured from what the executor reported. `forward` is a backward case's forward,
// measured when the executor reached its backward.
Expected<Measured> measure_case(const protocol::CaseLine& line, const HostInputs& inputs,
                                CaseRun& run, const std::optional<Expected<TensorErrors>>& forward,
                                FaultAction forward_corrupt, FaultAction backward_corrupt,
                                MaskedRowSemantics semantics) {
  if (line.kase.dropout_percent > 0)
    return measure_dropout_output(line, inputs, run, forward_corrupt, semantics);
  Expected<TensorErrors> out =
      forward ? *forward
              : measure_output(line, inputs, std::move(run.output), forward_corrupt, semantics);
  if (!out) return out.error();
  Measured measured = output_only(*out);
  measured.repeats = run.repeats;
  if (!line.kase.backward) return measured;
  auto grads = measure_backward(line, inputs, run, backward_corrupt, semantics);
  if (!grads) return grads.error();
  measured.dq = grads->dq;
  measured.dk = grads->dk;
  measured.dv = grads->dv;
  return measured;
}

// The result of a case from what the executor reported.
protocol::ResultEvent evaluate(const protocol::CaseLine& line, const HostInputs& inputs, CaseRun run,
                               const std::optional<Expected<TensorErrors>>& forward,
                               FaultAction forward_corrupt, FaultAction backward_corrupt,
                               MaskedRowSemantics semantics) {
  protocol::ResultEvent ev;
  if (run.status != Status::pass) {
    ev.case_id = line.id;
    ev.tolerance = line.tolerance;
    ev.status = run.status;
    ev.reason = run.reason;
    if (forward) { // its backward failed: the forward was measured (the doctor judges it)
      ev.reason = "in backward: " + run.reason;
      if (*forward) ev.measured = output_only(**forward);
      else ev.forward = Status::error, ev.backward = run.status;
    } else if (line.kase.backward) {
      ev.forward = run.status;
    }
  } else {
    ev = measured_result(line, measure_case(line, inputs, run, forward, forward_corrupt,
                                            backward_corrupt, semantics));
  }
  if (line.kase.masked_rows) ev.masked_rows = semantics;
  ev.backend_chosen = run.backend_chosen;
  ev.warnings = std::move(run.warnings);
  set_timing(ev.metrics, std::move(run.times_ms));
  return ev;
}

} // namespace

int serve_cases(const WorkerArgs& args, CaseExecutor& executor, const WorkerOptions& options) {
  // A reader that went away must not kill us mid-case: the write fails and we stop instead.
  std::signal(SIGPIPE, SIG_IGN);
  protocol::ProtocolWriter out(args.results_fd);
  std::vector<PlantedFault> faults;
  if (options.honour_test_fault) {
    auto f = planted_faults_from_environment();
    if (!f) {
      std::fprintf(stderr, "%s\n", f.error().message.c_str());
      return exit_code::usage;
    }
    faults = std::move(*f);
  }
  auto lines = protocol::read_cases_file(args.cases_path);
  HelloInfo info = executor.hello();
  add_mapped_hip_runtimes(info.facts);
  if (!options.started.empty()) info.facts["started"] = options.started;
  out.hello({info.worker, args.device, args.variant.name(), info.versions, info.facts});
  if (!lines) {
    std::fprintf(stderr, "%s\n", lines.error().message.c_str());
    return exit_code::usage;
  }
  const std::string variant = args.variant.name();
  const MaskedRowSemantics semantics = masked_row_semantics_of(info.versions);
  for (const protocol::CaseLine& line : *lines) {
    if (!out.begin(line.id)) return exit_code::failures;
    const PlantedFault* hit = matching_fault(faults, variant, line.kase, line.id);
    const bool faulty = hit != nullptr;
    const PlantedFault fault = faulty ? *hit : PlantedFault{};
    const bool in_backward = fault.stage == PlantedFault::Stage::backward;
    const FaultAction forward_fault = faulty && !in_backward ? fault.action : FaultAction::none;
    const FaultAction backward_fault = faulty && in_backward ? fault.action : FaultAction::none;
    trigger_process_fault(forward_fault);
    CaseRun run;
    HostInputs inputs;
    // A backward case's forward, measured once its backward starts.
    std::optional<Expected<TensorErrors>> forward;
    const EnteringBackward entering_backward = [&](const std::vector<float>& output) {
      forward = measure_output(line, inputs, output, forward_fault, semantics);
      protocol::PhaseEvent phase{line.id, "backward", Status::error, {}, {}};
      if (*forward) phase.measured = output_only(**forward);
      else phase.forward_reason = forward->error().message;
      out.phase(phase);
      trigger_process_fault(backward_fault);
    };
    if (!info.unavailable.empty()) {
      run.status = Status::unsupported;
      run.reason = info.unavailable;
    } else {
      try {
        inputs = make_inputs(line.kase);
        run = executor.run(line, inputs, entering_backward);
      } catch (const std::exception& e) {
        run = CaseRun{};
        run.status = Status::error;
        run.reason = e.what();
      }
    }
    protocol::ResultEvent ev;
    try {
      ev = evaluate(line, inputs, std::move(run), forward, forward_fault, backward_fault,
                    semantics);
    } catch (const std::exception& e) {
      ev.case_id = line.id;
      ev.status = Status::error;
      ev.reason = fmt::format("measuring against the oracle failed: {}", e.what());
    }
    if (info.unavailable.empty()) ev.canary = executor.canary();
    if (faulty && !ev.canary.empty()) ev.canary = planted_canary(fault.action, std::move(ev.canary));
    if (!out.result(ev)) return exit_code::failures;
    if (protocol::canary_failed(ev.canary)) return protocol::k_exit_canary_failed; // no bye: a fresh worker goes on
  }
  out.bye();
  return 0;
}

int worker_main(int argc, const char* const* argv, const ExecutorFactory& make_executor,
                const WorkerOptions& options) {
  auto args = parse_worker_args(argc, argv);
  if (!args) {
    std::fprintf(stderr, "%s: %s\n", argc > 0 ? argv[0] : "worker", args.error().message.c_str());
    return exit_code::usage;
  }
  // Libraries latch some variables once per process (TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL,
  // TORCH_ROCM_FA_PREFER_CK): set them before the executor loads anything. The runner's own
  // environment wins when it already set them.
  for (const auto& [name, value] : args->variant.environment()) ::setenv(name.c_str(), value.c_str(), 0);
  // Freed case buffers stay in the heap for the next case: a fresh process would otherwise map
  // and fault in every big buffer anew (glibc's mmap threshold starts at 128 KiB), about half
  // of a worker's page faults over the quick suite and most of its isolation overhead.
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20); // glibc's largest allowed value
  ::mallopt(M_TRIM_THRESHOLD, 256 << 20);
  try {
    auto executor = make_executor(*args);
    return serve_cases(*args, *executor, options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker failed: %s\n", e.what());
    return exit_code::internal;
  }
}

} // namespace sdpa_doctor::workers
