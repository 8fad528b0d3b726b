// An interpreter for `check --python` whose torch SDPA is wrapped so that it breaks in one way
// only: the test's Python function `broken(torch, q, k, v, kwargs, out)` sees every call made
// with the flash backend alone enabled (a causal_lower_right bias's call, and before it the call
// that bias makes with the bool mask it stands for) and returns the output the caller gets. Every
// other call is torch's own. The wrapper is a sitecustomize.py on
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
  write_file(patch + "/sitecustomize.py", broken + R"(

def _wrap_sdpa():
    try:
        import torch
        import torch.nn.functional as F
    except Exception:
        return
    real = F.scaled_dot_product_attention
    try:  # torch >= 2.3
        from torch.nn.attention.bias import CausalBias
    except ImportError:
        CausalBias = ()

    def sdpa(q, k, v, *args, **kwargs):
        mask = kwargs.get("attn_mask")
        if isinstance(mask, CausalBias):
            # A causal_lower_right bias dispatches itself only when called through
            # F.scaled_dot_product_attention, which is this wrapper now: dispatch it as torch does
            # (its own SDPA calls come back here with the bool mask it stands for).
            out = type(mask)._dispatch(q, k, v, *args, **kwargs)
        else:
            out = real(q, k, v, *args, **kwargs)
        b = torch.backends.cuda
        if not b.flash_sdp_enabled() or b.math_sdp_enabled() or b.mem_efficient_sdp_enabled():
            return out
        return broken(torch, q, k, v, kwargs, out)

    F.scaled_dot_product_attention = sdpa


_wrap_sdpa()
)");
  const std::string python = dir.file("python");
  write_file(python, "#!/bin/sh\nPYTHONPATH='" + patch + "'${PYTHONPATH:+:$PYTHONPATH} exec '" +
                         k_test_python + "' \"$@\"\n");
  ::chmod(python.c_str(), 0755);
  return python;
}

} // namespace sdpa_test
