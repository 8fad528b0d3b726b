// Isolation overhead on the quick suite: the reference worker's loop run in this process (results
// to /dev/null) against the same cases run by the isolation runner in a child process.
//   bench_isolation_overhead [--variant ref-flash] [--suite quick] [--rounds 3]
//                            [--side both|inproc|isolated]   (one side alone, e.g. under perf stat)
#include "isolate/isolate.hpp"
#include "cases/cases.hpp"
#include "protocol/protocol.hpp"
#include "workers/reference_worker.hpp"
#include "cases/tolerance.hpp"
#include "workers/worker.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <unistd.h>

using namespace sdpa_doctor;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string variant = "ref-flash", suite = "quick", side = "both";
  int rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--variant")) variant = argv[i + 1];
    else if (!std::strcmp(argv[i], "--suite")) suite = argv[i + 1];
    else if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--side")) side = argv[i + 1];
  }
  auto cases = cases::suite_cases(suite);
  if (!cases) return fmt::print(stderr, "{}\n", cases.error().message), 2;
  const fs::path dir = fs::temp_directory_path() / fmt::format("sdpa-bench-{}", getpid());
  fs::create_directories(dir);

  // The oracle is shared by both sides, as in a doctor run.
  std::vector<std::string> lines;
  std::vector<isolate::PlannedCase> planned;
  for (const Case& c : *cases) {
    const std::string oracle = (dir / (c.id() + ".f64")).string();
    (void)workers::write_oracle_file(oracle, workers::compute_oracle(c));
    const Tolerance t = cases::default_tolerance(c.dtype);
    lines.push_back(protocol::make_case_line(c, t, cases::gradient_tolerance(t), oracle, 1, 3));
    planned.push_back({c.id(), lines.back(), std::chrono::seconds(120)});
  }
  const std::string cases_path = (dir / "cases.jsonl").string();
  (void)protocol::write_cases_file(cases_path, lines);
  const std::string worker = (fs::path(argv[0]).parent_path().parent_path() /
                              "sdpa-doctor-ref-worker").string();

  std::vector<double> inproc, isolated;
  for (int r = 0; r < rounds; ++r) {
    if (side != "isolated") {
      int sink = ::open("/dev/null", O_WRONLY);
      workers::WorkerArgs wa;
      wa.device = "cpu";
      wa.variant = *parse_variant(variant);
      wa.results_fd = sink;
      wa.cases_path = cases_path;
      auto executor = workers::make_reference_executor(wa);
      const auto t0 = Clock::now();
      workers::serve_cases(wa, *executor, {});
      inproc.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      ::close(sink);
    }
    if (side != "inproc") {
      isolate::Command cmd;
      cmd.argv = {worker, "--device", "cpu", "--variant", variant};
      isolate::RunnerOptions ro;
      ro.judge = cases::judge_worker_event;
      const auto t0 = Clock::now();
      auto report = isolate::run_worker(cmd, planned, ro);
      isolated.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      for (const auto& o : report.outcomes)
        if (o.status != Status::pass)
          fmt::print(stderr, "warning: {} {}: {}\n", o.case_id, to_string(o.status), o.reason);
    }
  }
  if (inproc.empty()) inproc.push_back(0);
  if (isolated.empty()) isolated.push_back(0);
  std::sort(inproc.begin(), inproc.end());
  std::sort(isolated.begin(), isolated.end());
  const double a = inproc[inproc.size() / 2], b = isolated[isolated.size() / 2];
  fmt::print("isolation overhead, {} suite ({} cases), {}, median of {} rounds:\n", suite,
             cases->size(), variant, rounds);
  fmt::print("  in-process  {:8.1f} ms\n  isolated    {:8.1f} ms\n  ratio       {:8.3f}x  "
             "({:.2f} ms per case)\n",
             a, b, b / a, (b - a) / double(cases->size()));
  fs::remove_all(dir);
  return 0;
}
