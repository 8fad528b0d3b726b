// A stand-in AMD SMI (ROCm 7 ABI) with one GPU, built only for the tests: the entry points the
// enumeration worker resolves, so its AMD SMI path runs here, where no libamd_smi is installed.
// amdsmi_version_t is filled in the ROCm 7 layout (no `year`), whose `build` string is at byte 16
// as it was before; the worker reads only that string.
#include <cstdint>
#include <cstring>

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {
int g_socket = 1, g_gpu = 2; // their addresses are the handles
struct Version {
  uint32_t major, minor, release;
  const char* build;
};
} // namespace

EXPORT int amdsmi_init(uint64_t flags) { return flags == (1u << 1) ? 0 : 1; }
EXPORT int amdsmi_shut_down() { return 0; }
EXPORT int amdsmi_get_lib_version(void* out) {
  *static_cast<Version*>(out) = {26, 0, 0, "26.0.0+fake"};
  return 0;
}
EXPORT int amdsmi_status_code_to_string(int status, const char** text) {
  *text = status == 0 ? "AMDSMI_STATUS_SUCCESS" : "AMDSMI_STATUS_NOT_SUPPORTED";
  return 0;
}
EXPORT int amdsmi_get_socket_handles(uint32_t* count, void** handles) {
  if (handles && *count >= 1) handles[0] = &g_socket;
  *count = 1;
  return 0;
}
EXPORT int amdsmi_get_processor_handles(void* socket, uint32_t* count, void** handles) {
  if (socket != &g_socket) return 1;
  if (handles && *count >= 1) handles[0] = &g_gpu;
  *count = 1;
  return 0;
}
EXPORT int amdsmi_get_gpu_device_bdf(void* gpu, uint64_t* bdf) {
  if (gpu != &g_gpu) return 1;
  *bdf = (uint64_t{0} << 16) | (0x03u << 8) | (0u << 3) | 0u; // 0000:03:00.0
  return 0;
}
EXPORT int amdsmi_get_gpu_asic_info(void* gpu, void* info) {
  if (gpu != &g_gpu) return 1;
  std::strcpy(static_cast<char*>(info), "Navi 48 [Radeon RX 9070/9070 XT]");
  return 0;
}
EXPORT int amdsmi_get_gpu_vram_usage(void* gpu, uint32_t* usage) {
  if (gpu != &g_gpu) return 1;
  usage[0] = 16304; // MB
  usage[1] = 512;
  return 0;
}
EXPORT int amdsmi_get_temp_metric(void* gpu, int type, int metric, int64_t* celsius) {
  if (gpu != &g_gpu || type != 0 || metric != 0) return 2; // not supported
  *celsius = 41;
  return 0;
}
