// A stand-in NVRTC 13.0 (libnvrtc.so.13) for the enumeration tests: it answers nvrtcVersion only,
// which is all the enumeration worker asks of a run-time compiler.
#define EXPORT extern "C" __attribute__((visibility("default")))

EXPORT int nvrtcVersion(int* major, int* minor) {
  *major = 13;
  *minor = 0;
  return 0;
}
