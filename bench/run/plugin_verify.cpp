// The check a cached LibTorch plugin gets before every use (a regular file, its ELF header, its
// content hash against the one recorded when it was built), timed on a copy of a plugin and on
// that copy padded to a given size (a GPU torch's plugin is larger than a CPU one's).
//   bench_plugin_verify PLUGIN.so [--rounds 200] [--padded-mib 16]
#include "run/torch_plugin.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <unistd.h>
#include <vector>

using namespace sdpa_doctor;
namespace fs = std::filesystem;

namespace {

// Milliseconds of each of `rounds` checks of `plugin` (which must pass).
std::vector<double> time_checks(const std::string& plugin, int rounds) {
  std::vector<double> ms;
  for (int i = 0; i < rounds; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const std::string problem = run::plugin_file_problem(plugin);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
    if (!problem.empty()) throw std::runtime_error(plugin + ": " + problem);
  }
  std::sort(ms.begin(), ms.end());
  return ms;
}

void report(const std::string& label, const std::string& plugin, int rounds) {
  const auto ms = time_checks(plugin, rounds);
  fmt::print("| {} | {:.1f} MiB | {} | {:.2f} | {:.2f} | {:.2f} |\n", label,
             double(fs::file_size(plugin)) / (1 << 20), rounds, ms.front(), ms[ms.size() / 2],
             ms.back());
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: bench_plugin_verify PLUGIN.so [--rounds N] [--padded-mib N]\n");
    return 2;
  }
  int rounds = 200;
  int padded_mib = 16;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--padded-mib")) padded_mib = std::max(1, std::atoi(argv[i + 1]));
  }
  const fs::path dir = fs::temp_directory_path() / fmt::format("bench-plugin-verify-{}", ::getpid());
  fs::create_directories(dir);
  const std::string copy = (dir / "plugin.so").string();
  const std::string padded = (dir / "padded.so").string();
  fs::copy_file(argv[1], copy);
  fs::copy_file(argv[1], padded);
  fs::resize_file(padded, std::max<uintmax_t>(fs::file_size(padded), uintmax_t(padded_mib) << 20));
  if (!run::record_plugin_sum(copy) || !run::record_plugin_sum(padded)) {
    fmt::print(stderr, "cannot record the content hash in {}\n", dir.string());
    return 1;
  }
  fmt::print("| plugin | size | rounds | min ms | median ms | max ms |\n|---|---|---|---|---|---|\n");
  report("as built", copy, rounds);
  report(fmt::format("padded to {} MiB", padded_mib), padded, rounds);
  fs::remove_all(dir);
  return 0;
}
