#include "report/inventory.hpp"

#include "core/model_json.hpp"

namespace sdpa_doctor::report {

using nlohmann::json;

json inventory_to_json(const DeviceInventory& inventory) { return to_json(inventory); }

std::string render_inventory_json(const DeviceInventory& inventory) {
  const json doc = {{"schema", "sdpa-doctor/devices/v1"}, {"inventory", inventory_to_json(inventory)}};
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

} // namespace sdpa_doctor::report
