// `--case-file` through the public loader: the input is written to a file, as a user's would be.
#include "cases/cases.hpp"

#include "fuzz_check.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <unistd.h>

using namespace sdpa_doctor;
using sdpa_fuzz::check;

namespace {

const std::string& scratch_path() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/sdpa-fuzz-case-file-" +
           std::to_string(::getpid()) + ".jsonl";
  }();
  return path;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = scratch_path();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  auto cases = cases::load_case_file(path);
  if (cases) {
    check(!cases->empty());
    for (const Case& c : *cases) check(validate(c).empty());
  } else {
    // The CLI prints this as its one error line. Messages quote keys and values as written: a JSON
    // escape can decode to a newline, so only input without backslashes promises one line.
    check(!cases.error().message.empty());
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    if (bytes.find('\\') == std::string_view::npos)
      check(cases.error().message.find('\n') == std::string::npos);
  }
  std::remove(path.c_str());
  return 0;
}
