"""Faults a test plants through SDPA_DOCTOR_TEST_FAULT (test only), in the syntax the C++ workers
read (src/workers/planted_fault.cpp)."""

import os
import re
import signal
import time

from .protocol import DTYPE_NAMES


FAULT_ACTIONS = ("abort", "segv", "hang", "nan", "perturb", "exit3", "poison", "zeros")
FAULT_NAMES = ("b", "hq", "hkv", "lq", "lkv", "d", "causal", "gqa", "mask", "transposed",
               "q_layout", "k_layout", "v_layout", "mask_dtype", "mask_shape", "mask_layout",
               "window", "large", "bwd", "dropout", "mrows", "bottom_right")
LAYOUT_VALUES = {"contiguous": 0, "transposed": 1, "strided": 2, "offset": 3}
MASK_SHAPE_VALUES = {"b1qk": 0, "bhqk": 1, "11qk": 2, "qk": 3}


def fault_value(name, c):
    """A case's value for a fault condition, as workers::FaultCondition reads it."""
    if name == "causal":
        return 1 if c["causal"] else 0
    if name == "bottom_right":
        return 1 if c["causal"] and c.get("causal_bottom_right") else 0
    if name == "gqa":
        return 1 if c["hq"] != c["hkv"] else 0
    if name == "mask":
        return {"none": 0, "bool": 1, "additive": 2}[c["mask"]]
    if name == "transposed":
        return 1 if all(c[t + "_layout"] == "transposed" for t in "qkv") else 0
    if name in ("q_layout", "k_layout", "v_layout", "mask_layout"):
        return LAYOUT_VALUES[c[name]]
    if name == "mask_dtype":
        return 1 if c["mask"] != "none" and c["mask_dtype"] != c["dtype"] else 0
    if name == "mask_shape":
        return MASK_SHAPE_VALUES[c["mask_shape"]]
    if name == "large":
        return 1 if c["large"] else 0
    if name == "bwd":
        return 1 if c.get("backward") else 0
    if name == "dropout":
        return int(round(c["dropout"] * 100))
    if name == "mrows":
        return 1 if c.get("masked_rows") else 0
    return c[name]


def parse_condition(text):
    """`when=NAME`, NAME>N, NAME<N, NAME>=N, NAME<=N, NAME=N: (name, op, value); as
    planted_fault.cpp reads it."""
    m = re.match(r"^([a-z_]+)(?:([<>]=?|=)(.*))?$", text)
    bad = ValueError("SDPA_DOCTOR_TEST_FAULT: bad condition '%s'" % text)
    if not m:
        raise bad
    name, op, value = m.group(1), m.group(2) or "", m.group(3)
    if name == "dtype":
        if op != "=" or value not in DTYPE_NAMES:
            raise bad
        return (name, op, DTYPE_NAMES[value])
    if name not in FAULT_NAMES or (op and not re.match(r"^[+-]?[0-9]+$", value or "")):
        raise bad
    return (name, op, int(value) if op else 0)


def condition_holds(cond, c):
    name, op, value = cond
    if name == "dtype":
        return c["dtype"] == value
    v = fault_value(name, c)
    return {">": v > value, "<": v < value, ">=": v >= value, "<=": v <= value, "=": v == value,
            "": v != 0}[op]


def parse_fault(text):
    """SDPA_DOCTOR_TEST_FAULT: specs separated by ';', each as parse_planted_fault reads it."""
    specs = []
    for one in (text or "").split(";"):
        if not one:
            continue
        spec = {"variant": "*", "case": "*", "action": None, "when": [], "once": None,
                "stage": "forward"}
        for item in one.split(","):
            if not item:
                continue
            key, sep, value = item.partition("=")
            if not sep or key not in spec:
                raise ValueError("SDPA_DOCTOR_TEST_FAULT: bad item '%s'" % item)
            if key == "when":
                spec["when"].append(parse_condition(value))
            else:
                spec[key] = value
        if spec["action"] not in FAULT_ACTIONS:
            raise ValueError("SDPA_DOCTOR_TEST_FAULT: unknown action '%s'" % spec["action"])
        if spec["stage"] not in ("forward", "backward"):
            raise ValueError("SDPA_DOCTOR_TEST_FAULT: unknown stage '%s'" % spec["stage"])
        if spec["once"] is not None and not spec["once"].startswith("/"):
            raise ValueError("SDPA_DOCTOR_TEST_FAULT: once= takes an absolute path")
        specs.append(spec)
    return specs or None


def fault_fires(spec):
    """True unless once=PATH is set and PATH exists already (then this call makes it)."""
    if not spec["once"]:
        return True
    try:
        os.close(os.open(spec["once"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        return True
    except OSError:
        return False


def matching_fault(faults, variant_name, cid, c):
    """The first spec that matches this case (None also when it does not fire: once=)."""
    for f in faults or ():
        if f["stage"] == "backward" and not c.get("backward"):
            continue
        if f["variant"] in ("*", variant_name) and f["case"] in ("*", cid) and \
                all(condition_holds(w, c) for w in f["when"]):
            return f if fault_fires(f) else None
    return None


def process_fault(action):
    if action == "abort":
        os.abort()
    if action == "segv":
        import ctypes
        ctypes.string_at(0)  # a real invalid read
        os.kill(os.getpid(), signal.SIGSEGV)
    if action == "hang":
        while True:
            time.sleep(3600)
    if action == "exit3":
        os._exit(3)


def corrupt_output(action, host, c):
    """nan, perturb and zeros corrupt the flat output before it is compared, as
    workers::corrupt_output does (element n/2, or for a masked_rows case the first of query row 3,
    fully masked: NaN, resp. +0.5; every element 0)."""
    at = 3 * c["d"] if c.get("masked_rows") and c["lq"] > 3 else host.numel() // 2
    if action == "nan":
        host[at] = float("nan")
    if action == "perturb":
        host[at] += 0.5
    if action == "zeros":
        host.zero_()


def planted_canary(action):
    """The canary a fault plants after its case (workers::planted_canary), or None."""
    if action == "poison":
        return "failed: injected deferred device error (SDPA_DOCTOR_TEST_FAULT action=poison)"
    if action == "zeros":
        # The words torch prints for the deferred launch error, so known issues see what they would.
        return ("failed: AcceleratorError: HIP error: invalid argument (hipErrorInvalidValue, "
                "injected by SDPA_DOCTOR_TEST_FAULT action=zeros)")
    return None
