#include "devices/hip_abi.hpp"

#include <cstring>

namespace sdpa_doctor::devices::hip_abi {

std::optional<PropsLayout> props_layout(int hip_major) {
  // Offsets of hipDeviceProp_tR0000 (HIP 5; kept in HIP 6's hip_deprecated.h) and of
  // hipDeviceProp_tR0600 (HIP 6, still the current layout in HIP 7), on LP64.
  if (hip_major == 5) return PropsLayout{"hipGetDeviceProperties", 396, 792, "R0000 (HIP 5)"};
  if (hip_major == 6 || hip_major == 7)
    return PropsLayout{"hipGetDevicePropertiesR0600", 1160, 1472, "R0600 (HIP 6 and 7)"};
  return std::nullopt;
}

namespace {

constexpr std::size_t k_name_bytes = 256;

// The NUL-terminated text of a char[256] field; nullopt when it has no terminator.
std::optional<std::string_view> c_string(const unsigned char* field) {
  const void* end = std::memchr(field, '\0', k_name_bytes);
  if (!end) return std::nullopt;
  return std::string_view(reinterpret_cast<const char*>(field),
                          static_cast<const unsigned char*>(end) - field);
}

} // namespace

ArchName read_arch_name(const unsigned char* props, std::size_t size, const PropsLayout& layout,
                        std::string_view device_name) {
  if (size < layout.gcn_arch_name_offset + k_name_bytes)
    return {"",
            "the properties buffer is smaller than the " + std::string(layout.label) + " layout"};
  const auto name = c_string(props);
  if (!device_name.empty() && (!name || *name != device_name))
    return {"", std::string(layout.function) + " did not fill the " + layout.label +
                    " layout: its name field differs from hipDeviceGetName's"};
  const auto arch = c_string(props + layout.gcn_arch_name_offset);
  if (!arch || arch->rfind("gfx", 0) != 0)
    return {"", std::string(layout.function) + " gave no gfx name where the " + layout.label +
                    " layout keeps gcnArchName"};
  return {std::string(*arch), ""};
}

} // namespace sdpa_doctor::devices::hip_abi
