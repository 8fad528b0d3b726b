// An interpreter for `check --python` whose torch SDPA is wrapped so that it breaks in one way
// only: the test's Python function `broken(torch, q, k, v, kwargs, out)` sees every call made
// with the flash backend alone enabled and returns the output the caller gets. Every other call is torch's own. The wrapper is a sitecustomize.py on
// PYTHONPATH, which the doctor hands its Python workers as it is.
#pragma once

#include "support/run_binary.hpp"
#include "support/torch_probes.hpp"

#include <sys/stat.h>

#include <string>

namespace sdpa_test {

inline std::string python_with_broken_flash(const TempDir& dir, const std::string& broken) {
  const std::string patch = dir.file("patch");
  ::mkdir(patch.c_str(), 0755);
  // The wrapper goes on as torch.nn.functional is first imported, not at every start of the
  // interpreter: the doctor starts it for facts and probes too, and `import torch` in each made
  // a check half again as long.
  write_file(patch + "/sitecustomize.py", broken + R"(

import importlib.abc
import importlib.util
import sys


def _wrap_sdpa(F):
    import torch
    real = F.scaled_dot_product_attention

    def sdpa(q, k, v, *args, **kwargs):
        out = real(q, k, v, *args, **kwargs)
        b = torch.backends.cuda
        if not b.flash_sdp_enabled() or b.math_sdp_enabled() or b.mem_efficient_sdp_enabled():
            return out
        return broken(torch, q, k, v, kwargs, out)

    F.scaled_dot_product_attention = sdpa


class _WrapWhenImported(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch.nn.functional":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _wrap_sdpa(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _WrapWhenImported())
)");
  const std::string python = dir.file("python");
  write_file(python, "#!/bin/sh\nPYTHONPATH='" + patch + "'${PYTHONPATH:+:$PYTHONPATH} exec '" +
                         k_test_python + "' \"$@\"\n");
  ::chmod(python.c_str(), 0755);
  return python;
}

} // namespace sdpa_test
