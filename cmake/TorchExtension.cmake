# torch_extension_target(PYTHON TARGET): LibTorch as PyTorch's own C++ extensions see it, asked of
# the torch that PYTHON imports with src/workers/torch_plugin/torch_facts.py, which the doctor's
# first-use build of the plugin asks too (no TorchConfig.cmake, no CUDA toolkit, no ROCm SDK):
#   its include directories (torch.utils.cpp_extension.include_paths()), as SYSTEM;
#   libtorch, libtorch_cpu and libc10 by full path from its torch/lib, and an RPATH there;
#   _GLIBCXX_USE_CXX11_ABI as that torch was built.
# On success TARGET is an imported INTERFACE target and, in the caller's scope, TORCH_EXT_FOUND is
# TRUE, TORCH_EXT_VERSION is torch.__version__, TORCH_EXT_GIT_VERSION the build's commit,
# TORCH_EXT_ABI its C++ ABI (0 or 1) and TORCH_EXT_LIB_DIR its torch/lib. Otherwise
# TORCH_EXT_FOUND is FALSE and TORCH_EXT_ERROR says why in one line.
function(torch_extension_target python target)
  set(TORCH_EXT_FOUND FALSE PARENT_SCOPE)
  if(NOT python)
    set(TORCH_EXT_ERROR "no Python interpreter (set SDPA_DOCTOR_PYTHON)" PARENT_SCOPE)
    return()
  endif()
  execute_process(COMMAND "${python}" "${CMAKE_SOURCE_DIR}/src/workers/torch_plugin/torch_facts.py"
                  OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc TIMEOUT 120)
  if(NOT _rc EQUAL 0)
    string(REGEX MATCH "[^\n]+\n?$" _last "${_err}")
    string(STRIP "${_last}" _last)
    set(TORCH_EXT_ERROR "${python} cannot tell its torch (${_last})" PARENT_SCOPE)
    return()
  endif()
  foreach(_key version git_version include lib abi)
    string(REGEX MATCH "(^|\n)${_key}=([^\n]*)" _ "${_out}")
    set(_${_key} "${CMAKE_MATCH_2}")
  endforeach()
  set(_libs)
  foreach(_name torch torch_cpu c10)
    if(NOT EXISTS "${_lib}/lib${_name}.so")
      set(TORCH_EXT_ERROR "${python}'s torch has no ${_lib}/lib${_name}.so" PARENT_SCOPE)
      return()
    endif()
    list(APPEND _libs "${_lib}/lib${_name}.so")
  endforeach()
  if(NOT _abi MATCHES "^[01]$" OR NOT _version)
    set(TORCH_EXT_ERROR "${python}'s torch gave no version or C++ ABI" PARENT_SCOPE)
    return()
  endif()

  add_library(${target} INTERFACE IMPORTED)
  # libtorch holds no symbol the plugin calls; a CUDA or ROCm torch loads its GPU operators from
  # what libtorch itself NEEDS (libtorch_cuda, libtorch_hip), so keep it where --as-needed is the
  # linker's default (Ubuntu).
  set_target_properties(${target} PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_include}"
    INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${_include}"
    INTERFACE_COMPILE_DEFINITIONS "_GLIBCXX_USE_CXX11_ABI=${_abi}"
    INTERFACE_LINK_LIBRARIES "-Wl,--push-state,--no-as-needed;${_libs};-Wl,--pop-state;${CMAKE_DL_LIBS}")
  set(TORCH_EXT_FOUND TRUE PARENT_SCOPE)
  set(TORCH_EXT_VERSION "${_version}" PARENT_SCOPE)
  set(TORCH_EXT_LIB_DIR "${_lib}" PARENT_SCOPE)
  set(TORCH_EXT_GIT_VERSION "${_git_version}" PARENT_SCOPE)
  set(TORCH_EXT_ABI "${_abi}" PARENT_SCOPE)
endfunction()
