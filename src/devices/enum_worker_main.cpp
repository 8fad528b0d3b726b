// sdpa-doctor-enum-worker [--hip] [--rocm-smi]: prints one JSON object on stdout, then exits 0.
// With neither flag both parts run. Anything the libraries print goes to stderr.
#include "devices/enum_worker.hpp"
#include "core/io.hpp"
#include "core/status.hpp"

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <unistd.h>

int main(int argc, char** argv) {
  bool hip = false, rsmi = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--hip") == 0) {
      hip = true;
    } else if (std::strcmp(argv[i], "--rocm-smi") == 0) {
      rsmi = true;
    } else {
      std::fprintf(stderr, "usage: sdpa-doctor-enum-worker [--hip] [--rocm-smi]\n");
      return sdpa_doctor::exit_code::usage;
    }
  }
  if (!hip && !rsmi) hip = rsmi = true;

  // The runtimes may write to stdout; keep stdout for our one JSON object.
  std::fflush(stdout);
  const int result_fd = ::dup(STDOUT_FILENO);
  if (result_fd < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
    return sdpa_doctor::exit_code::internal;

  nlohmann::json out = {{"v", 1}};
  try {
    if (hip) out["hip"] = sdpa_doctor::devices::enum_worker::query_hip();
    if (rsmi) out["rsmi"] = sdpa_doctor::devices::enum_worker::query_rocm_smi();
  } catch (const std::exception& e) {
    out["error"] = e.what();
  }
  const std::string text = out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  return sdpa_doctor::write_all(result_fd, text) ? sdpa_doctor::exit_code::ok
                                                 : sdpa_doctor::exit_code::internal;
}
