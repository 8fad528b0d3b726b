// devices: GPU enumeration. Asks the HIP runtime and AMD SMI / ROCm SMI, the CUDA driver and NVML
// in the isolated sdpa-doctor-enum-worker child (`--hip`, `--smi`, `--cuda`, `--nvml`: one run
// each, so a hang in one loses nothing of the others), never in this process: the child opens them through the loader, the diagnosed
// torch's folders first (`--torch-lib`), with the few entry points of hip_abi.hpp / smi_abi.hpp
// and no vendor header, and says which file it opened and why (inventory.runtime). Reads the KFD
// topology and PCI/DRM facts from sysfs, checks device nodes, groups and environment variables,
// and joins what each source saw into one DeviceInventory by PCI address (sources.hpp). Also the
// gfx arch table (family, wave size, marketing names, matrix instructions) as compiled-in data,
// and the host facts. Depends on core, isolate (the enum worker is run_simple's) and loader (in
// the enum worker only); must never include HIP, AMD/ROCm SMI, torch, workers or report.
#pragma once

#include "core/model.hpp"

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sdpa_doctor::devices {

// The doctor's own environment as a map (what `environ` holds right now).
std::map<std::string, std::string> process_environment();

// Facts about this host for a report: hostname, user, kernel, machine, os (from /etc/os-release);
// a fact that cannot be read is left out.
std::map<std::string, std::string> host_facts();

// What the diagnosed torch was built for, as its torch/version.py says (read, not imported).
struct TorchBuild {
  std::string version; // "2.14.1+cu130"
  std::string cuda;    // torch.version.cuda, "13.0"; empty on a ROCm or CPU build
  std::string hip;     // torch.version.hip, "7.1.25424"; empty on a CUDA or CPU build
};
// From the version.py beside the first folder (torch/lib) of `torch_lib_dirs`; nullopt when there
// is none or it names no version.
std::optional<TorchBuild> read_torch_build(const std::vector<std::string>& torch_lib_dirs);
// "CUDA 13.0", "ROCm 7.1" or "CPU".
std::string torch_build_text(const TorchBuild& build);
// What `python`'s torch was built to run, as the python probe's hello facts say it: "arch_list"
// (torch.cuda.get_arch_list(), or the compile-time flags where no GPU is visible; "n/a" on a CPU
// build), else "arch_list_error"; and "torch", its version. Imports torch once (seconds).
std::map<std::string, std::string> torch_arch_facts(const std::string& python,
                                                    std::chrono::milliseconds deadline);

struct EnumerateOptions {
  // Filesystem root that holds sys/ and proc/: "/" on a live machine, a captured tree in bug
  // reports and tests.
  std::string sysfs_root = "/";
  // Where kfd and dri/renderD* are checked; empty = skip the device-node checks (a captured
  // tree says nothing about this machine's /dev).
  std::string dev_root = "/dev";
  bool use_hip = true; // run the enum worker's HIP part
  bool use_smi = true; // run the enum worker's AMD SMI / ROCm SMI part
  bool use_cuda = true; // run the enum worker's CUDA driver part
  bool use_nvml = true; // run the enum worker's NVML part
  // Where the diagnosed torch keeps its own libraries (torch/lib, TheRock's _rocm_sdk_*/lib): the
  // worker looks there first, so it opens the HIP runtime that torch loads. Empty: ROCm's and the
  // system's places only.
  std::vector<std::string> torch_lib_dirs;
  // What that torch was built for; nullopt = read from torch_lib_dirs by enumerate_devices. The
  // findings speak to it: a CUDA torch is not told to install ROCm, a ROCm torch not the driver.
  std::optional<TorchBuild> torch_build;
  // For each enum worker run; a driver that hangs hipInit is killed after this.
  std::chrono::milliseconds deadline{20'000};
  // The variables the checks read and the worker is started with (tests inject their own).
  std::map<std::string, std::string> environment = process_environment();
  // The enum worker executable; empty = core::find_worker("sdpa-doctor-enum-worker").
  std::string worker_path;
};

// Runs every enabled source in a fixed order (HIP, SMI, CUDA, NVML, sysfs, environment) and
// merges them. Never throws for what a machine can get wrong: each failure becomes a Finding and a
// sources_status entry. An empty device list comes with no_gpu_reason set.
DeviceInventory enumerate_devices(const EnumerateOptions& options);

// Adds the GPUs the probed torch sees (run::PythonChoice::gpus, index = cuda:N) that no source
// of the inventory saw: an NVIDIA GPU, or an AMD GPU whose runtime only the torch wheel carries.
// Each such device gets finding `gpu-seen-by-torch-only`, so that `--device cuda:N` and the
// default targets reach it. A device the sources saw keeps their facts. `python` names the
// interpreter that saw them.
void add_torch_gpus(DeviceInventory& inventory, const std::vector<Device>& seen,
                    const std::string& python);

// The HIP runtime files the probed torch's own process mapped once imported
// (run::PythonChoice::torch_hip_runtimes), beside the one the enumeration worker opened: two in
// torch's process, or another file than the doctor's, is a finding; the one torch loads goes in
// inventory.runtime["torch_hip_runtime_library"]. `python` names the interpreter.
void compare_torch_hip_runtime(DeviceInventory& inventory, const std::vector<std::string>& mapped,
                               const std::string& python);

// ---- arch knowledge --------------------------------------------------------------------------

struct GfxArch {
  std::string_view target;      // "gfx1201"
  std::string_view family;      // "RDNA4"
  int wave_size;                // default wavefront size HIP reports (warpSize)
  std::string_view matrix;      // "WMMA", "MFMA" or "none"
  bool integrated;              // only ever shipped as an APU's GPU
  std::string_view marketing;   // "Radeon RX 9070; Radeon RX 9070 XT; ...", "; " separates
};

// The table entry for a target ("gfx1201", or a gcnArchName such as "gfx90a:sramecc+:xnack-");
// nullopt for targets the table does not know (shown as "unknown", never guessed).
std::optional<GfxArch> find_gfx_arch(std::string_view target);
const std::vector<GfxArch>& gfx_arch_table();

// "gfx90a:sramecc+:xnack-" -> "gfx90a"; text that is not a gfx name -> "".
std::string base_gfx_target(std::string_view arch_name);

// KFD gfx_target_version (major*10000 + minor*100 + stepping, decimal) -> "gfx1201";
// 90010 -> "gfx90a". nullopt for 0 (CPU), or out of range (minor or stepping above 15).
std::optional<std::string> gfx_target_from_version(int64_t version);

// HSA_OVERRIDE_GFX_VERSION "11.0.0" -> "gfx1100", "9.0.10" -> "gfx90a"; nullopt if malformed.
std::optional<std::string> gfx_target_from_override(std::string_view value);

// The marketing names of an entry, split on "; ".
std::vector<std::string> marketing_names(const GfxArch& arch);

// "0:3:0.0", "0000:03:00.0", "03:00.0" -> "0000:03:00.0"; "" if malformed.
std::string normalize_pci_bdf(std::string_view text);
// From a domain and the PCI bus/device/function numbers.
std::string make_pci_bdf(uint32_t domain, uint32_t bus, uint32_t device, uint32_t function);
// KFD location_id ((bus << 8) | devfn) and domain -> "0000:03:00.0".
std::string pci_bdf_from_location(uint32_t domain, uint32_t location_id);
// ROCm SMI's BDFID (domain << 32 | bus << 8 | device << 3 | function) -> "0000:03:00.0".
std::string pci_bdf_from_rsmi(uint64_t bdfid);

// A product name for a PCI id where the id pins it down (e.g. 1002:7550 rev c0 ->
// "AMD Radeon RX 9070 XT"); empty when the table does not know it.
std::string pci_product_name(uint32_t vendor, uint32_t device, std::optional<uint32_t> revision);

} // namespace sdpa_doctor::devices
