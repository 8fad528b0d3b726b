"""The Python probe's own logic, tested in the interpreter that runs it: the package is imported
from the source tree (src/workers/python), or from SDPA_PROBE_PATH (the folder holding
sdpa_probe) where it is set. Tests that need torch skip without it."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.environ.get("SDPA_PROBE_PATH") or os.path.join(SOURCE_DIR, "src", "workers",
                                                                       "python"))


@pytest.fixture(scope="session")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture
def case():
    """A whole case from a few keys, as the probe normalises a case line's."""
    from sdpa_probe.protocol import normalise_case

    def make(**keys):
        c = {"dtype": "fp32", "h": 2, "l": 16, "d": 16}
        c.update(keys)
        return normalise_case(c)

    return make
