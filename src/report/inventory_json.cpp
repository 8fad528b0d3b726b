#include "report/inventory.hpp"

namespace sdpa_doctor::report {

namespace {

using nlohmann::json;

template <typename T> json optional_value(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

json string_or_null(const std::string& value) { return value.empty() ? json(nullptr) : json(value); }

json gfx_to_json(const GfxTruth& g) {
  return {{"physical", g.physical},       {"effective", g.effective},
          {"override_env", g.override_env}, {"compiled_for", g.compiled_for},
          {"aotriton_images", g.aotriton_images}, {"ck_sdpa", g.ck_sdpa},
          {"source", g.source},           {"verdict", g.verdict},
          {"detail", g.detail},           {"remedy", g.remedy}};
}

json device_to_json(const Device& d) {
  json sources = json::object();
  for (const auto& [field, by_source] : d.sources) sources[field] = by_source;
  json out = {
      {"index", d.index >= 0 ? json(d.index) : json(nullptr)},
      {"name", string_or_null(d.name)},
      {"gfx_target", string_or_null(d.gfx_target)},
      {"gfx_arch_name", string_or_null(d.gfx_arch_name)},
      {"family", string_or_null(d.family)},
      {"marketing_names", d.marketing_names},
      {"matrix_instructions", string_or_null(d.matrix_instructions)},
      {"wave_size", optional_value(d.wave_size)},
      {"compute_units", optional_value(d.compute_units)},
      {"simd_count", optional_value(d.simd_count)},
      {"vram_total_bytes", optional_value(d.vram_total_bytes)},
      {"vram_used_bytes", optional_value(d.vram_used_bytes)},
      {"lds_per_block_bytes", optional_value(d.lds_per_block_bytes)},
      {"lds_per_cu_bytes", optional_value(d.lds_per_cu_bytes)},
      {"pci_bdf", string_or_null(d.pci_bdf)},
      {"driver_version", string_or_null(d.driver_version)},
      {"vbios", string_or_null(d.vbios)},
      {"temperature_c", optional_value(d.temperature_c)},
      {"power_w", optional_value(d.power_w)},
      {"kfd_node", string_or_null(d.kfd_node)},
      {"render_node", string_or_null(d.render_node)},
      {"integrated", d.integrated},
      {"sources", sources},
  };
  if (d.gfx) out["gfx"] = gfx_to_json(*d.gfx);
  return out;
}

} // namespace

json finding_to_json(const Finding& f) {
  return {{"id", f.id},
          {"severity", std::string(to_string(f.severity))},
          {"message", f.message},
          {"remedy", f.remedy},
          {"device", f.device},
          {"case_ids", f.case_ids}};
}

json inventory_to_json(const DeviceInventory& inventory) {
  json devices = json::array();
  for (const Device& d : inventory.devices) devices.push_back(device_to_json(d));
  json findings = json::array();
  for (const Finding& f : inventory.findings) findings.push_back(finding_to_json(f));
  return {{"gpu_found", !inventory.devices.empty()},
          {"no_gpu_reason", string_or_null(inventory.no_gpu_reason)},
          {"devices", devices},
          {"runtime", inventory.runtime},
          {"sources_status", inventory.sources_status},
          {"findings", findings}};
}

std::string render_inventory_json(const DeviceInventory& inventory) {
  const json doc = {{"schema", "sdpa-doctor/devices/v1"}, {"inventory", inventory_to_json(inventory)}};
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

} // namespace sdpa_doctor::report
