// kernels/oracle_blocked: the blocked float64 oracle's entry points that its backward shares with
// its forward. Internal to kernels.
#pragma once

#include "kernels/kernels.hpp"

namespace sdpa_doctor::kernels::oracle_detail {

// The blocked forward with the loops of `level` (unknown: "generic") on `threads` threads (0: all
// cores, or one for a small case). `lse` (may be null): B*Hq*Lq doubles, each row's natural-log
// softmax denominator (max included), -inf for a row with nothing to attend to: what the
// backward needs to recompute the probabilities.
std::vector<double> blocked_forward(std::string_view level, const Case& c,
                                    const HostInputs& inputs, const std::atomic<bool>* cancel,
                                    int threads, double* lse);

} // namespace sdpa_doctor::kernels::oracle_detail
