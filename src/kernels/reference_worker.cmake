# The reference worker (src/workers/reference_worker*.cpp): included by src/CMakeLists.txt after
# src/workers, since it needs sdpa_workers and sdpa_kernels both.
if(TARGET sdpa_workers)
  add_library(sdpa_reference_worker STATIC
              ${PROJECT_SOURCE_DIR}/src/workers/reference_worker_executor.cpp)
  target_link_libraries(sdpa_reference_worker PUBLIC sdpa_workers sdpa_kernels
                        PRIVATE sdpa_doctor_warnings)
  add_executable(sdpa-doctor-ref-worker ${PROJECT_SOURCE_DIR}/src/workers/reference_worker.cpp)
  target_link_libraries(sdpa-doctor-ref-worker PRIVATE sdpa_reference_worker sdpa_doctor_warnings)
  install(TARGETS sdpa-doctor-ref-worker RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
