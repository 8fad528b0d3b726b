#include "run/oracle_feed.hpp"

#include "core/inputs.hpp"
#include "core/io.hpp"
#include "run/oracle_cache.hpp"
#include "cases/cases.hpp"
#include "workers/oracle_file.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

namespace sdpa_doctor::run {

namespace fs = std::filesystem;

namespace {
constexpr double k_min_cached_flop = 1e9;
} // namespace

std::vector<std::vector<size_t>> oracle_batches(const std::vector<Case>& cases, double first_flop,
                                                int64_t max_bytes) {
  double total = 0;
  for (const Case& c : cases) total += c.flops();
  const double cap = std::max(first_flop, total / 8);
  std::vector<std::vector<size_t>> batches;
  double limit = first_flop, flop = 0;
  int64_t bytes = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const int64_t case_bytes = cases[i].q_elements() * int64_t(sizeof(double));
    const bool full = !batches.empty() && !batches.back().empty() &&
                      (flop >= limit || bytes + case_bytes > max_bytes);
    if (batches.empty() || full) {
      if (full) limit = std::min(cap, limit * 2);
      batches.emplace_back();
      flop = 0;
      bytes = 0;
    }
    batches.back().push_back(i);
    flop += cases[i].flops();
    bytes += case_bytes;
  }
  return batches;
}

OracleFeed::OracleFeed(const std::vector<Case>& cases, std::vector<std::vector<size_t>> batches,
                       Options options)
    : m_cases(cases), m_batches(std::move(batches)), m_options(std::move(options)),
      m_paths(cases.size()), m_skips(cases.size()), m_ready(m_batches.size(), false),
      m_left(m_batches.size(), std::max<size_t>(m_options.consumers, 1)) {
  std::error_code ec;
  fs::create_directories(m_options.dir, ec);
  m_producer = std::thread([this] { produce(); });
}

OracleFeed::~OracleFeed() {
  {
    std::lock_guard lock(m_mutex);
    m_stop = true;
  }
  m_changed.notify_all();
  if (m_producer.joinable()) m_producer.join();
  std::error_code ec;
  fs::remove_all(m_options.dir, ec);
}

void OracleFeed::compute_case(size_t index) {
  // A backward case's file holds its forward's oracle; its gradients the worker computes itself
  // (they are not cached: see protocol.hpp).
  const Case c = m_cases[index].forward_only();
  const std::string id = m_cases[index].id();
  if (auto guard = cases::memory_guard(c, m_options.host_budget, false); !guard.empty()) {
    std::lock_guard lock(m_mutex);
    m_skips[index] = "host: " + guard;
    return;
  }
  const std::string file = (fs::path(m_options.dir) / (id + ".f64")).string();
  // Only oracles that take a while are worth a file across runs (about 0.1 s and more).
  const OracleCache cache(c.flops() >= k_min_cached_flop ? m_options.cache_dir : std::string{},
                          m_options.cache_bytes, m_started, cache_locking());
  // Made once (they take seconds for big cases) and interruptible, like the oracle itself.
  const HostInputs inputs = make_inputs(c, m_options.interrupted);
  if (interrupted()) return; // incomplete: no file, the cases are skipped anyway
  const std::string key = cache.enabled() ? oracle_cache_key(c, inputs) : std::string{};
  const bool cached = cache.enabled() &&
                      cache.fetch(key, c.q_elements() * int64_t(sizeof(double)), file);
  if (!cached) {
    // Fully masked rows at 0 (MaskedRowSemantics::zero): a worker under other semantics
    // computes its own oracle for a masked_rows case.
    const std::vector<double> oracle = workers::compute_oracle(c, inputs, m_options.interrupted);
    if (interrupted()) return;
    auto written = workers::write_oracle_file(file, oracle);
    if (!written) {
      // The workers compute their own: slower, never wrong. Said once: a full disk fails them all.
      if (!m_write_failed)
        spdlog::warn("{}; the workers compute their own oracles (slower)", written.error().message);
      m_write_failed = true;
      return;
    }
    if (cache.enabled() && cache.store(key, file)) ++m_cache_stores;
    else if (m_cache_given_up.load() && !interrupted() && !m_said_given_up.exchange(true))
      spdlog::warn("the oracle cache {} is still locked: going on without it", m_options.cache_dir);
  } else {
    ++m_cache_hits;
  }
  std::lock_guard lock(m_mutex);
  m_paths[index] = file;
}

OracleCacheLocking OracleFeed::cache_locking() {
  OracleCacheLocking locking;
  locking.wait.doing = "storing float64 oracles";
  locking.wait.deadline = m_options.cache_lock_timeout;
  locking.wait.interrupted = m_options.interrupted;
  locking.wait.on_wait = m_options.on_lock_wait;
  locking.given_up = &m_cache_given_up;
  return locking;
}

void OracleFeed::produce() {
  for (size_t b = 0; b < m_batches.size(); ++b) {
    {
      std::unique_lock lock(m_mutex);
      m_changed.wait(lock, [&] { return m_stop || b < m_oldest + m_options.window; });
      if (m_stop) break;
    }
    const auto start = std::chrono::steady_clock::now();
    for (size_t index : m_batches[b]) {
      if (interrupted()) break;
      compute_case(index);
      size_t done = 0;
      {
        std::lock_guard lock(m_mutex);
        done = ++m_done_cases;
      }
      if (m_options.on_progress) m_options.on_progress(done, m_cases.size());
    }
    m_busy_ms.store(m_busy_ms.load() + ms_since(start));
    {
      std::lock_guard lock(m_mutex);
      m_ready[b] = true;
    }
    m_changed.notify_all();
  }
  // Interrupted or stopped: nobody may wait for a batch that will never come.
  {
    std::lock_guard lock(m_mutex);
    std::fill(m_ready.begin(), m_ready.end(), true);
  }
  m_changed.notify_all();
}

void OracleFeed::wait_ready(size_t b) {
  std::unique_lock lock(m_mutex);
  // The interrupt flag is set by a signal handler, which cannot notify: look every 100 ms.
  while (!m_ready[b] && !interrupted())
    m_changed.wait_for(lock, std::chrono::milliseconds(100));
}

void OracleFeed::finished(size_t b) {
  std::vector<std::string> files;
  {
    std::lock_guard lock(m_mutex);
    if (m_left[b] == 0 || --m_left[b] > 0) return;
    for (size_t index : m_batches[b]) {
      if (!m_paths[index].empty()) files.push_back(m_paths[index]);
      m_paths[index].clear();
    }
    while (m_oldest < m_batches.size() && m_left[m_oldest] == 0) ++m_oldest;
  }
  m_changed.notify_all();
  std::error_code ec;
  for (const std::string& f : files) fs::remove(f, ec);
}

} // namespace sdpa_doctor::run
