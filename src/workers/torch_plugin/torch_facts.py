# What building the LibTorch plugin against the torch this interpreter imports needs, one
# "key=value" line each: its version, the build it is (git_version), its include directories
# (torch.utils.cpp_extension.include_paths(), as PyTorch's own C++ extensions use), its torch/lib
# and its C++ ABI. Asked by CMake at configure time and by sdpa-doctor before a first-use build.
import os
import torch

lib = os.path.join(os.path.dirname(torch.__file__), "lib")
try:
    from torch.utils.cpp_extension import include_paths
    inc = include_paths()
except ImportError:
    # cpp_extension imports setuptools, which a fresh venv may lack: these two are the include
    # directories every torch 2.x wheel has.
    root = os.path.join(os.path.dirname(torch.__file__), "include")
    inc = [root, os.path.join(root, "torch", "csrc", "api", "include")]
print("version=" + torch.__version__)
print("git_version=" + str(getattr(torch.version, "git_version", "") or ""))
print("include=" + ";".join(inc))
print("lib=" + lib)
print("abi=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI))
