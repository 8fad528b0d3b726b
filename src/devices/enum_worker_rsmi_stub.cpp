#include "devices/enum_worker.hpp"

namespace sdpa_doctor::devices::enum_worker {

nlohmann::json query_rocm_smi() {
  return {{"built", false}, {"reason", "sdpa-doctor was built without the ROCm SMI library"}};
}

} // namespace sdpa_doctor::devices::enum_worker
