# Required: fmt, spdlog, CLI11, nlohmann-json (system packages, found with find_package).
# Optional, each behind one tri-state option: HIP runtime (enumeration), ROCm SMI, LibTorch.
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

# --- HIP ------------------------------------------------------------------------------------
# Nothing of HIP is needed to build: the reference kernels are compiled at run time (hipRTC /
# NVRTC, src/kernels/rtc.hpp) and the runtimes are opened with dlopen. Until the enumeration
# worker opens the HIP runtime that way too, it links the one found here, if any.
set(SDPA_DOCTOR_HIP_SUMMARY "off")
set(_sdpa_hip_found FALSE)
if(NOT SDPA_DOCTOR_WITH_HIP STREQUAL "OFF")
  find_path(SDPA_DOCTOR_HIP_INCLUDE hip/hip_runtime_api.h HINTS /opt/rocm/include)
  find_library(SDPA_DOCTOR_HIP_LIBRARY amdhip64 HINTS /opt/rocm/lib)
  if(SDPA_DOCTOR_HIP_INCLUDE AND SDPA_DOCTOR_HIP_LIBRARY)
    set(_sdpa_hip_found TRUE)
    if(NOT TARGET hip::amdhip64)
      add_library(hip::amdhip64 UNKNOWN IMPORTED)
      set_target_properties(hip::amdhip64 PROPERTIES
        IMPORTED_LOCATION "${SDPA_DOCTOR_HIP_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${SDPA_DOCTOR_HIP_INCLUDE}"
        INTERFACE_COMPILE_DEFINITIONS __HIP_PLATFORM_AMD__)
    endif()
  endif()
endif()
resolve_tri_state(SDPA_DOCTOR_WITH_HIP "${_sdpa_hip_found}" "the HIP runtime (hip/hip_runtime_api.h, libamdhip64)")
if(SDPA_DOCTOR_WITH_HIP_ENABLED)
  # The version of the runtime linked, for --version.
  file(STRINGS "${SDPA_DOCTOR_HIP_INCLUDE}/hip/hip_version.h" _hip_version_lines
       REGEX "#define HIP_VERSION_(MAJOR|MINOR|PATCH) ")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX MATCH "HIP_VERSION_${_part} +([0-9]+)" _m "${_hip_version_lines}")
    set(_hip_${_part} "${CMAKE_MATCH_1}")
  endforeach()
  set(SDPA_DOCTOR_HIP_VERSION "${_hip_MAJOR}.${_hip_MINOR}.${_hip_PATCH}")
  set(SDPA_DOCTOR_HIP_SUMMARY "on (HIP ${SDPA_DOCTOR_HIP_VERSION}, enumeration only)")
elseif(NOT SDPA_DOCTOR_WITH_HIP STREQUAL "OFF")
  set(SDPA_DOCTOR_HIP_SUMMARY "not found: HIP runtime not built in")
endif()

# --- ROCm SMI -------------------------------------------------------------------------------
set(SDPA_DOCTOR_ROCM_SMI_SUMMARY "off")
set(rocm_smi_FOUND FALSE)
# Debian's rocm_smi-config.cmake references files the package does not ship (liboam), so the
# header and library are found directly and wrapped in an imported target.
if(NOT SDPA_DOCTOR_WITH_ROCM_SMI STREQUAL "OFF")
  find_path(SDPA_DOCTOR_ROCM_SMI_INCLUDE rocm_smi/rocm_smi.h HINTS /opt/rocm/include)
  find_library(SDPA_DOCTOR_ROCM_SMI_LIBRARY rocm_smi64 HINTS /opt/rocm/lib)
  if(SDPA_DOCTOR_ROCM_SMI_INCLUDE AND SDPA_DOCTOR_ROCM_SMI_LIBRARY)
    set(rocm_smi_FOUND TRUE)
    set(rocm_smi_VERSION "unknown")
    set(_rsmi_cfg "${SDPA_DOCTOR_ROCM_SMI_INCLUDE}/rocm_smi/rocm_smi64Config.h")
    if(EXISTS "${_rsmi_cfg}")
      file(STRINGS "${_rsmi_cfg}" _rsmi_lines REGEX "#define rocm_smi_VERSION_(MAJOR|MINOR|PATCH)")
      foreach(_part MAJOR MINOR PATCH)
        string(REGEX MATCH "rocm_smi_VERSION_${_part} +\"?([0-9]+)" _m "${_rsmi_lines}")
        set(_rsmi_${_part} "${CMAKE_MATCH_1}")
      endforeach()
      if(NOT _rsmi_MAJOR STREQUAL "")
        set(rocm_smi_VERSION "${_rsmi_MAJOR}.${_rsmi_MINOR}.${_rsmi_PATCH}")
      endif()
    endif()
    if(NOT TARGET sdpa_doctor::rocm_smi)
      add_library(sdpa_doctor::rocm_smi UNKNOWN IMPORTED)
      set_target_properties(sdpa_doctor::rocm_smi PROPERTIES
        IMPORTED_LOCATION "${SDPA_DOCTOR_ROCM_SMI_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${SDPA_DOCTOR_ROCM_SMI_INCLUDE}")
    endif()
  endif()
endif()
resolve_tri_state(SDPA_DOCTOR_WITH_ROCM_SMI "${rocm_smi_FOUND}" "the ROCm SMI library (rocm_smi-config.cmake)")
if(SDPA_DOCTOR_WITH_ROCM_SMI_ENABLED)
  set(SDPA_DOCTOR_ROCM_SMI_VERSION "${rocm_smi_VERSION}")
  set(SDPA_DOCTOR_ROCM_SMI_SUMMARY "on (ROCm SMI ${rocm_smi_VERSION})")
elseif(NOT SDPA_DOCTOR_WITH_ROCM_SMI STREQUAL "OFF")
  set(SDPA_DOCTOR_ROCM_SMI_SUMMARY "not found: ROCm SMI not built in")
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
