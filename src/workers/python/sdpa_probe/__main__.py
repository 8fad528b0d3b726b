"""`python sdpa_probe ARGS...`: the folder runs as a script (sys.path[0] is the folder itself), so
its parent takes that place and the modules import as the package they are, never as top-level
`protocol` or `inputs` that could shadow the user's."""

import os
import sys

# Nothing is written beside an installed worker: no __pycache__ in the doctor's data directory.
sys.dont_write_bytecode = True
if __package__ in (None, ""):
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from sdpa_probe.main import main  # noqa: E402 (after the path above)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
