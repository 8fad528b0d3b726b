// The harnesses' one assertion: a broken property is a crash, which libFuzzer reports and keeps.
#pragma once

#include <cstdlib>

namespace sdpa_fuzz {
inline void check(bool ok) {
  if (!ok) std::abort();
}
} // namespace sdpa_fuzz
