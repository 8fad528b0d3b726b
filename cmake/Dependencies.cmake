# Required: fmt, spdlog, CLI11, nlohmann-json (system packages, found with find_package).
# Optional, behind one tri-state option: LibTorch. The HIP runtime and AMD SMI / ROCm SMI are not
# build dependencies: the workers open them at run time (src/loader).
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(Threads REQUIRED)
if(SDPA_DOCTOR_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
set(SDPA_DOCTOR_BENCH_SUMMARY "off")
if(SDPA_DOCTOR_BUILD_BENCH)
  find_package(benchmark QUIET)
  set(SDPA_DOCTOR_BENCH_SUMMARY "google-benchmark not found: bench/ not built")
  if(benchmark_FOUND)
    set(SDPA_DOCTOR_BENCH_SUMMARY "on (google-benchmark ${benchmark_VERSION})")
  endif()
endif()

# --- LibTorch -------------------------------------------------------------------------------
# Found as its users find it: CMAKE_PREFIX_PATH, else torch.utils.cmake_prefix_path of
# SDPA_DOCTOR_PYTHON (default: the project's .venv, then python3 on PATH).
set(SDPA_DOCTOR_TORCH_SUMMARY "off")
set(Torch_FOUND FALSE)
if(NOT SDPA_DOCTOR_WITH_TORCH STREQUAL "OFF")
  if(NOT SDPA_DOCTOR_PYTHON)
    if(DEFINED ENV{SDPA_DOCTOR_PYTHON})
      set(_py "$ENV{SDPA_DOCTOR_PYTHON}")
    elseif(EXISTS "${CMAKE_SOURCE_DIR}/.venv/bin/python")
      set(_py "${CMAKE_SOURCE_DIR}/.venv/bin/python")
    else()
      find_program(_py NAMES python3 python)
    endif()
    set(SDPA_DOCTOR_PYTHON "${_py}" CACHE FILEPATH "Python whose torch the libtorch worker builds against")
  endif()
  find_package(Torch CONFIG QUIET)
  if(NOT Torch_FOUND AND SDPA_DOCTOR_PYTHON)
    execute_process(
      COMMAND ${SDPA_DOCTOR_PYTHON} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
      OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
      RESULT_VARIABLE _torch_rc)
    if(_torch_rc EQUAL 0 AND _torch_prefix)
      list(APPEND CMAKE_PREFIX_PATH "${_torch_prefix}")
      find_package(Torch CONFIG QUIET)
    endif()
  endif()
endif()
resolve_tri_state(SDPA_DOCTOR_WITH_TORCH "${Torch_FOUND}"
                  "LibTorch (TorchConfig.cmake; pass -DCMAKE_PREFIX_PATH or SDPA_DOCTOR_PYTHON)")
if(SDPA_DOCTOR_WITH_TORCH_ENABLED)
  set(SDPA_DOCTOR_TORCH_VERSION "${Torch_VERSION}")
  set(SDPA_DOCTOR_TORCH_SUMMARY "on (LibTorch ${Torch_VERSION} from ${Torch_DIR})")
elseif(NOT SDPA_DOCTOR_WITH_TORCH STREQUAL "OFF")
  set(SDPA_DOCTOR_TORCH_SUMMARY "not found: libtorch worker not built")
endif()
