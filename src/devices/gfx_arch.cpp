#include "devices/devices.hpp"

#include <array>
#include <cctype>
#include <charconv>

namespace sdpa_doctor::devices {

namespace {

// Compiled in rather than read from data/ so the table cannot go missing beside the binary.
// Wave size is the default HIP warpSize: 64 on GCN/CDNA, 32 on RDNA (which can also run wave64).
// Marketing names list the products built on the die, not every OEM variant; "; " separates them.
constexpr std::array k_gfx_arches = {
    // GCN5 (Vega)
    GfxArch{"gfx900", "GCN5", 64, "none", false, "Radeon RX Vega 56; Radeon RX Vega 64; Radeon Vega Frontier Edition; Instinct MI25"},
    GfxArch{"gfx902", "GCN5", 64, "none", true, "Radeon Vega Graphics (Ryzen 2000/3000 APU)"},
    GfxArch{"gfx904", "GCN5", 64, "none", false, "Radeon Vega 12 (Pro Vega 20 mobile)"},
    GfxArch{"gfx906", "GCN5", 64, "none", false, "Radeon VII; Radeon Pro VII; Instinct MI50; Instinct MI60"},
    GfxArch{"gfx909", "GCN5", 64, "none", true, "Radeon Vega Graphics (Raven 2 APU)"},
    GfxArch{"gfx90c", "GCN5", 64, "none", true, "Radeon Graphics (Ryzen 4000/5000 APU)"},
    // CDNA
    GfxArch{"gfx908", "CDNA1", 64, "MFMA", false, "Instinct MI100"},
    GfxArch{"gfx90a", "CDNA2", 64, "MFMA", false, "Instinct MI210; Instinct MI250; Instinct MI250X"},
    GfxArch{"gfx940", "CDNA3", 64, "MFMA", false, "Instinct MI300 (early silicon)"},
    GfxArch{"gfx941", "CDNA3", 64, "MFMA", false, "Instinct MI300 (early silicon)"},
    GfxArch{"gfx942", "CDNA3", 64, "MFMA", false, "Instinct MI300X; Instinct MI300A; Instinct MI325X; Instinct MI308X"},
    GfxArch{"gfx950", "CDNA4", 64, "MFMA", false, "Instinct MI350X; Instinct MI355X"},
    // RDNA1
    GfxArch{"gfx1010", "RDNA1", 32, "none", false, "Radeon RX 5700; Radeon RX 5700 XT; Radeon RX 5600 XT"},
    GfxArch{"gfx1011", "RDNA1", 32, "none", false, "Radeon Pro 5600M; Radeon Pro V520"},
    GfxArch{"gfx1012", "RDNA1", 32, "none", false, "Radeon RX 5500; Radeon RX 5500 XT; Radeon RX 5300"},
    // RDNA2
    GfxArch{"gfx1030", "RDNA2", 32, "none", false,
            "Radeon RX 6800; Radeon RX 6800 XT; Radeon RX 6900 XT; Radeon RX 6950 XT; "
            "Radeon PRO W6800"},
    GfxArch{"gfx1031", "RDNA2", 32, "none", false, "Radeon RX 6700 XT; Radeon RX 6750 XT; Radeon RX 6700"},
    GfxArch{"gfx1032", "RDNA2", 32, "none", false,
            "Radeon RX 6600; Radeon RX 6600 XT; Radeon RX 6650 XT; Radeon PRO W6600"},
    GfxArch{"gfx1033", "RDNA2", 32, "none", true, "Steam Deck GPU (Van Gogh)"},
    GfxArch{"gfx1034", "RDNA2", 32, "none", false, "Radeon RX 6500 XT; Radeon RX 6400"},
    GfxArch{"gfx1035", "RDNA2", 32, "none", true, "Radeon 680M; Radeon 660M"},
    GfxArch{"gfx1036", "RDNA2", 32, "none", true, "Radeon Graphics (Ryzen 7000/9000 desktop)"},
    // RDNA3
    GfxArch{"gfx1100", "RDNA3", 32, "WMMA", false,
            "Radeon RX 7900 XTX; Radeon RX 7900 XT; Radeon RX 7900 GRE; Radeon PRO W7900; "
            "Radeon PRO W7800"},
    GfxArch{"gfx1101", "RDNA3", 32, "WMMA", false,
            "Radeon RX 7800 XT; Radeon RX 7700 XT; Radeon PRO W7700"},
    GfxArch{"gfx1102", "RDNA3", 32, "WMMA", false, "Radeon RX 7600; Radeon RX 7600 XT; Radeon PRO W7600"},
    GfxArch{"gfx1103", "RDNA3", 32, "WMMA", true, "Radeon 780M; Radeon 760M; Radeon 740M (Phoenix, Hawk Point)"},
    // RDNA3.5
    GfxArch{"gfx1150", "RDNA3.5", 32, "WMMA", true, "Radeon 890M; Radeon 880M (Ryzen AI 300, Strix Point)"},
    GfxArch{"gfx1151", "RDNA3.5", 32, "WMMA", true,
            "Radeon 8060S (Ryzen AI Max, Strix Halo); Radeon 8050S (Ryzen AI Max, Strix Halo)"},
    GfxArch{"gfx1152", "RDNA3.5", 32, "WMMA", true, "Radeon 860M; Radeon 840M (Krackan Point)"},
    // RDNA4
    GfxArch{"gfx1200", "RDNA4", 32, "WMMA", false, "Radeon RX 9060; Radeon RX 9060 XT"},
    GfxArch{"gfx1201", "RDNA4", 32, "WMMA", false,
            "Radeon RX 9070; Radeon RX 9070 XT; Radeon RX 9070 GRE; Radeon AI PRO R9700"},
};

bool is_hex_digit(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

char hex_digit(int value) { return "0123456789abcdef"[value & 0xf]; }

} // namespace

const std::vector<GfxArch>& gfx_arch_table() {
  static const std::vector<GfxArch> table(k_gfx_arches.begin(), k_gfx_arches.end());
  return table;
}

std::string base_gfx_target(std::string_view arch_name) {
  const std::string_view head = arch_name.substr(0, arch_name.find(':'));
  if (head.size() < 6 || head.size() > 8) return {};
  std::string out(head);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (out.compare(0, 3, "gfx") != 0) return {};
  for (char c : out.substr(3))
    if (!is_hex_digit(c)) return {};
  return out;
}

std::optional<GfxArch> find_gfx_arch(std::string_view target) {
  const std::string base = base_gfx_target(target);
  if (base.empty()) return std::nullopt;
  for (const GfxArch& arch : k_gfx_arches)
    if (arch.target == base) return arch;
  return std::nullopt;
}

std::vector<std::string> marketing_names(const GfxArch& arch) {
  std::vector<std::string> names;
  std::string_view rest = arch.marketing;
  while (!rest.empty()) {
    const auto cut = rest.find("; ");
    names.emplace_back(rest.substr(0, cut));
    if (cut == std::string_view::npos) break;
    rest.remove_prefix(cut + 2);
  }
  return names;
}

std::optional<std::string> gfx_target_from_version(int64_t version) {
  if (version <= 0 || version > 999999) return std::nullopt;
  const int64_t major = version / 10000;
  const int64_t minor = (version / 100) % 100;
  const int64_t stepping = version % 100;
  // The gfx name spells minor and stepping as one hex digit each.
  if (major < 6 || minor > 15 || stepping > 15) return std::nullopt;
  std::string out = "gfx" + std::to_string(major);
  out += hex_digit(static_cast<int>(minor));
  out += hex_digit(static_cast<int>(stepping));
  return out;
}

std::optional<std::string> gfx_target_from_override(std::string_view value) {
  int parts[3] = {0, 0, 0};
  std::string_view rest = value;
  for (int i = 0; i < 3; ++i) {
    const auto dot = rest.find('.');
    const std::string_view field = rest.substr(0, dot);
    if (field.empty() || (i < 2 && dot == std::string_view::npos)) return std::nullopt;
    const auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), parts[i]);
    if (ec != std::errc{} || ptr != field.data() + field.size()) return std::nullopt;
    rest = dot == std::string_view::npos ? std::string_view{} : rest.substr(dot + 1);
    if (i == 2 && dot != std::string_view::npos) return std::nullopt;
  }
  // from_chars takes a sign: a negative field is no version (and would overflow below).
  if (parts[0] < 0 || parts[1] < 0 || parts[2] < 0) return std::nullopt;
  if (parts[0] > 99 || parts[1] > 15 || parts[2] > 15) return std::nullopt;
  return gfx_target_from_version(int64_t{parts[0]} * 10000 + parts[1] * 100 + parts[2]);
}

} // namespace sdpa_doctor::devices
