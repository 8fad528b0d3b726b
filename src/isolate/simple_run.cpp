#include "isolate/isolate.hpp"
#include "isolate/process.hpp"

#include <unistd.h>

namespace sdpa_doctor::isolate {

namespace {
constexpr std::size_t k_simple_capture = std::size_t{16} << 20;
constexpr std::chrono::milliseconds k_grace{2'000};
constexpr std::chrono::milliseconds k_kill_wait{10'000};
} // namespace

Expected<SimpleRun> run_simple(const Command& cmd, std::chrono::milliseconds deadline,
                               const std::atomic<bool>* stop) {
  detail::SpawnSpec spec;
  spec.argv = cmd.argv;
  spec.env = child_environment(cmd, environ);
  auto spawned = detail::Child::spawn(spec);
  if (!spawned) return spawned.error();
  auto& child = *spawned.value();

  detail::TailBuffer out(k_simple_capture), err(k_simple_capture);
  detail::Sink sink = [&](detail::Stream s, std::string_view data) {
    (s == detail::Stream::out ? out : err).append(data);
  };
  SimpleRun run;
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (!child.exited()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    run.stopped = stop && stop->load();
    if (left.count() <= 0 || run.stopped) {
      run.timed_out = !run.stopped;
      if (!child.terminate(k_grace, k_kill_wait, sink))
        return make_error("process survived SIGKILL (stuck in the kernel)");
      break;
    }
    child.pump(std::min(left, std::chrono::milliseconds(100)), sink);
  }
  run.end = child.finish(detail::k_drain, sink);
  run.out = out.str();
  run.err = err.str();
  return run;
}

} // namespace sdpa_doctor::isolate
