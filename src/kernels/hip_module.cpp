// The one export of the HIP kernels' module (hip_attention.hpp): its function table.
#include "kernels/hip_attention.hpp"

extern "C" __attribute__((visibility("default"))) const sdpa_doctor::kernels::hip_impl::Api*
sdpa_doctor_hip_kernels_api() {
  namespace impl = sdpa_doctor::kernels::hip_impl;
  static const impl::Api api{impl::unavailable_reason, impl::health_check, impl::run};
  return &api;
}
