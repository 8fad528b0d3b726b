#include "core/status.hpp"

namespace sdpa_doctor {

std::string_view to_string(Status status) {
  switch (status) {
  case Status::pass: return "pass";
  case Status::mismatch: return "mismatch";
  case Status::nonfinite: return "nonfinite";
  case Status::unsupported: return "unsupported";
  case Status::error: return "error";
  case Status::crash: return "crash";
  case Status::timeout: return "timeout";
  case Status::skipped: return "skipped";
  }
  return "error";
}

std::optional<Status> status_from_string(std::string_view text) {
  for (Status s : k_all_statuses) {
    if (to_string(s) == text) return s;
  }
  return std::nullopt;
}

bool is_worker_status(Status s) {
  return s == Status::pass || s == Status::mismatch || s == Status::nonfinite ||
         s == Status::unsupported || s == Status::error;
}

bool is_failure_by_default(Status status) {
  switch (status) {
  case Status::mismatch:
  case Status::nonfinite:
  case Status::error:
  case Status::crash:
  case Status::timeout: return true;
  case Status::pass:
  case Status::unsupported:
  case Status::skipped: return false;
  }
  return true;
}

} // namespace sdpa_doctor
