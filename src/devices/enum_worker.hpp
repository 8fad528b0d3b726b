// devices/enum_worker: the parts of sdpa-doctor-enum-worker, the child that opens the HIP runtime
// and AMD SMI (else ROCm SMI), the CUDA driver and NVML at run time through the loader and asks them about devices, so a
// missing library is an answer and a hanging or crashing driver takes down the child, not the
// doctor. Each part returns one JSON object; its "library" says which file was opened and why,
// or why none was. Depends on core, loader and nlohmann-json; no vendor header.
#pragma once

#include "core/expected.hpp"
#include "loader/loader.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <cstring>
#include <string>
#include <string_view>

namespace sdpa_doctor::devices::enum_worker {

// {"library":{...},"runtime_version":N,"props_abi":"R0600 (HIP 6 and 7)","init":"hipSuccess",
//  "count":N,"devices":[...],"mapped":["/path/libamdhip64.so.6..."]}.
nlohmann::json query_hip(const loader::SearchContext& where);
// {"library":{...,"name":"amd_smi"},"version":"..","init":"AMDSMI_STATUS_SUCCESS","count":N,
//  "devices":[...]}; ROCm SMI answers only when AMD SMI cannot be opened ("amd_smi" then says why).
nlohmann::json query_smi(const loader::SearchContext& where);

// {"library":{...},"driver_version":13000,"init":"CUDA_SUCCESS","count":N,"devices":[{"index",
//  "name","cc_major","cc_minor","total_mem_bytes","pci_bus",...}]}: the CUDA driver API.
nlohmann::json query_cuda(const loader::SearchContext& where);
// {"library":{...},"driver_version":"580.65.06","cuda_driver_version":13000,"init":"Success",
//  "count":N,"devices":[{"index","name","pci_bus_id","memory_total_bytes",...}]}: NVML.
nlohmann::json query_nvml(const loader::SearchContext& where);

// {"path",...,"version":"13.0"} of a run-time compiler (NVRTC, hipRTC) the loader opened, or why
// none opened: the compiler of our own GPU kernels, asked for its version only.
nlohmann::json rtc_json(loader::Library library, const char* version_function,
                        const loader::SearchContext& where);

// The line the worker writes on stderr before it calls into an opened library, so a crash in that
// library names the file and where it was found: "<mark><path>\t<why>".
inline constexpr std::string_view k_calling_mark = "sdpa-doctor-enum-worker: calling ";
void say_calling(const loader::Opened& library);

// NUL-terminated text from a buffer a runtime filled (it may forget the terminator).
template <std::size_t N> std::string text_of(const std::array<char, N>& buffer) {
  return std::string(buffer.data(), strnlen(buffer.data(), N));
}

// {"path","soname","why","tried":[...]} of an opened library, or {"error": why none opened,
// "found": [files of that name in the search places, which then exist but do not load]}.
nlohmann::json library_json(const Expected<loader::Opened>& opened, loader::Library library,
                            const loader::SearchContext& where);

} // namespace sdpa_doctor::devices::enum_worker
