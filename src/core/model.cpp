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

} // namespace sdpa_doctor
