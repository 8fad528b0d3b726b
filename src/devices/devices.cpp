#include "devices/sources.hpp"

#include <spdlog/spdlog.h>

#include <exception>

namespace sdpa_doctor::devices {

DeviceInventory enumerate_devices(const EnumerateOptions& given) {
  EnumerateOptions options = given;
  if (!options.torch_build) options.torch_build = read_torch_build(options.torch_lib_dirs);
  // The fixed table: runtime views first (they carry PyTorch's device order), then the kernel's
  // view, then the checks that explain why a view is empty.
  std::vector<std::unique_ptr<DeviceSource>> sources;
  sources.push_back(make_hip_source());
  sources.push_back(make_smi_source());
  sources.push_back(make_cuda_source());
  sources.push_back(make_nvml_source());
  sources.push_back(make_sysfs_source());
  sources.push_back(make_environment_source());

  std::vector<NamedResult> results;
  for (const auto& source : sources) {
    NamedResult named;
    named.source = std::string(source->name());
    if (std::string skip = source->skip_reason(options); !skip.empty()) {
      named.skipped = true;
      named.result.status = std::move(skip);
      results.push_back(std::move(named));
      continue;
    }
    // A source that throws has failed softly like any other: its finding says so.
    try {
      named.result = source->read(options);
    } catch (const std::exception& e) {
      named.result = SourceResult{};
      named.result.status = std::string("failed: ") + e.what();
      named.result.findings.push_back({"source-failed", Severity::warning,
                                       named.source + " enumeration failed: " + e.what(), "",
                                       {}, {}});
    }
    spdlog::debug("devices: {} -> {} ({} devices)", named.source, named.result.status,
                  named.result.devices.size());
    results.push_back(std::move(named));
  }
  return merge_sources(results, options);
}

} // namespace sdpa_doctor::devices
