// core/status: the closed set of case statuses (a contract of data/report.schema.json) and the
// exit codes.
// Depends on nothing but the standard library.
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace sdpa_doctor {

enum class Status { pass, mismatch, nonfinite, unsupported, error, crash, timeout, skipped };

inline constexpr std::array<Status, 8> k_all_statuses = {
    Status::pass,  Status::mismatch, Status::nonfinite, Status::unsupported,
    Status::error, Status::crash,    Status::timeout,   Status::skipped};

std::string_view to_string(Status status);
std::optional<Status> status_from_string(std::string_view text);

// The statuses a worker may report itself (the rest are the runner's: crash, timeout, skipped).
bool is_worker_status(Status status);

// The statuses that count as a failure by default (exit code 1).
bool is_failure_by_default(Status status);

// How the reason of a reference case starts when our own GPU kernel source did not compile for
// the device (kernels/rtc.cpp): a defect of the doctor's, which advice never blames on the card.
inline constexpr std::string_view k_reference_compile_failure =
    "our reference kernel did not compile";

// Exit codes (contract): see `sdpa-doctor --help` and README.md.
namespace exit_code {
inline constexpr int ok = 0;
inline constexpr int failures = 1;
inline constexpr int usage = 2;
inline constexpr int no_gpu = 3;
inline constexpr int internal = 4;
// A device health check that cannot tell (no GPU runtime opens on this machine): no verdict, so the
// device is not called unhealthy; the torch workers' canary after every case still speaks.
inline constexpr int health_unknown = 77;
// A child whose exec failed exits with this (the shell's "command not found or not runnable").
inline constexpr int exec_failed = 127;
inline constexpr int interrupted_hup = 129;
inline constexpr int interrupted_int = 130;
inline constexpr int interrupted_term = 143;
} // namespace exit_code

} // namespace sdpa_doctor
