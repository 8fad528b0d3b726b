// workers/torch_worker: the libtorch probe's executor, created for one (device, variant). Its
// implementation is the only translation unit that includes torch; this header does not.
// Depends on workers/worker.hpp only.
#pragma once

#include "workers/worker.hpp"

#include <memory>

namespace sdpa_doctor::workers {

std::unique_ptr<CaseExecutor> make_torch_executor(const WorkerArgs& args);

} // namespace sdpa_doctor::workers
