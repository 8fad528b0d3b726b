// run/oracle_cache: float64 oracles kept across runs on disk, so a second `check` of the same big
// cases (a `--suite full`, a model at long lengths) does not pay for them again. A file's name is
// its key: the case id and a hash of the oracle format, the case and its inputs' bytes, so a case
// whose inputs or meaning change can never find a stale file. Bounded by `max_bytes`: a store past
// the bound evicts the least recently used files this run has not used; if that is not room enough
// the new file is not kept. Plain LRU would thrash on a suite bigger than the bound (each run walks
// the cases in the same order and evicts exactly the files it is about to need); this way a second
// run finds what the first one kept. Internal to run.
#pragma once

#include "core/cache.hpp"
#include "core/case.hpp"
#include "core/inputs.hpp"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>

namespace sdpa_doctor::run {

// "<case id>-<16 hex digits>"; a masked_rows case's hash includes the masked-row semantics of the
// oracle (always "zero": what the doctor computes).
std::string oracle_cache_key(const Case& c, const HostInputs& inputs);

// default_oracle_cache_dir() is in run.hpp: the CLI names the directory.

// How store() waits for another run that holds the cache's lock, and what says it gave up.
struct OracleCacheLocking {
  cache::LockWait wait;
  // Set once a wait passed its deadline or was interrupted: the cache is off for the rest of the
  // run (its own oracles, never a wait per file). Shared by every OracleCache of one run.
  std::atomic<bool>* given_up = nullptr;
};

class OracleCache {
public:
  // Files used or stored at or after `run_started` are this run's: never evicted by it.
  OracleCache(std::string dir, int64_t max_bytes,
              std::filesystem::file_time_type run_started =
                  std::filesystem::file_time_type::clock::now(),
              OracleCacheLocking locking = {});
  bool enabled() const {
    return !m_dir.empty() && m_max_bytes > 0 &&
           !(m_locking.given_up && m_locking.given_up->load());
  }
  // Puts the cached oracle of `key` at `dest` (a hard link, else a copy) when one of exactly
  // `bytes` is there, and marks it used. False when there is none (or it cannot be placed).
  bool fetch(const std::string& key, int64_t bytes, const std::string& dest) const;
  // Adds `file` under `key` (atomically: others may read the cache meanwhile) and makes room by
  // evicting older runs' files. False when it is not kept (no room, or it cannot be placed).
  bool store(const std::string& key, const std::string& file) const;

private:
  std::string m_dir;
  int64_t m_max_bytes;
  std::filesystem::file_time_type m_run_started;
  OracleCacheLocking m_locking;
};

} // namespace sdpa_doctor::run
