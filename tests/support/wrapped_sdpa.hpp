// An interpreter for `check --python` whose torch SDPA is wrapped so that it breaks in one way
// only: the test's Python function `broken(torch, q, k, v, kwargs, out)` sees every call made
// with the flash backend alone enabled (a causal_lower_right bias's call, and before it the call
// that bias makes with the bool mask it stands for) and returns the output the caller gets. Every
// other call is torch's own. The wrapper is a sitecustomize.py on
// PYTHONPATH, which the doctor hands its Python workers as it is.
// Calls traced by torch.compile (torch.compiler.is_compiling()) are torch's own too, unless the
// test's code sets BREAK_COMPILED = True: then `broken` sees only those (it runs while Dynamo
// traces, so what it returns is part of the compiled graph) and every eager call is torch's own.
#pragma once

#include "support/run_binary.hpp"
#include "support/torch_probes.hpp"

#include <sys/stat.h>

#include <string>

namespace sdpa_test {

inline std::string python_with_broken_flash(const TempDir& dir, const std::string& broken) {
  const std::string patch = dir.file("patch");
  ::mkdir(patch.c_str(), 0755);
  // The wrapper goes on once `import torch` has finished, not at every start of the interpreter:
  // the doctor starts it for facts and probes too, and `import torch` in each made a check half
  // again as long.
  write_file(patch + "/sitecustomize.py", "BREAK_COMPILED = False\n" + broken + R"(

import importlib.abc
import importlib.util
import sys


def _wrap_sdpa(torch):
    F = torch.nn.functional
    real = F.scaled_dot_product_attention
    try:  # torch >= 2.3
        from torch.nn.attention.bias import CausalBias
    except ImportError:
        CausalBias = ()

    compiler = getattr(torch, "compiler", None)
    is_compiling = getattr(compiler, "is_compiling", None) or (lambda: False)

    def flash_alone():
        b = torch.backends.cuda
        return b.flash_sdp_enabled() and not b.math_sdp_enabled() and not b.mem_efficient_sdp_enabled()

    # Dynamo cannot trace the flag queries: it calls them while it traces and keeps the answer.
    flash_alone_traced = compiler.assume_constant_result(flash_alone) if BREAK_COMPILED else None

    def sdpa(q, k, v, *args, **kwargs):
        mask = kwargs.get("attn_mask")
        if isinstance(mask, CausalBias):
            # A causal_lower_right bias dispatches itself only when called through
            # F.scaled_dot_product_attention, which is this wrapper now: dispatch it as torch does
            # (its own SDPA calls come back here with the bool mask it stands for).
            out = type(mask)._dispatch(q, k, v, *args, **kwargs)
        else:
            out = real(q, k, v, *args, **kwargs)
        if is_compiling() != BREAK_COMPILED:
            return out
        if not (flash_alone_traced() if BREAK_COMPILED else flash_alone()):
            return out
        return broken(torch, q, k, v, kwargs, out)

    F.scaled_dot_product_attention = sdpa


class _WrapWhenImported(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch":
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
