// run/oracle_cache: float64 oracles kept across runs on disk, so a second `check` of the same big
// cases (a `--suite full`, a model at long lengths) does not pay for them again. A file's name is
// its key: the case id and a hash of the oracle format, the case and its inputs' bytes, so a case
// whose inputs or meaning change can never find a stale file. Bounded: after each store the
// least recently used files go until the cache holds at most `max_bytes`. Internal to run.
#pragma once

#include "core/case.hpp"
#include "core/inputs.hpp"

#include <cstdint>
#include <string>

namespace sdpa_doctor::run {

// "<case id>-<16 hex digits>".
std::string oracle_cache_key(const Case& c, const HostInputs& inputs);

// default_oracle_cache_dir() is in run.hpp: the CLI names the directory.

class OracleCache {
public:
  OracleCache(std::string dir, int64_t max_bytes);
  bool enabled() const { return !m_dir.empty() && m_max_bytes > 0; }
  // Puts the cached oracle of `key` at `dest` (a hard link, else a copy) when one of exactly
  // `bytes` is there, and marks it used. False when there is none (or it cannot be placed).
  bool fetch(const std::string& key, int64_t bytes, const std::string& dest) const;
  // Adds `file` under `key` (atomically: others may read the cache meanwhile), then evicts.
  void store(const std::string& key, const std::string& file) const;

private:
  void evict() const;
  std::string m_dir;
  int64_t m_max_bytes;
};

} // namespace sdpa_doctor::run
