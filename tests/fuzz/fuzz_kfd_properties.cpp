// KFD topology `properties` text and sysfs integers: captured trees in bug reports can hold anything.
#include "devices/sources.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

using namespace sdpa_doctor::devices;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const KfdProperties props = parse_kfd_properties(input);
  for (const char* key : {"simd_count", "gfx_target_version", "location_id", "domain",
                          "size_in_bytes", "cpu_cores_count", "drm_render_minor"}) {
    std::string problem;
    if (!props.integer(key, &problem) && props.raw.count(key) && problem.empty()) std::abort();
  }
  for (const auto& entry : props.raw) (void)props.integer(entry.first);
  if (auto version = props.integer("gfx_target_version")) (void)gfx_target_from_version(*version);
  (void)parse_sysfs_integer(input);
  (void)first_line(input);
  (void)normalize_pci_bdf(input);
  (void)gfx_target_from_override(input);
  (void)base_gfx_target(input);
  return 0;
}
