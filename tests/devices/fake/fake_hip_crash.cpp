// A stand-in HIP runtime that loads and then crashes when called, as a broken or mismatched
// libamdhip64 does (or, with FAKE_HIP_HANG set, never returns, as on a wedged driver): the
// enumeration must name this file and where it was found.
#include <cstdlib>
#include <unistd.h>

#define EXPORT extern "C" __attribute__((visibility("default")))

// A real invalid access, not raise(): what a library that dereferences garbage does.
EXPORT int hipRuntimeGetVersion(int*) {
  if (std::getenv("FAKE_HIP_HANG"))
    for (;;) ::pause();
  volatile int* volatile bad = nullptr;
  *bad = 1;
  return 0;
}
EXPORT int hipInit(unsigned) { return hipRuntimeGetVersion(nullptr); }
EXPORT int hipGetDeviceCount(int*) { return hipRuntimeGetVersion(nullptr); }
