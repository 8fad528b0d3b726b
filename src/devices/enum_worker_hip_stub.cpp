#include "devices/enum_worker.hpp"

namespace sdpa_doctor::devices::enum_worker {

nlohmann::json query_hip() {
  return {{"built", false}, {"reason", "sdpa-doctor was built without the HIP runtime"}};
}

} // namespace sdpa_doctor::devices::enum_worker
