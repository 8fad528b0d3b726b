#include "devices/devices.hpp"

#include <fmt/format.h>

#include <array>
#include <charconv>

extern char** environ;

namespace sdpa_doctor::devices {

namespace {

struct PciProduct {
  uint32_t device;
  int revision; // -1 = any revision of this device id
  std::string_view name;
};

// Only ids whose product is unambiguous (amdgpu.ids); a revision-specific row comes before the
// any-revision row of the same id. Everything else is named from the arch table instead.
constexpr std::array k_pci_products = {
    PciProduct{0x7550, 0xc0, "AMD Radeon RX 9070 XT"},
    PciProduct{0x7550, 0xc3, "AMD Radeon RX 9070"},
    PciProduct{0x7551, 0xc0, "AMD Radeon AI PRO R9700"},
    PciProduct{0x7590, 0xc0, "AMD Radeon RX 9060 XT"},
    PciProduct{0x744c, 0xc8, "AMD Radeon RX 7900 XTX"},
    PciProduct{0x744c, 0xcc, "AMD Radeon RX 7900 XT"},
    PciProduct{0x744c, 0xce, "AMD Radeon RX 7900 GRE"},
    PciProduct{0x7448, -1, "AMD Radeon PRO W7900"},
    PciProduct{0x74a0, -1, "AMD Instinct MI300A"},
    PciProduct{0x74a1, -1, "AMD Instinct MI300X"},
    PciProduct{0x74a5, -1, "AMD Instinct MI325X"},
    PciProduct{0x740f, -1, "AMD Instinct MI210"},
    PciProduct{0x740c, -1, "AMD Instinct MI250X / MI250"},
    PciProduct{0x738c, -1, "AMD Instinct MI100"},
    PciProduct{0x66af, -1, "AMD Radeon VII"},
};

bool parse_hex(std::string_view text, uint32_t& value) {
  if (text.empty() || text.size() > 8) return false;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
  return ec == std::errc{} && ptr == text.data() + text.size();
}

} // namespace

std::map<std::string, std::string> process_environment() {
  std::map<std::string, std::string> env;
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string_view kv = *entry;
    const auto eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

std::string make_pci_bdf(uint32_t domain, uint32_t bus, uint32_t device, uint32_t function) {
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", domain & 0xffff, bus & 0xff, device & 0x1f,
                     function & 0x7);
}

std::string pci_bdf_from_location(uint32_t domain, uint32_t location_id) {
  return make_pci_bdf(domain, (location_id >> 8) & 0xff, (location_id >> 3) & 0x1f,
                      location_id & 0x7);
}

std::string pci_bdf_from_rsmi(uint64_t bdfid) {
  // rsmi_dev_pci_id_get: domain in bits 63..32, bus 15..8, device 7..3, function 2..0.
  return make_pci_bdf(static_cast<uint32_t>(bdfid >> 32), static_cast<uint32_t>(bdfid >> 8) & 0xff,
                      static_cast<uint32_t>(bdfid >> 3) & 0x1f, static_cast<uint32_t>(bdfid) & 0x7);
}

std::string normalize_pci_bdf(std::string_view text) {
  // domain:bus:device.function, the domain optional (lspci prints it only when non-zero).
  const auto dot = text.rfind('.');
  if (dot == std::string_view::npos) return {};
  std::string_view head = text.substr(0, dot);
  uint32_t function = 0, device = 0, bus = 0, domain = 0;
  if (!parse_hex(text.substr(dot + 1), function) || function > 7) return {};
  const auto c2 = head.rfind(':');
  if (c2 == std::string_view::npos || !parse_hex(head.substr(c2 + 1), device) || device > 0x1f)
    return {};
  head = head.substr(0, c2);
  const auto c1 = head.rfind(':');
  if (c1 == std::string_view::npos) {
    if (!parse_hex(head, bus) || bus > 0xff) return {};
  } else {
    if (!parse_hex(head.substr(c1 + 1), bus) || bus > 0xff) return {};
    if (!parse_hex(head.substr(0, c1), domain) || domain > 0xffff) return {};
  }
  return make_pci_bdf(domain, bus, device, function);
}

std::string pci_product_name(uint32_t vendor, uint32_t device, std::optional<uint32_t> revision) {
  if (vendor != 0x1002) return {};
  for (const PciProduct& product : k_pci_products) {
    if (product.device != device) continue;
    if (product.revision < 0) return std::string(product.name);
    if (revision && *revision == static_cast<uint32_t>(product.revision))
      return std::string(product.name);
  }
  return {};
}

} // namespace sdpa_doctor::devices
