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

// parallel_for over `count_a` items of fn_a, then over `count_b` items of fn_b, on one set of
// threads: a thread starts on fn_b once every fn_a item has finished (it yields while another
// thread finishes one). One thread start per call instead of two: on a loaded machine a new
// thread may wait milliseconds for its first time slice, and a call pays that once per start.
// Neither fn may throw.
template <typename FnA, typename FnB>
void parallel_for_two_phase(int64_t count_a, FnA&& fn_a, int64_t count_b, FnB&& fn_b,
                            int threads) {
  if (threads <= 0) threads = default_thread_count();
  const int64_t n_threads = std::min<int64_t>(threads, std::max(count_a, count_b));
  std::atomic<int64_t> next_a{0}, done_a{0}, next_b{0};
  auto body = [&](int worker) {
    for (int64_t i = next_a.fetch_add(1, std::memory_order_relaxed); i < count_a;
         i = next_a.fetch_add(1, std::memory_order_relaxed)) {
      fn_a(i, worker);
      done_a.fetch_add(1, std::memory_order_release);
    }
    while (done_a.load(std::memory_order_acquire) < count_a) std::this_thread::yield();
    for (int64_t i = next_b.fetch_add(1, std::memory_order_relaxed); i < count_b;
         i = next_b.fetch_add(1, std::memory_order_relaxed))
      fn_b(i, worker);
  };
  std::vector<std::thread> pool;
  if (n_threads > 1) pool.reserve(static_cast<size_t>(n_threads - 1));
  for (int64_t t = 1; t < n_threads; ++t) pool.emplace_back(body, static_cast<int>(t));
  body(0);
  for (auto& t : pool) t.join();
}

} // namespace sdpa_doctor::kernels
