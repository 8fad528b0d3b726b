"""Worker protocol v1, the Python worker's side: its event writer and its case-line reader.
The doctor's side is src/protocol/; tests/protocol/golden holds lines that this Writer and
parse_case_line must write and read as it does (tests/protocol/protocol_golden_test.py)."""

import json
import math
import os
import re

PROTOCOL_VERSION = 1
# Exit code after a result whose canary failed: the runner goes on in a fresh worker.
CANARY_FAILED_EXIT = 5
VARIANT_FLAGS = ("ck", "aotriton", "experimental")


class Writer(object):
    """Writes whole lines with os.write loops: nothing is buffered when the worker dies."""

    def __init__(self, fd):
        self.fd = fd
        self.ok = True

    def _line(self, obj):
        if not self.ok:
            return False
        data = (json.dumps(obj, allow_nan=False) + "\n").encode("utf-8", "replace")
        try:
            while data:
                n = os.write(self.fd, data)
                data = data[n:]
        except OSError:
            self.ok = False
        return self.ok

    def event(self, name, **fields):
        obj = {"v": PROTOCOL_VERSION, "event": name}
        obj.update(fields)
        return self._line(obj)


def finite_or_none(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def one_line(text, limit=2000):
    text = " ".join(str(text).splitlines())
    return text if len(text) <= limit else text[:limit] + "..."


# --- variants and cases ------------------------------------------------------------------------

MODES = ("eager", "compiled")
# torch.compile's backends a compiled cell may run under: Dynamo with AOTAutograd's fake tensors
# and eager kernels, or Inductor's generated code.
COMPILE_BACKENDS = ("aot_eager", "inductor")


def parse_variant(text):
    m = re.match(r"^([A-Za-z_\-]+)(?:\[([a-z,]+)\])?$", text)
    if not m:
        raise ValueError("invalid variant '%s'" % text)
    flags = m.group(2).split(",") if m.group(2) else []
    for f in flags:
        if f not in VARIANT_FLAGS:
            raise ValueError("invalid variant '%s': unknown flag '%s'" % (text, f))
    return m.group(1), flags


def variant_environment(flags):
    env = {}
    if "experimental" in flags:
        env["TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"] = "1"
    if "ck" in flags:
        env["TORCH_ROCM_FA_PREFER_CK"] = "1"
    if "aotriton" in flags:
        env["TORCH_ROCM_FA_PREFER_CK"] = "0"
    return env


DTYPE_NAMES = {"fp16": "fp16", "float16": "fp16", "half": "fp16", "f16": "fp16",
               "bf16": "bf16", "bfloat16": "bf16",
               "fp32": "fp32", "float32": "fp32", "float": "fp32", "f32": "fp32"}
MASK_NAMES = {"none": "none", "bool": "bool", "boolean": "bool",
              "additive": "additive", "add": "additive", "float": "additive"}


LAYOUT_NAMES = {"contiguous": "contiguous", "bhld": "contiguous", "transposed": "transposed",
                "blhd": "transposed", "strided": "strided", "offset": "offset"}
MASK_SHAPES = ("b1qk", "bhqk", "11qk", "qk")


def normalise_case(c):
    """The case with every key, each tensor's layout resolved (`layout` unless its own says
    otherwise) and the mask's dtype named (the case dtype unless its own)."""
    out = {"dtype": "fp16", "b": 1, "hq": 8, "hkv": 8, "lq": 128, "lkv": 128, "d": 64,
           "causal": False, "causal_bottom_right": False, "mask": "none", "layout": "contiguous", "seed": 0,
           "mask_dtype": None, "mask_shape": "b1qk", "mask_layout": "contiguous", "window": 0,
           "large": False, "dropout": 0.0}
    own = {}
    for key, value in c.items():
        if key in ("dtype", "mask_dtype"):
            out[key] = DTYPE_NAMES[value]
        elif key == "mask":
            out["mask"] = MASK_NAMES[value]
        elif key in ("layout", "mask_layout"):
            out[key] = LAYOUT_NAMES[value]
        elif key in ("q_layout", "k_layout", "v_layout"):
            own[key] = LAYOUT_NAMES[value]
        elif key == "mask_shape":
            if value not in MASK_SHAPES:
                raise ValueError("unknown mask_shape '%s'" % value)
            out[key] = value
        # "causal": true/false, or the alignment: "top_left" (is_causal) or "bottom_right"
        # (causal_lower_right)
        elif key == "causal" and value in ("top_left", "bottom_right"):
            out["causal"] = True
            out["causal_bottom_right"] = value == "bottom_right"
        # backward and masked_rows: only where the doctor wrote them
        elif key in ("causal", "large", "backward", "masked_rows"):
            out[key] = bool(value) if not isinstance(value, str) else value in ("1", "true")
        elif key == "h":
            out["hq"] = out["hkv"] = int(value)
        elif key == "l":
            out["lq"] = out["lkv"] = int(value)
        elif key in ("b", "hq", "hkv", "lq", "lkv", "d", "seed", "window"):
            out[key] = int(value)
        elif key == "dropout":  # dropout_p, in steps of 0.01
            out[key] = round(float(value) * 100) / 100
        else:
            raise ValueError("unknown case key '%s'" % key)
    for name in ("q_layout", "k_layout", "v_layout"):
        out[name] = own.get(name, out["layout"])
    out["mask_dtype"] = out["mask_dtype"] or out["dtype"]
    if out["window"] > 0:
        out["mask"] = "bool"
    # At lq == lkv bottom-right is top-left exactly (as parse_case_spec normalises it); past it
    # torch leaves the first query rows undefined.
    if out["causal_bottom_right"] and out["lq"] > out["lkv"]:
        raise ValueError("causal=bottom_right needs lq <= lkv, got lq=%d lkv=%d"
                         % (out["lq"], out["lkv"]))
    out["causal_bottom_right"] = (out["causal"] and out["causal_bottom_right"]
                                  and out["lq"] != out["lkv"])
    return out


def causal_offset(c):
    """Query i sees key j when j <= i + causal_offset(c) (under causal): 0 top-left (is_causal),
    lkv - lq bottom-right (Case::causal_offset)."""
    return c["lkv"] - c["lq"] if c["causal"] and c.get("causal_bottom_right") else 0


def parse_case_line(text):
    j = json.loads(text)
    if not isinstance(j, dict) or j.get("v") != 1:
        raise ValueError('a case line must be an object with "v":1')
    case = normalise_case(j["case"])
    tol, grad_tol = j["tolerance"], j["gradient_tolerance"]
    line = {
        "id": j.get("id") or "",
        "case": case,
        "atol": float(tol["atol"]),
        "rtol": float(tol["rtol"]),
        "gradient_tolerance": (float(grad_tol["atol"]), float(grad_tol["rtol"])),
        "oracle": j.get("oracle") or "",
        "warmup": int(j.get("warmup", 1) if j.get("warmup") is not None else 1),
        "repeat": int(j.get("repeat", 3) if j.get("repeat") is not None else 3),
        "budget_ms": int(j.get("budget_ms") or 0),
    }
    if not line["id"]:
        raise ValueError("a case line needs an id")
    if line["budget_ms"] < 0:
        raise ValueError("'budget_ms' must not be negative")
    return line
