"""`python .../sdpa_probe/__main__.py ARGS...` (the doctor's way: a script gets no bytecode cache)
or `python .../sdpa_probe ARGS...`. Either way sys.path[0] is this folder (unless -I): its parent
takes that place, so the modules import as the package they are, never as a top-level `protocol`
or `inputs` that could shadow the user's."""

import os
import sys

# Nothing is written beside an installed worker: no __pycache__ in the doctor's data directory.
sys.dont_write_bytecode = True
if __package__ in (None, ""):
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
        sys.path[0] = os.path.dirname(here)
    else:  # python -I (or -P) puts no script folder first
        sys.path.insert(0, os.path.dirname(here))

if __name__ == "__main__":
    # Handed to the start-up server before the rest of the probe is imported (tens of ms a
    # worker); where no server takes it, it runs here.
    from sdpa_probe.client import handed_over  # noqa: E402 (after the path above)

    code = handed_over(sys.argv[1:])
    if code is not None:
        os._exit(code)
    from sdpa_probe.main import main  # noqa: E402

    sys.exit(main(sys.argv[1:]))
