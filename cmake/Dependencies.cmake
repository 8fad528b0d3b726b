# Required: fmt, spdlog, CLI11, nlohmann-json (system packages, found with find_package).
# Optional, behind one tri-state option: LibTorch. The HIP runtime and AMD SMI / ROCm SMI are not
# build dependencies: the workers open them at run time (src/loader).
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
# Our code links fmt and spdlog through these two. A wheel carries no libfmt or libspdlog beside
# it: there both are header-only (spdlog with the external fmt, as Debian's is built), since the
# distros ship no static library of either.
add_library(sdpa_doctor_fmt INTERFACE)
add_library(sdpa_doctor_spdlog INTERFACE)
if(SDPA_DOCTOR_WHEEL)
  target_link_libraries(sdpa_doctor_fmt INTERFACE fmt::fmt-header-only)
  get_target_property(_spdlog_include spdlog::spdlog_header_only INTERFACE_INCLUDE_DIRECTORIES)
  target_include_directories(sdpa_doctor_spdlog SYSTEM INTERFACE ${_spdlog_include})
  target_compile_definitions(sdpa_doctor_spdlog INTERFACE SPDLOG_FMT_EXTERNAL)
  target_link_libraries(sdpa_doctor_spdlog INTERFACE sdpa_doctor_fmt Threads::Threads)
else()
  target_link_libraries(sdpa_doctor_fmt INTERFACE fmt::fmt)
  target_link_libraries(sdpa_doctor_spdlog INTERFACE spdlog::spdlog)
endif()
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
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
# The LibTorch plugin the libtorch probe's worker opens (src/workers/torch_plugin/), built here
# the way PyTorch's own C++ extensions are, against the torch that SDPA_DOCTOR_PYTHON imports
# (cmake/TorchExtension.cmake): that torch's headers and torch/lib, no TorchConfig.cmake, so a CPU,
# CUDA or ROCm wheel builds it with no CUDA toolkit and no ROCm SDK. SDPA_DOCTOR_PYTHON defaults to
# $SDPA_DOCTOR_PYTHON, then (a wheel build) the interpreter pip builds for, then the project's
# .venv, then python3 on PATH. A torch that cannot be asked: no plugin here (AUTO; the doctor
# builds one on first use), or one line (ON).
set(SDPA_DOCTOR_TORCH_SUMMARY "off")
set(TORCH_EXT_FOUND FALSE)
if(NOT SDPA_DOCTOR_WITH_TORCH STREQUAL "OFF")
  if(SKBUILD AND Python_EXECUTABLE AND NOT DEFINED ENV{SDPA_DOCTOR_PYTHON})
    # pip builds for this interpreter, in a build directory kept from one install to the next
    # (perhaps into another environment): asked afresh each time.
    set(SDPA_DOCTOR_PYTHON "${Python_EXECUTABLE}" CACHE FILEPATH
        "Python whose torch the libtorch worker builds against" FORCE)
  elseif(NOT SDPA_DOCTOR_PYTHON)
    if(DEFINED ENV{SDPA_DOCTOR_PYTHON})
      set(_py "$ENV{SDPA_DOCTOR_PYTHON}")
    elseif(EXISTS "${CMAKE_SOURCE_DIR}/.venv/bin/python")
      set(_py "${CMAKE_SOURCE_DIR}/.venv/bin/python")
    else()
      find_program(_py NAMES python3 python)
    endif()
    set(SDPA_DOCTOR_PYTHON "${_py}" CACHE FILEPATH "Python whose torch the libtorch worker builds against")
  endif()
  include(TorchExtension)
  torch_extension_target("${SDPA_DOCTOR_PYTHON}" sdpa_doctor::torch)
endif()
if(SDPA_DOCTOR_WITH_TORCH STREQUAL "ON" AND NOT TORCH_EXT_FOUND)
  message(FATAL_ERROR "SDPA_DOCTOR_WITH_TORCH=ON but LibTorch was not found: ${TORCH_EXT_ERROR}")
endif()
resolve_tri_state(SDPA_DOCTOR_WITH_TORCH "${TORCH_EXT_FOUND}" "LibTorch")
if(SDPA_DOCTOR_WITH_TORCH_ENABLED)
  set(SDPA_DOCTOR_TORCH_VERSION "${TORCH_EXT_VERSION}")
  set(SDPA_DOCTOR_TORCH_SUMMARY "on (torch ${TORCH_EXT_VERSION} from ${TORCH_EXT_LIB_DIR})")
elseif(NOT SDPA_DOCTOR_WITH_TORCH STREQUAL "OFF")
  set(SDPA_DOCTOR_TORCH_SUMMARY "not found (${TORCH_EXT_ERROR}): no LibTorch plugin built in (the doctor builds one on first use)")
endif()
