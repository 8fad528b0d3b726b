"""The doctor's pre-flight (run/setup.cpp reads it): whether this interpreter imports torch, which
version, the GPUs that torch lists and the HIP runtimes its process loaded, one marked line each
on stdout. Asked before any worker runs; a line that never comes names the step that hung."""

import json
import os
import sys
import warnings

MARK = "sdpa-doctor-preflight"


def say(*words):
    print(MARK, *words, flush=True)


def report():
    """Always 0: what went wrong is in the lines."""
    warnings.simplefilter("ignore")  # a warning at import is not the pre-flight's answer
    try:
        import torch
    except BaseException as e:  # a broken install can raise anything, SystemExit included
        say("error", str(e) or type(e).__name__)
        return 0
    say("torch", torch.__version__)
    gpus = []
    try:
        for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
            p = torch.cuda.get_device_properties(i)
            arch = str(getattr(p, "gcnArchName", "") or "")
            gpu = {"index": i, "name": p.name, "memory": int(p.total_memory),
                   "arch": arch if arch.startswith("gfx") else ""}
            if hasattr(p, "pci_bus_id"):
                gpu["pci"] = "%04x:%02x:%02x.0" % (getattr(p, "pci_domain_id", 0), p.pci_bus_id,
                                                   p.pci_device_id)
            gpus.append(gpu)
    except BaseException as e:
        say("gpus-error", str(e).splitlines()[0] if str(e) else type(e).__name__)
    say("gpus", json.dumps(gpus))
    say("hip-runtimes", json.dumps(sorted(hip_runtimes())))
    return 0


def hip_runtimes():
    """The libamdhip64 files this process has mapped."""
    found = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.rstrip("\n").split(None, 5)
                if len(fields) == 6 and os.path.basename(fields[5]).startswith("libamdhip64"):
                    found.add(fields[5].replace(" (deleted)", ""))
    except OSError:
        pass
    return found


if __name__ == "__main__":
    sys.exit(report())
