// workers/oracle_file: the float64 oracle of a case, computed with our kernels, and the file that
// carries it from the doctor (run/, which computes it once per case) to every worker reading it.
// Depends on core and kernels only: the doctor includes this header for the oracle alone.
#pragma once

#include "core/case.hpp"
#include "core/expected.hpp"
#include "core/inputs.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sdpa_doctor::workers {

// Raw little-endian float64, logical (B,Hq,Lq,D) order. Written atomically (temporary file in the
// same directory, then rename). Returns the bytes written.
Expected<int64_t> write_oracle_file(const std::string& path, const std::vector<double>& values);
// Refuses a file whose size is not exactly `expected_count` values.
Expected<std::vector<double>> read_oracle_file(const std::string& path, size_t expected_count);
// The oracle of a case, computed in float64 from core::make_inputs (kernels::oracle_attention).
// `cancel` (may be null) stops it early; the result is then incomplete.
std::vector<double> compute_oracle(const Case& c, const std::atomic<bool>* cancel = nullptr);
// The same on inputs already made (core::make_inputs of `c`).
std::vector<double> compute_oracle(const Case& c, const HostInputs& inputs,
                                   const std::atomic<bool>* cancel = nullptr);

} // namespace sdpa_doctor::workers
