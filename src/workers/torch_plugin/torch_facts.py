# What building the LibTorch plugin against the torch this interpreter imports needs, one
# "key=value" line each: its version, the build it is (git_version), its include directories
# (torch.utils.cpp_extension.include_paths(), as PyTorch's own C++ extensions use), its torch/lib
# and its C++ ABI. Asked by CMake at configure time and by sdpa-doctor before a first-use build.
# Facts that would not make one line each, or an ABI that is neither 0 nor 1, are refused: exit 1
# with the reason as the last line on stderr, which is what the doctor quotes.
import os
import sys
import warnings

MAX_TEXT = 4096  # bytes of one value: a path or a version, not a dump
MAX_INCLUDE = 65536  # bytes of the include line


def fail(why):
    sys.stderr.write("torch_facts.py: %s\n" % why)
    sys.exit(1)


def one_line(key, value):
    """`value` as text that fits on its key=value line, else the reason it does not."""
    value = str(value)
    if len(value) > MAX_TEXT:
        fail("%s is %d characters long (at most %d)" % (key, len(value), MAX_TEXT))
    for char, name in (("\0", "a NUL byte"), ("\r", "a carriage return"), ("\n", "a newline")):
        if char in value:
            fail("%s holds %s: %r" % (key, name, value[:80]))
    return value


def include_line(dirs):
    """The include directories as one ';'-separated value."""
    if not dirs:
        fail("include is empty: this torch names no include directory")
    for d in dirs:
        if not str(d):
            fail("include names an empty directory")
        if ";" in one_line("include", d):
            fail("include directory %r holds ';', the separator of the include line" % str(d)[:80])
    line = ";".join(str(d) for d in dirs)
    if len(line) > MAX_INCLUDE:
        fail("include is %d characters long (at most %d)" % (len(line), MAX_INCLUDE))
    return line


def abi_of(torch):
    value = getattr(getattr(torch, "_C", None), "_GLIBCXX_USE_CXX11_ABI", None)
    try:
        abi = int(value)
    except (TypeError, ValueError):
        fail("abi=%s is not a number (torch._C._GLIBCXX_USE_CXX11_ABI)" % one_line("abi", value)[:80])
    if abi not in (0, 1):
        fail("abi=%d is neither 0 nor 1 (torch._C._GLIBCXX_USE_CXX11_ABI)" % abi)
    return abi


# What importing torch warns about (an uninitialised NumPy) is not an answer: the last line on
# stderr stays this script's own.
warnings.filterwarnings("ignore")
import torch  # noqa: E402

lib = os.path.join(os.path.dirname(torch.__file__), "lib")
try:
    from torch.utils.cpp_extension import include_paths
    inc = include_paths()
except ImportError:
    # cpp_extension imports setuptools, which a fresh venv may lack: these two are the include
    # directories every torch 2.x wheel has.
    root = os.path.join(os.path.dirname(torch.__file__), "include")
    inc = [root, os.path.join(root, "torch", "csrc", "api", "include")]
facts = [
    "version=" + one_line("version", torch.__version__),
    "git_version=" + one_line("git_version", getattr(torch.version, "git_version", "") or ""),
    "include=" + include_line(list(inc)),
    "lib=" + one_line("lib", lib),
    "abi=%d" % abi_of(torch),
]
print("\n".join(facts))
