// devices/smi_abi: the few AMD SMI (libamd_smi) and ROCm SMI (librocm_smi64) entry points the
// enumeration worker calls, declared here so that building needs neither header. Values are the
// libraries' own, checked in the headers of ROCm SMI 5.2 through 7.x and AMD SMI 6.0 through 7.x.
// Structs are read only where their first fields have kept their place (amdsmi_asic_info_t's
// market_name, amdsmi_vram_usage_t); amdsmi_version_t lost its first field (year) in ROCm 7, so
// only its build string, at the same offset in both layouts, is read. Depends on nothing.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sdpa_doctor::devices::smi_abi {

// ---- ROCm SMI -------------------------------------------------------------------------------

using RsmiStatus = int; // rsmi_status_t
inline constexpr RsmiStatus k_rsmi_success = 0;
inline constexpr RsmiStatus k_rsmi_not_supported = 2;
inline constexpr int k_rsmi_mem_type_vram = 0;  // RSMI_MEM_TYPE_VRAM
inline constexpr uint32_t k_rsmi_temp_edge = 0; // RSMI_TEMP_TYPE_EDGE
inline constexpr int k_rsmi_temp_current = 0;   // RSMI_TEMP_CURRENT
inline constexpr int k_rsmi_sw_comp_driver = 0; // RSMI_SW_COMP_DRIVER

struct RsmiVersion { // rsmi_version_t, unchanged since ROCm SMI 2
  uint32_t major, minor, patch;
  const char* build;
};

struct RsmiApi {
  RsmiStatus (*init)(uint64_t) = nullptr;
  RsmiStatus (*shut_down)() = nullptr;
  RsmiStatus (*version_get)(RsmiVersion*) = nullptr;
  RsmiStatus (*version_str_get)(int, char*, uint32_t) = nullptr;
  RsmiStatus (*status_string)(RsmiStatus, const char**) = nullptr;
  RsmiStatus (*num_monitor_devices)(uint32_t*) = nullptr;
  RsmiStatus (*dev_name_get)(uint32_t, char*, std::size_t) = nullptr;
  RsmiStatus (*dev_brand_get)(uint32_t, char*, uint32_t) = nullptr;
  RsmiStatus (*dev_vendor_name_get)(uint32_t, char*, std::size_t) = nullptr;
  RsmiStatus (*dev_pci_id_get)(uint32_t, uint64_t*) = nullptr;
  RsmiStatus (*dev_memory_total_get)(uint32_t, int, uint64_t*) = nullptr;
  RsmiStatus (*dev_memory_usage_get)(uint32_t, int, uint64_t*) = nullptr;
  RsmiStatus (*dev_temp_metric_get)(uint32_t, uint32_t, int, int64_t*) = nullptr; // millidegrees
  RsmiStatus (*dev_power_ave_get)(uint32_t, uint32_t, uint64_t*) = nullptr;       // microwatts
  RsmiStatus (*dev_vbios_version_get)(uint32_t, char*, uint32_t) = nullptr;
};

// ---- AMD SMI --------------------------------------------------------------------------------

using AmdsmiStatus = int; // amdsmi_status_t
inline constexpr AmdsmiStatus k_amdsmi_success = 0;
inline constexpr AmdsmiStatus k_amdsmi_not_supported = 2;
inline constexpr uint64_t k_amdsmi_init_amd_gpus = 1u << 1; // AMDSMI_INIT_AMD_GPUS
inline constexpr int k_amdsmi_temperature_edge = 0;         // AMDSMI_TEMPERATURE_TYPE_EDGE
inline constexpr int k_amdsmi_temp_current = 0;             // AMDSMI_TEMP_CURRENT

using Handle = void*; // amdsmi_socket_handle, amdsmi_processor_handle

// amdsmi_version_t: {year, major, minor, release, build} before ROCm 7, {major, minor, release,
// build} since; `build` is at byte 16 in both.
inline constexpr std::size_t k_amdsmi_version_build_offset = 16;
// amdsmi_asic_info_t starts with char market_name[64] (ROCm 6.0/6.1) or [256] (since 6.2).
inline constexpr std::size_t k_amdsmi_market_name_min_bytes = 64;
// Buffers handed to struct-filling calls: larger than any known layout of those structs.
inline constexpr std::size_t k_amdsmi_struct_buffer_bytes = 4096;

struct AmdsmiVramUsage { // amdsmi_vram_usage_t, MB
  uint32_t vram_total;
  uint32_t vram_used;
  uint32_t reserved[2];
};

struct AmdsmiApi {
  AmdsmiStatus (*init)(uint64_t) = nullptr;
  AmdsmiStatus (*shut_down)() = nullptr;
  AmdsmiStatus (*get_lib_version)(void*) = nullptr;
  AmdsmiStatus (*status_code_to_string)(AmdsmiStatus, const char**) = nullptr;
  AmdsmiStatus (*get_socket_handles)(uint32_t*, Handle*) = nullptr;
  AmdsmiStatus (*get_processor_handles)(Handle, uint32_t*, Handle*) = nullptr;
  AmdsmiStatus (*get_gpu_device_bdf)(Handle, uint64_t*) = nullptr; // amdsmi_bdf_t as_uint
  AmdsmiStatus (*get_gpu_asic_info)(Handle, void*) = nullptr;
  AmdsmiStatus (*get_gpu_vram_usage)(Handle, AmdsmiVramUsage*) = nullptr;
  AmdsmiStatus (*get_temp_metric)(Handle, int, int, int64_t*) = nullptr; // degrees Celsius
};

// amdsmi_bdf_t: function bits 0..2, device 3..7, bus 8..15, domain 16..63.
struct Bdf {
  uint64_t domain;
  uint32_t bus, device, function;
};
inline Bdf decode_amdsmi_bdf(uint64_t bits) {
  return {bits >> 16, static_cast<uint32_t>((bits >> 8) & 0xff),
          static_cast<uint32_t>((bits >> 3) & 0x1f), static_cast<uint32_t>(bits & 0x7)};
}

} // namespace sdpa_doctor::devices::smi_abi
