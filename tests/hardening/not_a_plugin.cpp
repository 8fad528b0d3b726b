// A real shared library that is not the LibTorch plugin: what a cache may hold in its place (a
// stray file of the same name). It has no entry point the worker looks for.
extern "C" __attribute__((visibility("default"))) int sdpa_test_not_a_plugin() { return 42; }
