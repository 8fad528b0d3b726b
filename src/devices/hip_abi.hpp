// devices/hip_abi: the few HIP runtime entry points the enumeration worker calls, declared here so
// that building needs no HIP header, and what each HIP major version's ABI means for them. The
// values are HIP's own (checked in the headers of HIP 5.2, 6.x and 7.x): hipError_t codes and the
// hipDeviceAttribute_t values used have not moved since HIP 5.0. hipDeviceProp_t did: ROCm 6 made
// a new layout (hipGetDevicePropertiesR0600); only gcnArchName is read from it, because no
// attribute call returns it. Depends on the standard library only.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace sdpa_doctor::devices::hip_abi {

using Error = int; // hipError_t
inline constexpr Error k_success = 0;
inline constexpr Error k_no_device = 100; // hipErrorNoDevice

// hipDeviceAttribute_t values.
enum Attribute : int {
  integrated = 16,
  multiprocessor_count = 63,
  max_shared_memory_per_block = 74,
  warp_size = 87,
  max_shared_memory_per_multiprocessor = 10002, // AMD-specific range
};

// Entry points, resolved with dlsym; a null one is absent from the runtime that was opened.
struct Api {
  Error (*runtime_get_version)(int*) = nullptr;              // hipRuntimeGetVersion
  Error (*driver_get_version)(int*) = nullptr;               // hipDriverGetVersion
  Error (*init)(unsigned) = nullptr;                         // hipInit
  Error (*get_device_count)(int*) = nullptr;                 // hipGetDeviceCount
  const char* (*get_error_name)(Error) = nullptr;            // hipGetErrorName
  const char* (*get_error_string)(Error) = nullptr;          // hipGetErrorString
  Error (*device_get)(int*, int) = nullptr;                  // hipDeviceGet
  Error (*device_get_name)(char*, int, int) = nullptr;       // hipDeviceGetName
  Error (*device_get_pci_bus_id)(char*, int, int) = nullptr; // hipDeviceGetPCIBusId
  Error (*device_total_mem)(std::size_t*, int) = nullptr;    // hipDeviceTotalMem
  Error (*device_get_attribute)(int*, int, int) = nullptr;   // hipDeviceGetAttribute
  Error (*get_device_properties)(void*, int) = nullptr;      // the layout's own entry point
};

// Where gcnArchName lives in the hipDeviceProp_t a HIP major version fills, and through which
// entry point. Both layouts start with char name[256].
struct PropsLayout {
  const char* function;             // "hipGetDevicePropertiesR0600"
  std::size_t gcn_arch_name_offset; // bytes from the start; the field is char[256]
  std::size_t size;                 // sizeof the struct in that layout
  const char* label;                // "R0600 (HIP 6 and 7)"
};

// HIP packs versions as major * 10^7 + minor * 10^5 + patch.
inline int major_of(int packed_version) { return packed_version / 10'000'000; }

// The layout of `hip_major`; nullopt for a major this doctor does not know (an unknown ABI).
std::optional<PropsLayout> props_layout(int hip_major);

// Big enough for every known layout and for a later one that only grows at its end.
inline constexpr std::size_t k_props_buffer_bytes = 8192;

// gcnArchName read from a filled props buffer, or why not: the name at offset 0 must equal
// `device_name` (what hipDeviceGetName said; empty skips the check) and the arch must be a
// terminated "gfx..." string, else the layout is not what the version promised.
struct ArchName {
  std::string value;
  std::string problem; // empty when `value` was read
};
ArchName read_arch_name(const unsigned char* props, std::size_t size, const PropsLayout& layout,
                        std::string_view device_name);

} // namespace sdpa_doctor::devices::hip_abi
