// A shared library for the loader's tests: copied under vendor sonames (libamdhip64.so.7, ...)
// so the real dlopen path is exercised without any vendor library on the machine.
extern "C" __attribute__((visibility("default"))) int sdpa_loader_test_answer() { return 42; }
