// kernels/parallel_for: a tiny fork-join loop over std::thread for the CPU kernels and the oracle.
// Depends on the standard library only (no thread pool, no OpenMP: the worker must not inherit a
// runtime that the libraries it tests also bring).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace sdpa_doctor::kernels {

// Threads to use when the caller passes 0: every hardware thread.
inline int default_thread_count() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

// Calls fn(i, worker) for every i in [0, count), spread over `threads` threads (0 = default);
// worker in [0, threads) names the calling thread, for per-thread scratch. Items are handed out
// one at a time from a shared counter, so uneven items (causal tiles) balance out.
// fn must not throw.
template <typename Fn> void parallel_for(int64_t count, int threads, Fn&& fn) {
  if (threads <= 0) threads = default_thread_count();
  const int64_t n_threads = std::min<int64_t>(threads, count);
  if (n_threads <= 1) {
    for (int64_t i = 0; i < count; ++i) fn(i, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  auto body = [&](int worker) {
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < count;
         i = next.fetch_add(1, std::memory_order_relaxed))
      fn(i, worker);
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(n_threads - 1));
  for (int64_t t = 1; t < n_threads; ++t) pool.emplace_back(body, static_cast<int>(t));
  body(0);
  for (auto& t : pool) t.join();
}

} // namespace sdpa_doctor::kernels
