// report/inventory: renderers for a DeviceInventory, the console block of `sdpa-doctor devices`
// (and the device part of other reports) and its JSON. Pure functions from core types to text.
// Depends on core and nlohmann-json only; must not depend on devices, isolate, HIP or torch.
#pragma once

#include "core/model.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace sdpa_doctor::report {

struct InventoryConsoleOptions {
  bool color = false;       // ANSI colours on severity tags
  bool show_ok = true;      // list findings of severity ok too
  bool show_sources = true; // the per-source lines of each device
  bool show_arch_verdict = true; // each device's Device::gfx verdict (the check says it elsewhere)
};

// One block per device, then the runtime, the sources' status and the findings, each with its
// severity and remedy. With no device, one plain line says why. Ends with a newline.
std::string render_inventory_console(const DeviceInventory& inventory,
                                     const InventoryConsoleOptions& options = {});

// The inventory as JSON: numbers stay numbers with units in the keys (vram_total_bytes), unknown
// values are null. The object sits under "inventory" in every report.
nlohmann::json inventory_to_json(const DeviceInventory& inventory);

// The document `sdpa-doctor devices --json` writes: {"schema":"sdpa-doctor/devices/v1",
// "inventory":{...}}, pretty-printed, ending with a newline.
std::string render_inventory_json(const DeviceInventory& inventory);

} // namespace sdpa_doctor::report
