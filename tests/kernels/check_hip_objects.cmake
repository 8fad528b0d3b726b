# ctest -P script: the HIP kernel object must carry a code object for every configured arch.
# -DOBJECT=... -DARCHS=gfx90a;gfx1030 -DOBJCOPY=... -DBUNDLER=...
file(REMOVE ${WORK}/fatbin.bin)
execute_process(COMMAND ${OBJCOPY} -O binary --only-section=.hip_fatbin ${OBJECT} ${WORK}/fatbin.bin
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT EXISTS ${WORK}/fatbin.bin)
  message(FATAL_ERROR "no .hip_fatbin section in ${OBJECT}: ${err}")
endif()
# Debian's clang-offload-bundler-17 is a link into /usr/lib/llvm-17/bin and looks for
# llvm-objcopy on PATH, where Debian 13 has only llvm-objcopy-17: its own LLVM folder goes first.
get_filename_component(bundler_dir ${BUNDLER} REALPATH)
get_filename_component(bundler_dir ${bundler_dir} DIRECTORY)
set(ENV{PATH} "${bundler_dir}:$ENV{PATH}")
execute_process(COMMAND ${BUNDLER} --list --type=o --input=${WORK}/fatbin.bin
                OUTPUT_VARIABLE listing RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "clang-offload-bundler --list failed: ${err}")
endif()
foreach(arch ${ARCHS})
  if(NOT listing MATCHES "amdgcn-amd-amdhsa--${arch}(\n|$|:)")
    message(FATAL_ERROR "no code object for ${arch} in ${OBJECT}; bundle holds:\n${listing}")
  endif()
endforeach()
message(STATUS "code objects: ${listing}")
