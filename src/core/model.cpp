#include "core/model.hpp"

namespace sdpa_doctor {

std::string_view to_string(Severity severity) {
  switch (severity) {
  case Severity::ok: return "ok";
  case Severity::warning: return "warning";
  case Severity::problem: return "problem";
  }
  return "problem";
}

bool is_amd_gpu(const Device& d) {
  const auto seen = d.sources.find("seen_by");
  const bool torch_only = seen != d.sources.end() && seen->second.count("torch") != 0;
  return !torch_only || !d.gfx_target.empty();
}

} // namespace sdpa_doctor
