// devices/enum_worker: the parts of sdpa-doctor-enum-worker, the child that asks the HIP runtime
// and ROCm SMI about devices so a hanging or crashing driver takes down the child, not the doctor.
// Each part returns one JSON object; a library not built in returns {"built": false}.
// Depends on nlohmann-json and, in the _hip/_rsmi files only, on HIP and ROCm SMI.
#pragma once

#include <nlohmann/json.hpp>

namespace sdpa_doctor::devices::enum_worker {

// {"built":true,"init":"hipSuccess","count":N,"runtime_version":..,"devices":[...]}.
nlohmann::json query_hip();
// {"built":true,"init":"RSMI_STATUS_SUCCESS","count":N,"driver_version":"..","devices":[...]}.
nlohmann::json query_rocm_smi();

} // namespace sdpa_doctor::devices::enum_worker
