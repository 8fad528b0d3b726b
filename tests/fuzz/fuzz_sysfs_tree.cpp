// The whole sysfs source over a small captured tree whose files hold the fuzz input: the node's
// properties, a memory bank's properties and the PCI numbers, split at 0xff bytes.
#include "devices/sources.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <unistd.h>

using namespace sdpa_doctor::devices;
namespace fs = std::filesystem;

namespace {

const fs::path& tree() {
  static const fs::path root = [] {
    const char* dir = std::getenv("TMPDIR");
    fs::path r = fs::path(dir && *dir ? dir : "/tmp") /
                 ("sdpa-fuzz-sysfs-" + std::to_string(::getpid()));
    fs::create_directories(r / "sys/class/kfd/kfd/topology/nodes/1/mem_banks/0");
    fs::create_directories(r / "sys/bus/pci/devices/0000:03:00.0");
    fs::create_directories(r / "sys/module/amdgpu");
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(tree(), ec);
    });
    return r;
  }();
  return root;
}

void put(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string_view parts[5];
  for (auto& part : parts) {
    const auto cut = input.find('\xff');
    part = input.substr(0, cut);
    input = cut == std::string_view::npos ? std::string_view{} : input.substr(cut + 1);
  }
  const fs::path& root = tree();
  const fs::path node = root / "sys/class/kfd/kfd/topology/nodes/1";
  const fs::path pci = root / "sys/bus/pci/devices/0000:03:00.0";
  put(node / "properties", parts[0]);
  put(node / "mem_banks/0/properties", parts[1]);
  put(pci / "vendor", parts[2]);
  put(pci / "device", parts[3]);
  put(pci / "mem_info_vram_total", parts[4]);

  EnumerateOptions options;
  options.sysfs_root = root.string();
  options.dev_root.clear();
  options.use_hip = false;
  options.use_smi = false;
  options.use_cuda = false;
  options.use_nvml = false;
  options.environment.clear();
  const SourceResult result = make_sysfs_source()->read(options);
  for (const sdpa_doctor::Finding& f : result.findings)
    if (f.id.empty()) std::abort();
  return 0;
}
