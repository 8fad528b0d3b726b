// devices/sources: the inside of enumeration, for the merge and for tests. One small interface
// per source of device facts (HIP, AMD/ROCm SMI, sysfs, environment), each failing softly into
// findings; the parsers of what they read. Depends on core and the standard library.
#pragma once

#include "core/expected.hpp"
#include "core/model.hpp"
#include "devices/devices.hpp"

#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sdpa_doctor::devices {

// What one source saw. Devices carry only the fields this source knows.
struct SourceResult {
  std::vector<Device> devices;
  std::map<std::string, std::string> runtime; // host-level versions ("hip_runtime_version")
  std::vector<Finding> findings;
  std::string status = "ok"; // "ok", or one line saying why it could not answer
  // Host facts the merge uses to say why there is no GPU ("kfd" -> "missing", ...).
  std::map<std::string, std::string> facts;
};

class DeviceSource {
public:
  virtual ~DeviceSource() = default;
  virtual std::string_view name() const = 0; // "hip", "smi", "cuda", "nvml", "sysfs", "environment"
  // Empty when the source should run; else why it is skipped ("disabled by --no-hip").
  virtual std::string skip_reason(const EnumerateOptions& options) const = 0;
  virtual SourceResult read(const EnumerateOptions& options) = 0;
};

std::unique_ptr<DeviceSource> make_hip_source();
std::unique_ptr<DeviceSource> make_smi_source();
std::unique_ptr<DeviceSource> make_cuda_source();
std::unique_ptr<DeviceSource> make_nvml_source();
std::unique_ptr<DeviceSource> make_sysfs_source();
std::unique_ptr<DeviceSource> make_environment_source();

// The finding for a process that has more than one HIP runtime file mapped (`mapped`: their paths).
Finding two_hip_runtimes(const std::string& process, const std::vector<std::string>& mapped);

struct NamedResult {
  std::string source;
  SourceResult result;
  bool skipped = false;
};

// Joins the sources' devices by PCI address (devices without one are joined by HIP index or
// kept apart), fills the arch facts from the table, records disagreements in Device::sources
// with a finding, and says why there is no GPU when there is none.
DeviceInventory merge_sources(const std::vector<NamedResult>& results,
                              const EnumerateOptions& options);

// ---- reading files that may be anything ----------------------------------------------------

inline constexpr std::size_t k_max_file_bytes = 64 * 1024;

struct FileText {
  std::string text;
  bool truncated = false; // longer than the cap; `text` holds the first k_max_file_bytes
};

// Reads a regular (or sysfs) file without following it into a FIFO or device, capped at
// `cap` bytes. An error names the file and errno text ("... : Too many levels of symbolic links").
Expected<FileText> read_capped(const std::filesystem::path& path,
                               std::size_t cap = k_max_file_bytes);

// ---- sysfs parsers ---------------------------------------------------------------------------

// KFD topology `properties`: "key value" lines, values decimal integers (some are u64).
struct KfdProperties {
  std::map<std::string, std::string> raw;
  std::vector<std::string> problems; // malformed lines, in file order
  // The value of `key` if present and a decimal integer; else nullopt (and why in `problem`).
  std::optional<int64_t> integer(const std::string& key, std::string* problem = nullptr) const;
};

KfdProperties parse_kfd_properties(std::string_view text);

// A decimal or 0x-hex integer as sysfs writes it ("0x1002\n", "17163091968\n").
std::optional<int64_t> parse_sysfs_integer(std::string_view text);

// The first line of a sysfs text file, whitespace trimmed.
std::string first_line(std::string_view text);

} // namespace sdpa_doctor::devices
