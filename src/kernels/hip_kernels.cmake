# sdpa_kernels_hip: attention_hip.hip compiled by hipcc into one object carrying a code object for
# every arch in CMAKE_HIP_ARCHITECTURES (enable_language(HIP) is not usable on every distro's
# ROCm packaging, so hipcc is driven directly), in a module the workers load on first use
# (hip_attention.hpp), beside them in the build tree and when installed.
set(SDPA_KERNELS_HIP_SOURCE ${CMAKE_CURRENT_SOURCE_DIR}/attention_hip.hip)
set(SDPA_KERNELS_HIP_OBJECT ${CMAKE_CURRENT_BINARY_DIR}/attention_hip.o
    CACHE INTERNAL "HIP kernel object (checked by tests/kernels)")
set(_sdpa_arch_flags "")
foreach(arch ${CMAKE_HIP_ARCHITECTURES})
  list(APPEND _sdpa_arch_flags --offload-arch=${arch})
endforeach()
set(SDPA_KERNELS_HIP_FLAGS -fPIC -O3 -std=c++17 ${_sdpa_arch_flags} -I${PROJECT_SOURCE_DIR}/src
    CACHE INTERNAL "hipcc flags of the HIP kernels (reused by the syntax test)")
add_custom_command(
  OUTPUT ${SDPA_KERNELS_HIP_OBJECT}
  COMMAND ${SDPA_DOCTOR_HIPCC} ${SDPA_KERNELS_HIP_FLAGS} -c ${SDPA_KERNELS_HIP_SOURCE}
          -o ${SDPA_KERNELS_HIP_OBJECT}
  DEPENDS ${SDPA_KERNELS_HIP_SOURCE} ${CMAKE_CURRENT_SOURCE_DIR}/attention_core.hpp
          ${CMAKE_CURRENT_SOURCE_DIR}/attn_params.hpp ${CMAKE_CURRENT_SOURCE_DIR}/hip_attention.hpp
  COMMENT "hipcc attention_hip.hip (${CMAKE_HIP_ARCHITECTURES})"
  VERBATIM)
set_source_files_properties(${SDPA_KERNELS_HIP_OBJECT} PROPERTIES EXTERNAL_OBJECT TRUE
                                                                  GENERATED TRUE)
add_library(sdpa_kernels_hip MODULE ${SDPA_KERNELS_HIP_OBJECT} hip_module.cpp)
set_target_properties(sdpa_kernels_hip PROPERTIES LINKER_LANGUAGE CXX PREFIX "" SUFFIX ".so"
                      OUTPUT_NAME sdpa-doctor-hip-kernels
                      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}
                      CXX_VISIBILITY_PRESET hidden)
target_include_directories(sdpa_kernels_hip PRIVATE ${PROJECT_SOURCE_DIR}/src)
install(TARGETS sdpa_kernels_hip LIBRARY DESTINATION ${CMAKE_INSTALL_BINDIR})
# hip::amdhip64, not hip::host: hip::host also links clang's compiler-rt builtins, whose
# __truncsfhf2/__extendhfsf2 use another calling convention than GCC's for _Float16, which
# silently corrupts every fp16 conversion in g++-compiled code (core's round_to_dtype).
target_link_libraries(sdpa_kernels_hip PUBLIC hip::amdhip64)
