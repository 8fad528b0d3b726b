// A program with one deliberate bug per mode, built with the sanitizer build's flags. Its tests
// pass only when the sanitizer reports the bug, so a sanitizer build whose flags fell off (or a
// test environment that silences the reports) cannot pass as "clean".
//   sanitizer_canary overflow | leak | signed-overflow
#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  volatile int index = 16;
  if (std::strcmp(argv[1], "overflow") == 0) {
    char* block = static_cast<char*>(std::malloc(16));
    block[index] = 1; // one byte past the end
    std::free(block);
  } else if (std::strcmp(argv[1], "leak") == 0) {
    void* volatile lost = std::malloc(64);
    lost = nullptr;
    (void)lost;
  } else if (std::strcmp(argv[1], "signed-overflow") == 0) {
    volatile int big = 2147483647;
    std::printf("%d\n", big + index);
  } else {
    return 2;
  }
  return 0;
}
