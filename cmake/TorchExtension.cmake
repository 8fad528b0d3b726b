# torch_extension_target(PYTHON TARGET): LibTorch as PyTorch's own C++ extensions see it, asked of
# the torch that PYTHON imports (no TorchConfig.cmake, no CUDA toolkit, no ROCm SDK):
#   its include directories (torch.utils.cpp_extension.include_paths()), as SYSTEM;
#   libtorch, libtorch_cpu and libc10 by full path from its torch/lib, and an RPATH there;
#   _GLIBCXX_USE_CXX11_ABI as that torch was built.
# On success TARGET is an imported INTERFACE target and, in the caller's scope, TORCH_EXT_FOUND is
# TRUE, TORCH_EXT_VERSION is torch.__version__ and TORCH_EXT_LIB_DIR its torch/lib. Otherwise
# TORCH_EXT_FOUND is FALSE and TORCH_EXT_ERROR says why in one line.
function(torch_extension_target python target)
  set(TORCH_EXT_FOUND FALSE PARENT_SCOPE)
  if(NOT python)
    set(TORCH_EXT_ERROR "no Python interpreter (set SDPA_DOCTOR_PYTHON)" PARENT_SCOPE)
    return()
  endif()
  # cpp_extension imports setuptools, which a fresh venv may lack: its two include directories are
  # then the ones every torch 2.x wheel has.
  set(_script [=[
import os, sys
import torch
lib = os.path.join(os.path.dirname(torch.__file__), "lib")
try:
    from torch.utils.cpp_extension import include_paths
    inc = include_paths()
except ImportError:
    root = os.path.join(os.path.dirname(torch.__file__), "include")
    inc = [root, os.path.join(root, "torch", "csrc", "api", "include")]
print("version=" + torch.__version__)
print("include=" + ";".join(inc))
print("lib=" + lib)
print("abi=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI))
]=])
  execute_process(COMMAND "${python}" -c "${_script}" OUTPUT_VARIABLE _out ERROR_VARIABLE _err
                  RESULT_VARIABLE _rc TIMEOUT 120)
  if(NOT _rc EQUAL 0)
    string(REGEX MATCH "[^\n]+\n?$" _last "${_err}")
    string(STRIP "${_last}" _last)
    set(TORCH_EXT_ERROR "${python} cannot tell its torch (${_last})" PARENT_SCOPE)
    return()
  endif()
  foreach(_key version include lib abi)
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
  # libtorch holds no symbol the worker calls; a CUDA or ROCm torch loads its GPU operators from
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
endfunction()
