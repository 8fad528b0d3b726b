#include "devices/enum_worker.hpp"

#include <rocm_smi/rocm_smi.h>

#include <cstdint>
#include <string>

namespace sdpa_doctor::devices::enum_worker {

namespace {

std::string status_name(rsmi_status_t status) {
  switch (status) {
  case RSMI_STATUS_SUCCESS: return "RSMI_STATUS_SUCCESS";
  case RSMI_STATUS_INVALID_ARGS: return "RSMI_STATUS_INVALID_ARGS";
  case RSMI_STATUS_NOT_SUPPORTED: return "RSMI_STATUS_NOT_SUPPORTED";
  case RSMI_STATUS_FILE_ERROR: return "RSMI_STATUS_FILE_ERROR";
  case RSMI_STATUS_PERMISSION: return "RSMI_STATUS_PERMISSION";
  case RSMI_STATUS_OUT_OF_RESOURCES: return "RSMI_STATUS_OUT_OF_RESOURCES";
  case RSMI_STATUS_INTERNAL_EXCEPTION: return "RSMI_STATUS_INTERNAL_EXCEPTION";
  case RSMI_STATUS_INIT_ERROR: return "RSMI_STATUS_INIT_ERROR";
  case RSMI_STATUS_NOT_FOUND: return "RSMI_STATUS_NOT_FOUND";
  case RSMI_STATUS_BUSY: return "RSMI_STATUS_BUSY";
  case RSMI_STATUS_UNEXPECTED_DATA: return "RSMI_STATUS_UNEXPECTED_DATA";
  default: return "RSMI_STATUS_" + std::to_string(static_cast<int>(status));
  }
}

std::string status_text(rsmi_status_t status) {
  const char* text = nullptr;
  if (rsmi_status_string(status, &text) == RSMI_STATUS_SUCCESS && text) return text;
  return status_name(status);
}

// NOT_SUPPORTED is an ordinary answer: the key stays absent. Other failures are recorded under
// "errors" so a reader can tell "this card has no sensor" from "the call failed".
struct Recorder {
  nlohmann::json& device;
  bool ok(const char* key, rsmi_status_t status) {
    if (status == RSMI_STATUS_SUCCESS) return true;
    if (status != RSMI_STATUS_NOT_SUPPORTED) device["errors"][key] = status_name(status);
    return false;
  }
};

} // namespace

nlohmann::json query_rocm_smi() {
  nlohmann::json out = {{"built", true}};
  const rsmi_status_t init = rsmi_init(0);
  out["init"] = status_name(init);
  if (init != RSMI_STATUS_SUCCESS) {
    out["init_text"] = status_text(init);
    out["count"] = 0;
    return out;
  }
  char buffer[256] = {};
  if (rsmi_version_str_get(RSMI_SW_COMP_DRIVER, buffer, sizeof buffer) == RSMI_STATUS_SUCCESS)
    out["driver_version"] = std::string(buffer);
  uint32_t count = 0;
  const rsmi_status_t count_status = rsmi_num_monitor_devices(&count);
  if (count_status != RSMI_STATUS_SUCCESS) {
    out["count_status"] = status_name(count_status);
    count = 0;
  }
  out["count"] = count;
  nlohmann::json devices = nlohmann::json::array();
  for (uint32_t i = 0; i < count; ++i) {
    nlohmann::json device = {{"index", i}};
    Recorder r{device};
    buffer[0] = '\0';
    if (r.ok("name", rsmi_dev_name_get(i, buffer, sizeof buffer))) device["name"] = buffer;
    buffer[0] = '\0';
    if (r.ok("brand", rsmi_dev_brand_get(i, buffer, sizeof buffer))) device["brand"] = buffer;
    buffer[0] = '\0';
    if (r.ok("vendor", rsmi_dev_vendor_name_get(i, buffer, sizeof buffer)))
      device["vendor"] = buffer;
    uint64_t bdfid = 0;
    if (r.ok("bdfid", rsmi_dev_pci_id_get(i, &bdfid))) device["bdfid"] = bdfid;
    uint64_t total = 0, used = 0;
    if (r.ok("vram_total", rsmi_dev_memory_total_get(i, RSMI_MEM_TYPE_VRAM, &total)))
      device["vram_total_bytes"] = total;
    if (r.ok("vram_used", rsmi_dev_memory_usage_get(i, RSMI_MEM_TYPE_VRAM, &used)))
      device["vram_used_bytes"] = used;
    int64_t millidegrees = 0;
    if (r.ok("temperature",
             rsmi_dev_temp_metric_get(i, RSMI_TEMP_TYPE_EDGE, RSMI_TEMP_CURRENT, &millidegrees)))
      device["temperature_c"] = static_cast<double>(millidegrees) / 1000.0;
    uint64_t microwatts = 0;
    if (r.ok("power", rsmi_dev_power_ave_get(i, 0, &microwatts)))
      device["power_w"] = static_cast<double>(microwatts) / 1e6;
    buffer[0] = '\0';
    if (r.ok("vbios", rsmi_dev_vbios_version_get(i, buffer, sizeof buffer)))
      device["vbios"] = buffer;
    devices.push_back(device);
  }
  out["devices"] = devices;
  rsmi_shut_down();
  return out;
}

} // namespace sdpa_doctor::devices::enum_worker
