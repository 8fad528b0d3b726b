"""sdpa-doctor's Python probe worker: runs SDPA cases with the interpreter's own torch.

Run by the doctor as
    python sdpa_probe/__main__.py --device cpu|cuda:N --variant NAME --results-fd N --cases FILE
(or as its start-up server, `python sdpa_probe/__main__.py --serve SOCKET`: see server.py), where
sdpa_probe is this folder in the doctor's data directory, and speaks worker protocol v1
(src/protocol/protocol.hpp): one JSON object per line on the results fd, never on stdout/stderr.
Standard library and torch only; Python >= 3.8. Without torch every case is `unsupported` with the
import error, so the doctor reports a missing torch instead of a crash.

protocol.py: the events written and the case lines read; inputs.py: the inputs, bit for bit those
of src/core/inputs.hpp; oracle.py: the float64 oracle and the comparison; faults.py: the faults a
test plants; facts.py: what this torch can run; backends.py: torch and one forced SDPA backend;
worker.py: one worker run; server.py: the start-up server; main.py: the command line.
"""
