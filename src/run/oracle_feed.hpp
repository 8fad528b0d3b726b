// run/oracle_feed: the float64 oracle, computed beside the run instead of before it. The plan's
// cases are cut into batches (small first, so the first probe starts within seconds); a producer
// thread computes each batch's oracle files while the targets run the batch before, at most
// `window` batches ahead of the slowest target, and deletes a batch's files once every target has
// finished it: memory and disk stay bounded by a few batches, however long the suite. The first
// batch is about 2 GFLOP of oracle work and each next one twice as big (at most an eighth of the
// plan and 256 MiB of oracle output); the quick suite is one batch. SIGINT stops the oracle within
// one step of its loop. Internal to run.
#pragma once

#include "core/case.hpp"
#include "run/oracle_cache.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sdpa_doctor::run {

// Cuts `cases` into consecutive batches: the first holds about `first_flop` of oracle work, each
// next one twice the one before, up to an eighth of the whole (or `first_flop`, if more), and no
// batch holds more than `max_bytes` of oracle output. Indexes into `cases`, in order.
std::vector<std::vector<size_t>> oracle_batches(const std::vector<Case>& cases,
                                                double first_flop = 2e9,
                                                int64_t max_bytes = int64_t{256} << 20);

class OracleFeed {
public:
  struct Options {
    std::string dir;       // where the .f64 files go (created)
    size_t consumers = 1;  // targets that must finish a batch before its files go
    size_t window = 2;     // batches computed ahead of the oldest unfinished one
    int64_t host_budget = 0; // bytes; a case over it is a host skip, not an oracle
    const std::atomic<bool>* interrupted = nullptr;
    std::function<void(size_t done, size_t total)> on_progress; // after each case (any thread)
    std::string cache_dir;      // oracles kept across runs (oracle_cache.hpp); empty = none
    int64_t cache_bytes = 0;    // the cache's bound
    std::chrono::milliseconds cache_lock_timeout{120'000}; // then the run goes on without it
    std::function<void(const std::string&)> on_lock_wait;  // who holds the cache's lock
  };

  OracleFeed(const std::vector<Case>& cases, std::vector<std::vector<size_t>> batches,
             Options options);
  ~OracleFeed(); // stops the producer and removes what is left
  OracleFeed(const OracleFeed&) = delete;
  OracleFeed& operator=(const OracleFeed&) = delete;

  const std::vector<std::vector<size_t>>& batches() const { return m_batches; }
  // Blocks until batch `b` is computed (or the run is interrupted: then it returns at once).
  void wait_ready(size_t b);
  // After wait_ready(b): the case's oracle file ("" = the worker computes its own), and why the
  // host cannot hold it ("" = it can).
  std::string path(size_t case_index) const { return m_paths[case_index]; }
  std::string host_skip(size_t case_index) const { return m_skips[case_index]; }
  // One consumer is done with batch `b`; the last one deletes its files.
  void finished(size_t b);
  // Milliseconds the producer spent computing (overlapped with the probes).
  double busy_ms() const { return m_busy_ms.load(); }
  // Cases whose oracle came from the cache across runs, and those that went into it.
  size_t cache_hits() const { return m_cache_hits.load(); }
  size_t cache_stores() const { return m_cache_stores.load(); }

private:
  void produce();
  void compute_case(size_t index);
  OracleCacheLocking cache_locking();
  bool interrupted() const { return m_options.interrupted && m_options.interrupted->load(); }

  const std::vector<Case>& m_cases;
  std::vector<std::vector<size_t>> m_batches;
  Options m_options;
  std::vector<std::string> m_paths;
  std::vector<std::string> m_skips;
  std::vector<bool> m_ready;
  std::vector<size_t> m_left; // consumers still running each batch
  size_t m_oldest = 0;        // first batch some consumer has not finished
  size_t m_done_cases = 0;
  bool m_stop = false;
  bool m_write_failed = false;
  std::atomic<bool> m_cache_given_up{false}; // the cache's lock was not had: no cache from then on
  std::atomic<bool> m_said_given_up{false}; // an oracle file could not be written (the producer's own)
  std::atomic<double> m_busy_ms{0};
  std::atomic<size_t> m_cache_hits{0}, m_cache_stores{0};
  // The cache never evicts what this run has used or stored since then.
  std::filesystem::file_time_type m_started = std::filesystem::file_time_type::clock::now();
  mutable std::mutex m_mutex;
  std::condition_variable m_changed;
  std::thread m_producer;
};

} // namespace sdpa_doctor::run
