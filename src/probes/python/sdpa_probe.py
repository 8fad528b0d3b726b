#!/usr/bin/env python3
"""sdpa-doctor's Python probe worker: runs SDPA cases with the interpreter's own torch.

Run by the doctor as
    python sdpa_probe.py --device cpu|cuda:N --variant NAME --results-fd N --cases FILE
(or as its start-up server, `python sdpa_probe.py --serve SOCKET`: see "the start-up server")
and speaks worker protocol v1 (ARCHITECTURE.md): one JSON object per line on the results fd,
never on stdout/stderr. Standard library and torch only; Python >= 3.8. Without torch every case
is `unsupported` with the import error, so the doctor reports a missing torch instead of a crash.

The inputs mirror src/core/inputs.hpp bit for bit; keep the two in step.
"""

import json
import math
import os
import re
import selectors
import signal
import socket
import statistics
import sys
import time
import warnings

PROTOCOL_VERSION = 1
# Exit code after a result whose canary failed: the runner goes on in a fresh worker.
CANARY_FAILED_EXIT = 5

TORCH_BACKENDS = ("math", "flash", "mem_efficient", "cudnn", "default")
VARIANT_FLAGS = ("ck", "aotriton", "experimental")


def load_refusals():
    """The texts with which torch declines a problem cleanly, from backend_refusals.json beside
    this file: the one list the LibTorch worker is built from too."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "backend_refusals.json")
    try:
        with open(path, encoding="utf-8") as f:
            return tuple(json.load(f)["refusals"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        # Without the list every refusal reads as an error: loud, never a silent pass.
        sys.stderr.write("sdpa_probe: cannot read %s: %s\n" % (path, e))
        return ()


REFUSALS = load_refusals()

MASK32 = 0xFFFFFFFF


# --- protocol ----------------------------------------------------------------------------------
# The doctor's side is src/protocol/; tests/protocol/golden holds lines that this Writer and
# parse_case_line must write and read as it does (tests/protocol/protocol_golden_test.py).

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


def normalise_case(c):
    out = {"dtype": "fp16", "b": 1, "hq": 8, "hkv": 8, "lq": 128, "lkv": 128, "d": 64,
           "causal": False, "mask": "none", "layout": "contiguous", "seed": 0}
    for key, value in c.items():
        if key == "dtype":
            out["dtype"] = DTYPE_NAMES[value]
        elif key == "mask":
            out["mask"] = MASK_NAMES[value]
        elif key == "layout":
            out["layout"] = {"contiguous": "contiguous", "bhld": "contiguous",
                             "transposed": "transposed", "blhd": "transposed"}[value]
        elif key == "causal":
            out["causal"] = bool(value) if not isinstance(value, str) else value in ("1", "true")
        elif key == "h":
            out["hq"] = out["hkv"] = int(value)
        elif key == "l":
            out["lq"] = out["lkv"] = int(value)
        elif key in ("b", "hq", "hkv", "lq", "lkv", "d", "seed"):
            out[key] = int(value)
        else:
            raise ValueError("unknown case key '%s'" % key)
    return out


def parse_case_line(text):
    j = json.loads(text)
    if not isinstance(j, dict) or j.get("v") != 1:
        raise ValueError('a case line must be an object with "v":1')
    case = normalise_case(j["case"])
    tol = j["tolerance"]
    line = {
        "id": j.get("id") or "",
        "case": case,
        "atol": float(tol["atol"]),
        "rtol": float(tol["rtol"]),
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


INPUT_CHUNK = 1 << 18  # elements per step of the input generator: 2 MiB of int64


def kv_elements(c):
    return c["b"] * c["hkv"] * c["lkv"] * c["d"]


def q_elements(c):
    return c["b"] * c["hq"] * c["lq"] * c["d"]


# --- deterministic inputs (mirror of src/core/inputs.hpp) -----------------------------------

def hash32_int(x):
    x &= MASK32
    x ^= x >> 16
    x = (x * 0x45D9F3B) & MASK32
    x ^= x >> 16
    x = (x * 0x45D9F3B) & MASK32
    x ^= x >> 16
    return x


def input_key(seed, tensor_index):
    return hash32_int(hash32_int(seed & MASK32) ^ ((tensor_index * 0x9E3779B9) & MASK32))


def hash32_tensor(torch, x):
    # int64 holds every intermediate: x < 2^32 and the multiplier < 2^27. In place: one
    # temporary at a time, not six (an int64 copy of a decode case's K is a gigabyte).
    x.bitwise_xor_(x >> 16)
    x.mul_(0x45D9F3B).bitwise_and_(MASK32)
    x.bitwise_xor_(x >> 16)
    x.mul_(0x45D9F3B).bitwise_and_(MASK32)
    x.bitwise_xor_(x >> 16)
    return x


def bits(torch, key, count):
    idx = torch.arange(count, dtype=torch.int64)
    return hash32_tensor(torch, idx.add_(key).bitwise_and_(MASK32))


def unit_from_bits(torch, u):
    # (u >> 8) < 2^24 and the scale is a power of two: exact in float32, as in C++.
    return (u >> 8).to(torch.float32) * (2.0 ** -23) - 1.0


def torch_dtype(torch, name):
    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[name]


def make_inputs(torch, c):
    """q, k, v (logical B,H,L,D) in the case dtype and the mask (B,1,Lq,Lkv) or None, on CPU."""
    dt = torch_dtype(torch, c["dtype"])
    seed = c["seed"]

    def fill(index, count, scale, shape):
        # In chunks that stay in cache: a decode case's K is 10^8 elements, and each whole-tensor
        # int64 pass would stream gigabytes through memory.
        key = input_key(seed, index)
        out = torch.empty(count, dtype=dt)
        for start in range(0, count, INPUT_CHUNK):
            n = min(INPUT_CHUNK, count - start)
            idx = torch.arange(start, start + n, dtype=torch.int64)
            u = hash32_tensor(torch, idx.add_(key).bitwise_and_(MASK32))
            out[start:start + n] = unit_from_bits(torch, u) * scale  # rounded as .to(dt) does
        return out.reshape(shape)

    q = fill(0, q_elements(c), 4.0, (c["b"], c["hq"], c["lq"], c["d"]))
    kv = kv_elements(c)
    k = fill(1, kv, 1.0, (c["b"], c["hkv"], c["lkv"], c["d"]))
    v = fill(2, kv, 1.0, (c["b"], c["hkv"], c["lkv"], c["d"]))
    mask = None
    if c["mask"] != "none":
        count = c["b"] * c["lq"] * c["lkv"]
        u = bits(torch, input_key(seed, 3), count)
        shape = (c["b"], 1, c["lq"], c["lkv"])
        if c["mask"] == "bool":
            first_key = (torch.arange(count, dtype=torch.int64) % c["lkv"]) == 0
            mask = (first_key | ((u & 3) != 0)).reshape(shape)
        else:
            mask = ((unit_from_bits(torch, u) + 1.0) * -2.0).to(dt).reshape(shape)
    return q, k, v, mask


def oracle_attention(torch, c, q, k, v, mask):
    """float64 math attention with PyTorch's semantics, on the CPU."""
    q, k, v = q.double(), k.double(), v.double()
    group = c["hq"] // c["hkv"]
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(c["d"]))
    keep = torch.ones(c["lq"], c["lkv"], dtype=torch.bool)
    if c["causal"]:
        keep = torch.ones(c["lq"], c["lkv"], dtype=torch.bool).tril()
    keep = keep.expand(s.shape)
    if mask is not None:
        if mask.dtype == torch.bool:
            keep = keep & mask
        else:
            s = s + mask.double()
    s = s.masked_fill(~keep, float("-inf"))
    row_max = s.amax(dim=-1, keepdim=True)
    empty = torch.isinf(row_max) & (row_max < 0)
    p = torch.exp(s - torch.where(empty, torch.zeros_like(row_max), row_max))
    p = p / p.sum(dim=-1, keepdim=True).clamp_min(1e-300)
    p = torch.where(empty, torch.zeros_like(p), p)
    return torch.matmul(p, v)


def compare(torch, out, ref, atol, rtol):
    """Same definitions as probes::compare_to_oracle, in float64."""
    out = out.double().reshape(-1)
    ref = ref.double().reshape(-1)
    n = out.numel()
    nan = int(torch.isnan(out).sum())
    inf = int(torch.isinf(out).sum())
    fin = torch.isfinite(out) & torch.isfinite(ref)
    err = (out - ref).abs()
    err_f = torch.where(fin, err, torch.zeros_like(err))
    ref_f = torch.where(fin, ref, torch.zeros_like(ref))
    max_abs = float(err_f.max()) if n else 0.0
    err2 = float((err_f * err_f).sum())
    ref2 = float((ref_f * ref_f).sum())
    rel_l2 = math.sqrt(err2 / ref2) if ref2 > 0 else math.sqrt(err2)
    outside_mask = (~torch.isfinite(out)) | (fin & (err > atol + rtol * ref.abs()))
    outside = int(outside_mask.sum())
    metrics = {"max_abs_err": max_abs, "rel_l2_err": rel_l2,
               "frac_outside_tol": (outside / n) if n else 0.0,
               "nan_count": nan, "inf_count": inf}
    if outside:
        first = int(torch.nonzero(outside_mask)[0][0])
    if nan + inf:
        return "nonfinite", ("%d NaN and %d Inf of %d output elements (first at index %d)"
                             % (nan, inf, n, first)), metrics
    if outside:
        return "mismatch", ("%d of %d elements outside atol=%g + rtol=%g*|ref| (first at index %d: "
                            "got %.6g, expected %.6g); max abs err %.3g, rel L2 err %.3g"
                            % (outside, n, atol, rtol, first, float(out[first]), float(ref[first]),
                               max_abs, rel_l2)), metrics
    return "pass", "", metrics


# --- faults (SDPA_DOCTOR_TEST_FAULT, test only) ----------------------------------------------

FAULT_ACTIONS = ("abort", "segv", "hang", "nan", "perturb", "exit3", "poison")
FAULT_NAMES = ("b", "hq", "hkv", "lq", "lkv", "d", "causal", "gqa", "mask", "transposed")


def fault_value(name, c):
    """A case's value for a fault condition, as probes::FaultCondition reads it."""
    if name == "causal":
        return 1 if c["causal"] else 0
    if name == "gqa":
        return 1 if c["hq"] != c["hkv"] else 0
    if name == "mask":
        return {"none": 0, "bool": 1, "additive": 2}[c["mask"]]
    if name == "transposed":
        return 1 if c["layout"] == "transposed" else 0
    return c[name]


def parse_condition(text):
    """`when=NAME`, NAME>N, NAME<N, NAME=N: (name, op, value); the same grammar as fault.cpp."""
    m = re.match(r"^([a-z]+)(?:([<>=])(.*))?$", text)
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
    return {">": v > value, "<": v < value, "=": v == value, "": v != 0}[op]


def parse_fault(text):
    """SDPA_DOCTOR_TEST_FAULT: specs separated by ';', each as probes::parse_fault_spec reads it."""
    specs = []
    for one in (text or "").split(";"):
        if not one:
            continue
        spec = {"variant": "*", "case": "*", "action": None, "when": [], "once": None}
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


# --- torch side --------------------------------------------------------------------------------

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


def canary(torch, device):
    """A 16x16 matmul of ones after a case: 'ok', or 'failed: why' (the case poisoned the device)."""
    try:
        a = torch.ones(16, 16, dtype=torch.float32, device=device)
        p = torch.mm(a, a)
        if device.startswith("cuda"):
            torch.cuda.synchronize(torch.device(device))
        total = float(p.sum().item())
        if total != 4096.0:
            return "failed: a 16x16 matmul of ones summed to %r, expected 4096" % total
        return "ok"
    except Exception as e:
        return "failed: " + one_line("%s: %s" % (type(e).__name__, e), 500)


def add_canary(result, torch, device, ran, poison):
    """Puts the canary after a case into its result; True when the worker must stop."""
    if not ran:
        return False
    result["canary"] = canary(torch, device)
    if poison:
        result["canary"] = ("failed: injected deferred device error "
                            "(SDPA_DOCTOR_TEST_FAULT action=poison)")
    return result["canary"].startswith("failed")

BACKEND_ENUM = {"math": "MATH", "flash": "FLASH_ATTENTION", "mem_efficient": "EFFICIENT_ATTENTION",
                "cudnn": "CUDNN_ATTENTION"}
CHOICE_NAMES = {"MATH": "math", "FLASH_ATTENTION": "flash", "EFFICIENT_ATTENTION": "mem_efficient",
                "CUDNN_ATTENTION": "cudnn", "OVERRIDEABLE": "overrideable", "ERROR": "error"}


class Threads(object):
    """Torch's intra-op pool only for the SDPA calls: every other op here (inputs, copies, the
    float64 check) is small, and on a few shared cores waking the pool costs far more than the
    op itself (443 ms instead of 2-7 ms to build one case's inputs on 2 cores). The SDPA calls,
    the checked one and the timed ones, run with the count torch chose at start-up."""

    def __init__(self, torch):
        self.torch = torch
        self.configured = torch.get_num_threads()
        # The native pool cannot be resized once used (torch warns and keeps its size): there
        # everything runs with the configured count, as before.
        try:
            info = torch.__config__.parallel_info()
        except Exception:
            info = ""
        self.check = 1 if "parallel backend: OpenMP" in info else self.configured

    def sdpa(self):
        return _ThreadCount(self.torch, self.configured)

    def serial(self):
        return _ThreadCount(self.torch, self.check)


class _ThreadCount(object):
    def __init__(self, torch, count):
        self.torch = torch
        self.count = count

    def __enter__(self):
        self.previous = self.torch.get_num_threads()
        if self.previous != self.count:
            self.torch.set_num_threads(self.count)
        return self

    def __exit__(self, *exc):
        if self.torch.get_num_threads() != self.previous:
            self.torch.set_num_threads(self.previous)
        return False


class Probe(object):
    def __init__(self, torch, device, backend, flags):
        self.torch = torch
        self.device = device
        self.backend = backend
        self.flags = flags
        self.gpu = device.startswith("cuda")
        self.threads = Threads(torch)

    def facts(self):
        torch = self.torch
        versions = {"torch": str(torch.__version__),
                    "python": "%d.%d.%d" % sys.version_info[:3]}
        hip = getattr(torch.version, "hip", None)
        if hip:
            versions["hip"] = str(hip)
        cuda = getattr(torch.version, "cuda", None)
        if cuda:
            versions["cuda"] = str(cuda)
        facts = {"rocm_build": "true" if hip else "false",
                 "python_executable": sys.executable,
                 "threads": str(self.threads.configured),
                 # The SDPA calls (checked and timed) use `threads`; the rest runs on one.
                 "timing_threads": str(self.threads.configured),
                 "check_threads": str(self.threads.check)}
        facts.update(gpu_truth_facts(torch))
        aot = self.aotriton_library()
        if aot:
            versions["aotriton"] = aot
        try:
            available = torch.cuda.is_available()
            facts["gpu_count"] = str(torch.cuda.device_count() if available else 0)
            if available:
                for i in range(torch.cuda.device_count()):
                    p = torch.cuda.get_device_properties(i)
                    facts["device_%d_name" % i] = str(p.name)
                    arch = getattr(p, "gcnArchName", None)
                    if arch:
                        facts["device_%d_gcnArchName" % i] = str(arch)
        except Exception as e:  # a broken GPU stack is a fact, not a crash
            facts["gpu_error"] = one_line(e)
        cuda_backends = getattr(torch.backends, "cuda", None)
        pref = getattr(cuda_backends, "preferred_rocm_fa_library", None)
        if pref is not None:
            try:
                facts["preferred_rocm_fa_library"] = str(pref())
            except Exception as e:
                facts["preferred_rocm_fa_library"] = "error: " + one_line(e)
        if hip and cuda_backends is not None:
            ck = getattr(cuda_backends, "is_ck_sdpa_available", None)
            if ck is not None:
                try:
                    facts["is_ck_sdpa_available"] = "true" if ck() else "false"
                except Exception as e:
                    facts["is_ck_sdpa_available"] = "error: " + one_line(e)
        return versions, facts

    def aotriton_library(self):
        lib = os.path.join(os.path.dirname(self.torch.__file__), "lib")
        try:
            names = sorted(n for n in os.listdir(lib) if n.startswith("libaotriton_v2.so"))
        except OSError:
            return ""
        return names[-1] if names else ""

    def unavailable(self):
        """Why this (device, variant) cannot run here at all, or ''."""
        torch = self.torch
        if self.backend not in TORCH_BACKENDS:
            return "'%s' is not a torch SDPA backend" % self.backend
        if self.gpu:
            if not torch.cuda.is_available():
                return "no GPU visible to this PyTorch (torch.cuda.is_available() is False)"
            index = int(self.device.split(":")[1])
            if index >= torch.cuda.device_count():
                return "%s is not visible: PyTorch sees %d GPU(s)" % (self.device,
                                                                       torch.cuda.device_count())
        if "ck" in self.flags or "aotriton" in self.flags:
            pref = getattr(torch.backends.cuda, "preferred_rocm_fa_library", None)
            want = "ck" if "ck" in self.flags else "aotriton"
            # Selected even where it cannot matter (a CPU build keeps the setting), so the
            # worker's facts show the library each fresh process was given.
            try:
                got = pref(want) if pref is not None else None
            except Exception as e:
                got, error = None, one_line(e)
            else:
                error = ""
            if not getattr(torch.version, "hip", None):
                return ("this variant selects a ROCm flash-attention library, but this is not a "
                        "ROCm build of PyTorch")
            if pref is None:
                return "this PyTorch has no preferred_rocm_fa_library(): not supported"
            if error:
                return error
            if want not in str(got).lower():
                return ("PyTorch declined %s as the flash-attention library (preferred is %s): "
                        "not supported on this GPU or build" % (want, got))
        return ""

    def _context(self):
        torch = self.torch
        if self.backend == "default":
            return None
        attention = getattr(getattr(torch, "nn", None), "attention", None)
        kernel = getattr(attention, "sdpa_kernel", None) if attention is not None else None
        if kernel is not None:
            enum = getattr(attention.SDPBackend, BACKEND_ENUM[self.backend], None)
            if enum is None:
                raise RuntimeError("%s is not supported by this PyTorch (no SDPBackend.%s)"
                                   % (self.backend, BACKEND_ENUM[self.backend]))
            return kernel([enum])
        # torch < 2.3: the deprecated switches.
        kwargs = {"enable_flash": self.backend == "flash",
                  "enable_math": self.backend == "math",
                  "enable_mem_efficient": self.backend == "mem_efficient"}
        if self.backend == "cudnn":
            kwargs["enable_cudnn"] = True
        return torch.backends.cuda.sdp_kernel(**kwargs)

    def chosen(self, q, k, v, mask, c, gqa):
        torch = self.torch
        try:
            kwargs = {"attn_mask": mask, "dropout_p": 0.0, "is_causal": c["causal"]}
            if gqa:
                kwargs["enable_gqa"] = True
            choice = int(torch._fused_sdp_choice(q, k, v, **kwargs))
        except Exception as e:
            return "unknown (%s)" % one_line(e, 200)
        enum = getattr(getattr(torch.nn, "attention", None), "SDPBackend", None)
        if enum is not None:
            for name in CHOICE_NAMES:
                member = getattr(enum, name, None)
                if member is not None and int(member) == choice:
                    return CHOICE_NAMES[name]
        return "backend#%d" % choice

    def sync(self):
        if self.gpu:
            self.torch.cuda.synchronize(self.torch.device(self.device))

    def run(self, line, q, k, v, mask):
        """(status, reason, output float32 CPU tensor or None, times_ms, backend_chosen)."""
        torch = self.torch
        c = line["case"]
        dev = torch.device(self.device)

        def place(t):
            if c["layout"] == "transposed":
                t = t.transpose(1, 2).contiguous().transpose(1, 2)
            return t.to(dev)

        q, k, v = place(q), place(k), place(v)
        if mask is not None:
            mask = mask.to(dev)
        gqa = c["hq"] != c["hkv"]
        kwargs = {"attn_mask": mask, "dropout_p": 0.0, "is_causal": c["causal"]}
        if gqa:
            kwargs["enable_gqa"] = True
        sdpa = torch.nn.functional.scaled_dot_product_attention
        chosen = self.chosen(q, k, v, mask, c, gqa) if self.backend == "default" else self.backend

        def call():
            ctx = self._context()
            if ctx is None:
                return sdpa(q, k, v, **kwargs)
            with ctx:
                return sdpa(q, k, v, **kwargs)

        # Every SDPA call back to back in one pool block: a pool woken for the timed calls alone
        # would charge its wake-up (a scheduler tick on busy cores) to the first of them.
        # Past the case's budget the warm-ups left are skipped and only the first timed run starts.
        times = []
        start, budget = time.perf_counter(), line["budget_ms"] / 1000.0

        def spent():
            return budget > 0 and time.perf_counter() - start >= budget

        with self.threads.sdpa():
            out = call()  # the checked run: its output is the one compared with the oracle
            self.sync()
            for _ in range(1, line["warmup"]):
                if spent():
                    break
                call()
            self.sync()
            for i in range(line["repeat"]):
                if i > 0 and spent():
                    break
                t0 = time.perf_counter()
                call()
                self.sync()
                times.append((time.perf_counter() - t0) * 1000.0)
        # A trailing op on the device surfaces errors a kernel left behind without raising.
        float(out.float().sum().item())
        host = out.float().cpu().contiguous()
        return host, times, chosen


def classify(exc, captured):
    reason = one_line("%s: %s" % (type(exc).__name__, exc))
    refusal = any(r in reason for r in REFUSALS)
    for w in captured:
        reason += " | " + one_line(w)
        refusal = refusal or any(r in w for r in REFUSALS)
    return ("unsupported" if refusal else "error"), reason


def timing(times):
    if not times:
        return None, None, 0
    return statistics.median(times), min(times), len(times)


def import_torch():
    """(torch, '') or (None, why): the import, quiet about what is not SDPA's business."""
    # torch warns "Failed to initialize NumPy" when numpy is missing or broken, at import and
    # again on lazy use; it is about the environment, not SDPA, and must not reach stderr.
    warnings.filterwarnings("ignore", message=r"Failed to initialize NumPy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. NumPy missing: not about SDPA
        try:
            import torch
            return torch, ""
        except Exception as e:  # ImportError, or a torch that fails to initialise
            return None, "python: %s" % one_line(e)


def run_snippet(torch, device, source, path, first_case):
    """Executes a recommendation's Python as printed, with q, k, v bound for its `with
    sdpa_kernel(...)` example: '' when it ran, else why not, one line."""
    c = first_case or {"dtype": "fp32"}
    try:
        shape = (1, 2, 16, 64)
        dt = torch_dtype(torch, c["dtype"])
        q, k, v = (torch.ones(shape, dtype=dt, device=device) for _ in range(3))
        scope = {"__name__": "__main__", "q": q, "k": k, "v": v}
        exec(compile(source, path, "exec"), scope)
        if device.startswith("cuda"):
            torch.cuda.synchronize(torch.device(device))
        return ""
    except BaseException as e:  # SystemExit included: the snippet must not end the worker
        return "the recommended Python raised %s" % one_line("%s: %s" % (type(e).__name__, e))


def run_worker(args):
    backend, flags = parse_variant(args["variant"])
    variant_name = args["variant"]
    verify = args.get("verify")
    if verify:  # a recommendation's re-run: the fault switch names it so
        variant_name = "verify:" + verify
    for key, value in variant_environment(flags).items():
        os.environ.setdefault(key, value)  # before torch reads them, once per process
    writer = Writer(args["results_fd"])
    fault = parse_fault(os.environ.get("SDPA_DOCTOR_TEST_FAULT", ""))

    torch, import_error = import_torch()

    with open(args["cases"], "r") as f:
        raw = [l for l in f.read().splitlines() if l.strip()]
    lines = []
    for number, text in enumerate(raw, 1):
        try:
            lines.append(parse_case_line(text))
        except Exception as e:
            sys.stderr.write("%s:%d: %s\n" % (args["cases"], number, e))
            return 2

    versions = {"python": "%d.%d.%d" % sys.version_info[:3]}
    facts = {"python_executable": sys.executable}
    probe = None
    unavailable = import_error
    if torch is not None:
        probe = Probe(torch, args["device"], backend, flags)
        with warnings.catch_warnings(record=True) as startup:
            warnings.simplefilter("always")
            try:
                unavailable = probe.unavailable()  # first: it selects the variant's FA library
                versions, facts = probe.facts()
            except Exception as e:
                unavailable = one_line(e)
        if unavailable:
            for w in startup:
                unavailable += " | " + one_line(w.message)
    else:
        facts["torch"] = "missing"
    facts["started"] = STARTED
    facts["variant_environment"] = ",".join(
        "%s=%s" % (k, os.environ.get(k, "")) for k in sorted(variant_environment(flags)))
    source = None
    if verify:
        import hashlib
        with open(args["snippet"], "rb") as f:
            source = f.read()
        facts["verify"] = verify
        facts["snippet_sha256"] = hashlib.sha256(source).hexdigest()
    writer.event("hello", worker="python", device=args["device"], variant=args["variant"],
                 versions=versions, facts=facts)
    if probe is None:
        return run_cases(writer, lines, probe, torch, unavailable, fault, variant_name,
                         args["device"])
    with probe.threads.serial():  # Probe.run takes the pool back for the SDPA calls
        broken = ""
        if source is not None and not unavailable:
            broken = run_snippet(torch, args["device"], source, args["snippet"],
                                 lines[0]["case"] if lines else None)
        return run_cases(writer, lines, probe, torch, unavailable, fault, variant_name,
                         args["device"], broken)


def run_cases(writer, lines, probe, torch, unavailable, faults, variant_name, device, broken=""):
    """Runs every case line and writes begin/result, then bye; the worker's exit code.
    `unavailable`: every case is `unsupported` with it; `broken`: every case is an `error`."""
    for line in lines:
        cid = line["id"]
        if not writer.event("begin", case=cid):
            return 1
        fault = matching_fault(faults, variant_name, cid, line["case"])
        hit = fault is not None
        if hit:
            process_fault(fault["action"])
        result = {"case": cid, "status": "error", "reason": "", "metrics": {},
                  "tolerance": {"atol": line["atol"], "rtol": line["rtol"]},
                  "backend_chosen": "", "warnings": []}
        metrics = {"max_abs_err": None, "rel_l2_err": None, "frac_outside_tol": None,
                   "nan_count": 0, "inf_count": 0, "time_ms": None, "time_min_ms": None,
                   "timed_runs": 0}
        if unavailable:
            result["status"], result["reason"] = "unsupported", unavailable
        elif broken:
            result["status"], result["reason"] = "error", broken
        else:
            with warnings.catch_warnings(record=True) as captured:
                warnings.simplefilter("always")
                host = None
                try:
                    q, k, v, mask = make_inputs(torch, line["case"])
                    host, times, chosen = probe.run(line, q, k, v, mask)
                    result["backend_chosen"] = chosen
                except Exception as e:
                    texts = [str(w.message) for w in captured]
                    result["status"], result["reason"] = classify(e, texts)
            result["warnings"] = []
            for w in captured:
                text = one_line(w.message)
                if text not in result["warnings"]:
                    result["warnings"].append(text)
            if host is not None:
                try:
                    c = line["case"]
                    shape = (c["b"], c["hq"], c["lq"], c["d"])
                    if tuple(host.shape) != shape:
                        raise RuntimeError("output has shape %s, expected %s"
                                           % (tuple(host.shape), shape))
                    host = host.reshape(-1).clone()
                    if hit and fault["action"] == "nan":
                        host[host.numel() // 2] = float("nan")
                    if hit and fault["action"] == "perturb":
                        host[host.numel() // 2] += 0.5
                    ref = load_oracle(torch, line, q, k, v, mask)
                    status, reason, m = compare(torch, host, ref, line["atol"], line["rtol"])
                    metrics.update(m)
                    metrics["time_ms"], metrics["time_min_ms"], metrics["timed_runs"] = \
                        timing(times)
                    result["status"], result["reason"] = status, reason
                except Exception as e:
                    result["status"], result["reason"] = "error", one_line(e)
        result["metrics"] = {key: (finite_or_none(v) if isinstance(v, float) else v)
                             for key, v in metrics.items()}
        poisoned = add_canary(result, torch, device, not (unavailable or broken),
                              hit and fault["action"] == "poison")
        if not writer.event("result", **result):
            return 1
        if poisoned:
            return CANARY_FAILED_EXIT  # no bye: the runner resumes the rest in a fresh worker
    writer.event("bye")
    return 0


def load_oracle(torch, line, q, k, v, mask):
    n = q_elements(line["case"])
    if line["oracle"]:
        with open(line["oracle"], "rb") as f:
            data = f.read()
        if len(data) != 8 * n:
            raise RuntimeError("oracle '%s' has %d bytes, expected %d"
                               % (line["oracle"], len(data), 8 * n))
        t = torch.frombuffer(bytearray(data), dtype=torch.float64)
        if sys.byteorder != "little":
            t = t.byteswap() if hasattr(t, "byteswap") else t
        return t
    return oracle_attention(torch, line["case"], q, k, v, mask).reshape(-1)


def dump_inputs(case_json, path):
    """Test hook: the raw float32 values of q, k, v (and mask) for a case, concatenated."""
    import ctypes
    import torch
    c = normalise_case(json.loads(case_json))
    q, k, v, mask = make_inputs(torch, c)
    with open(path, "wb") as f:
        for t in [q, k, v] + ([mask] if mask is not None else []):
            t = t.to(torch.float32).contiguous().reshape(-1)
            f.write(ctypes.string_at(t.data_ptr(), t.numel() * 4))


# --- the start-up server -----------------------------------------------------------------------
# `import torch` costs 1-2 s of CPU in every worker. The doctor starts one server per run
# (`--serve SOCKET`) that imports torch once and never touches a GPU or runs an op. Each worker the
# runner spawns connects, hands over its standard streams and results fd, and the server forks a
# child that becomes that worker: a fresh process, its environment replaced by the worker's before
# SDPA is first called, so the variables torch latches on first use and the FA library chosen
# there are the child's own. The worker the runner spawned waits and then exits the way the child
# did (its code, or its signal), so the runner's isolation, deadlines and crash attribution are
# unchanged. Where the server cannot be reached, or forking is unsafe, the worker runs itself.

SERVER_ENV = "SDPA_DOCTOR_PROBE_SERVER"
STARTED = "exec"  # "forked by the start-up server" in the server's children
LOST_SERVER_EXIT = 70  # the server died while its child ran the worker


def set_parent_death_signal():
    """Dies with SIGKILL when the parent does (Linux): no worker outlives a killed doctor."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def read_line(conn, buf=b""):
    """One newline-terminated line from a stream socket, and the bytes after it."""
    while b"\n" not in buf:
        chunk = conn.recv(65536)
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    line, rest = buf.split(b"\n", 1)
    return line.decode("utf-8", "replace"), rest


def other_threads():
    """Names of the threads beside this one (forking copies one thread only: with another alive,
    a lock it holds may stay held forever in the child); None when they cannot be listed."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    names = []
    for t in tasks:
        if int(t) == threading_native_id():
            continue
        try:
            with open("/proc/self/task/%s/comm" % t) as f:
                names.append(f.read().strip())
        except OSError:
            names.append(t)
    return names


def threading_native_id():
    import threading
    return threading.get_native_id() if hasattr(threading, "get_native_id") else os.getpid()


def become_worker(request, fds):
    """In the forked child: take the worker's streams, environment and limits, then run it."""
    global STARTED
    STARTED = "forked by the start-up server"
    set_parent_death_signal()
    targets = [0, 1, 2, int(request["results_fd"])]
    top = max(targets) + 1
    moved = [fcntl_dup_above(fd, top) for fd in fds]  # no dup2 may clobber a source still needed
    for fd in fds:
        os.close(fd)
    for source, target in zip(moved, targets):
        os.dup2(source, target)
        os.close(source)
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, tuple(request["rlimit_core"]))
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = [sys.argv[0]] + request["argv"]
    main(request["argv"])  # ends in os._exit


def fcntl_dup_above(fd, lowest):
    import fcntl
    return fcntl.fcntl(fd, fcntl.F_DUPFD, lowest)


def serve(path):
    """Accepts workers until the doctor kills the server's process group."""
    set_parent_death_signal()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)  # before the import: early workers wait in the backlog
    # torch imports numpy where it is installed, and OpenBLAS starts a thread per core at load:
    # with them alive this process could not fork. The probe never calls numpy; a child gets its
    # own environment back, and only numpy's BLAS pool (one thread) from here.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    torch, why = import_torch()
    others = other_threads()
    if torch is None or others != []:
        why = why or ("threads alive after import: %s" % ", ".join(others or ["unknown"]))
        sys.stderr.write("sdpa_probe: not serving: %s\n" % why)
        listener.close()
        os.unlink(path)  # workers then run themselves
        return 1
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    children = {}  # pid -> the worker's connection
    while True:
        for key, _ in sel.select(timeout=0.05):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                pid = start_child(conn, listener, sel)
                if pid:
                    children[pid] = conn
                    sel.register(conn, selectors.EVENT_READ, pid)
            else:  # the worker sends nothing after its request: readable means it went away
                try:
                    os.kill(key.data, signal.SIGKILL)
                except OSError:
                    pass
        reap(children, sel)


def start_child(conn, listener, sel):
    """Forks the child for one worker's request; its pid, or 0 when the request was bad."""
    try:
        conn.settimeout(10)
        data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 4)
        line, _ = read_line(conn, data)
        request = json.loads(line)
        if len(fds) != 4:
            raise ValueError("expected 4 descriptors, got %d" % len(fds))
        conn.settimeout(None)
    except (OSError, ValueError, EOFError) as e:
        sys.stderr.write("sdpa_probe: bad request: %s\n" % one_line(e))
        conn.close()
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            listener.close()
            sel.close()
            conn.close()
            become_worker(request, fds)
        except BaseException as e:  # the child must never return into the server's loop
            os.write(2, ("sdpa_probe: forked worker failed: %s\n" % one_line(e)).encode())
        os._exit(LOST_SERVER_EXIT)
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(b"forked %d\n" % pid)
    except OSError:
        os.kill(pid, signal.SIGKILL)
    return pid


def reap(children, sel):
    """Tells each finished child's worker how the child ended."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        if os.WIFSIGNALED(status):
            message = b"signal %d\n" % os.WTERMSIG(status)
        else:
            message = b"exit %d\n" % os.WEXITSTATUS(status)
        sel.unregister(conn)
        try:
            conn.sendall(message)
        except OSError:
            pass
        conn.close()


def run_through_server(path, argv, results_fd):
    """The exit code of the server's child that ran this worker; None: run it here instead."""
    if not hasattr(socket, "send_fds"):  # Python < 3.9
        return None
    import resource
    request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(),
               "results_fd": results_fd,
               "rlimit_core": list(resource.getrlimit(resource.RLIMIT_CORE))}
    request["env"].pop(SERVER_ENV, None)
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
        socket.send_fds(conn, [json.dumps(request).encode("utf-8") + b"\n"],
                        [0, 1, 2, results_fd])
        line, rest = read_line(conn)
    except (OSError, EOFError):
        return None  # no server (yet, or any more): nothing ran, so run here
    if not line.startswith("forked "):
        return None
    try:
        line, _ = read_line(conn, rest)
    except (OSError, EOFError):
        sys.stderr.write("sdpa_probe: the start-up server went away while its child ran\n")
        return LOST_SERVER_EXIT
    kind, _, value = line.partition(" ")
    if kind == "signal":  # die the way the child died: the runner reads the signal
        sig = int(value)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        return 128 + sig
    return int(value)


def parse_args(argv):
    args = {"device": None, "variant": None, "results_fd": None, "cases": None}
    i = 0
    while i < len(argv):
        flag = argv[i]
        if flag in ("--dump-inputs",) and i + 2 < len(argv):
            args["dump"] = (argv[i + 1], argv[i + 2])
            i += 3
            continue
        if i + 1 >= len(argv):
            raise ValueError("'%s' needs a value" % flag)
        value = argv[i + 1]
        if flag == "--device":
            if not re.match(r"^(cpu|cuda:\d+)$", value):
                raise ValueError("invalid --device '%s' (cpu or cuda:N)" % value)
            args["device"] = value
        elif flag == "--variant":
            parse_variant(value)
            args["variant"] = value
        elif flag == "--results-fd":
            if not value.isdigit() or int(value) < 3:
                raise ValueError("invalid --results-fd '%s' (a descriptor >= 3)" % value)
            args["results_fd"] = int(value)
        elif flag == "--cases":
            args["cases"] = value
        elif flag == "--verify":
            if not re.match(r"^[a-z0-9+\-]+$", value):
                raise ValueError("invalid --verify '%s' (a recommendation id)" % value)
            args["verify"] = value
        elif flag == "--snippet":
            args["snippet"] = value
        else:
            raise ValueError("unknown argument '%s'" % flag)
        i += 2
    if "dump" in args:
        return args
    for key in ("device", "variant", "results_fd", "cases"):
        if args[key] is None:
            raise ValueError("missing --%s" % key.replace("_", "-"))
    if ("verify" in args) != ("snippet" in args):
        raise ValueError("--verify and --snippet come together")
    if "verify" in args and args["variant"] != "default":
        raise ValueError("--verify re-runs through the default dispatch: --variant default")
    return args


def main(argv):
    if len(argv) == 2 and argv[0] == "--serve":
        return serve(argv[1])
    try:
        args = parse_args(argv)
    except ValueError as e:
        sys.stderr.write("sdpa_probe.py: %s\n" % e)
        return 2
    if "dump" in args:
        dump_inputs(args["dump"][0], args["dump"][1])
        return 0
    try:
        os.fstat(args["results_fd"])
    except OSError:
        sys.stderr.write("sdpa_probe.py: --results-fd %d is not open\n" % args["results_fd"])
        return 2
    if "snippet" in args and not os.access(args["snippet"], os.R_OK):
        sys.stderr.write("sdpa_probe.py: --snippet %s cannot be read\n" % args["snippet"])
        return 2
    server = os.environ.get(SERVER_ENV, "")
    if server and STARTED == "exec":
        code = run_through_server(server, argv, args["results_fd"])
        if code is not None:
            os._exit(code)
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    code = run_worker(args)
    # Every event is already written (os.write, unbuffered) and `bye` said the worker is done:
    # skip the interpreter's teardown, which unloads torch for 0.6-0.8 s per worker.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
