#include "isolate/isolate.hpp"

#include <regex>

namespace sdpa_doctor::isolate {

const std::vector<Signature>& known_signatures() {
  // Texts from ROCr, HIP, CK and PyTorch as they appear on a dying worker's stderr.
  static const std::vector<Signature> table = {
      {"ck-unsupported-arch", k_ck_assert_text,
       "the CK flash kernel asserted: this GPU architecture is not supported by the CK SDPA build"},
      {"gpu-memory-fault", R"(Memory access fault by GPU)",
       "the GPU faulted on a bad address (page fault); ROCr aborts the process"},
      {"gpu-hang", R"(HW Exception by GPU.*GPU Hang)",
       "the GPU hung and was reset; later processes may find the device unusable"},
      {"hsa-status", R"(HSA_STATUS_ERROR_\w+)", "the HSA runtime reported an error (queue abort, "
                                                "hardware exception)"},
      {"device-assert", R"([Dd]evice-side assert)", "a kernel assertion fired on the device"},
      {"hip-error", R"(hipError\w+|HIP error:)", "a HIP runtime call failed"},
      {"no-available-kernel", R"(No available kernel)",
       "the SDPA dispatcher found no kernel for these inputs (a refusal, not a crash)"},
      {"invalid-device-function", R"(invalid device function|device kernel image is invalid|no kernel image is available)",
       "the installed binaries carry no code for this GPU architecture"},
      {"out-of-memory", R"(out of memory|OutOfMemory)", "a device or host allocation failed"},
      {"python-traceback", R"(Traceback \(most recent call last\))",
       "the Python worker raised an exception"},
  };
  return table;
}

std::vector<std::string> match_signatures(std::string_view text) {
  static const std::vector<std::regex> compiled = [] {
    std::vector<std::regex> out;
    for (const auto& s : known_signatures())
      out.emplace_back(s.pattern, std::regex::ECMAScript | std::regex::optimize);
    return out;
  }();
  std::vector<std::string> ids;
  if (text.empty()) return ids;
  const auto& table = known_signatures();
  for (std::size_t i = 0; i < table.size(); ++i)
    if (std::regex_search(text.begin(), text.end(), compiled[i])) ids.push_back(table[i].id);
  return ids;
}

} // namespace sdpa_doctor::isolate
