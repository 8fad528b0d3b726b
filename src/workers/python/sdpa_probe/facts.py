"""What this torch can run, asked without running an SDPA call: for the doctor's gfx verdict."""

import os
import re
import warnings

from .protocol import one_line


def gpu_truth_facts(torch):
    """What this torch can run, for the doctor's gfx verdict: lists as comma-separated strings."""
    hip = getattr(torch.version, "hip", None)
    facts = {}
    try:
        arch = list(torch.cuda.get_arch_list())
        flags = getattr(torch._C, "_cuda_getArchFlags", None)
        if not arch and flags is not None:  # no GPU visible: the compile-time list still answers
            arch = [a for a in re.split(r"[\s;,]+", str(flags() or "")) if a]
        gpu_build = bool(hip or getattr(torch.version, "cuda", None))
        facts["arch_list"] = ",".join(arch) if arch else ("" if gpu_build else "n/a")
    except Exception as e:
        facts["arch_list_error"] = one_line(e, 300)
    images = os.path.join(os.path.dirname(torch.__file__), "lib", "aotriton.images")
    try:
        names = sorted(n[4:] for n in os.listdir(images) if n.startswith("amd-gfx"))
    except OSError:
        names = []
    facts["aotriton_images"] = ",".join(names) if names else ("none" if hip else "n/a")
    facts["ck_sdpa"] = ck_sdpa_built(torch) if hip else "n/a"
    return facts


def ck_sdpa_built(torch):
    """yes / no / unknown: whether CK SDPA was compiled in, asked without changing the choice."""
    cuda = torch.backends.cuda
    available = getattr(cuda, "is_ck_sdpa_available", None)
    if available is not None:
        try:
            return "yes" if available() else "no"
        except Exception:
            return "unknown"
    pref = getattr(cuda, "preferred_rocm_fa_library", None)
    if pref is None:
        return "unknown"
    try:
        before = pref()
    except Exception:
        return "unknown"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return "yes" if "ck" in str(pref("ck")).lower() else "no"
    except Exception:
        return "no"
    finally:
        try:
            pref(before)
        except Exception:
            pass
