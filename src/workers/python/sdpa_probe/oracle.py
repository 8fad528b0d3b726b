"""The float64 oracle of a case (the doctor's file, else computed here) and what an output
measures against it (core/measure.hpp's numbers, as cases::measure_tensor measures them). The
verdict is the doctor's: cases::judge."""

import math
import sys

from .inputs import q_elements
from .protocol import causal_offset


def masked_row_semantics(torch):
    """What this torch gives a fully masked query row: "zero" from 2.5 on (SDPA's
    _safe_softmax), "nan" before (MaskedRowSemantics)."""
    try:
        major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    except ValueError:
        return "zero"
    return "zero" if (major, minor) >= (2, 5) else "nan"


def causal_keep(torch, c):
    """Bool (Lq, Lkv): the keys each query sees under the case's causal rule (all without it)."""
    keep = torch.ones(c["lq"], c["lkv"], dtype=torch.bool)
    return keep.tril(diagonal=causal_offset(c)) if c["causal"] else keep


def fully_masked_rows(torch, c, mask):
    """Bool (B or 1, H or 1, Lq, 1): the query rows with no key to attend to."""
    keep = causal_keep(torch, c)
    if mask is not None:
        keep = keep & (mask if mask.dtype == torch.bool else ~torch.isneginf(mask))
    return ~keep.any(dim=-1, keepdim=True)


def oracle_attention(torch, c, q, k, v, mask, semantics="zero"):
    """float64 math attention with PyTorch's semantics, on the CPU; a fully masked row is 0, or
    NaN under semantics "nan" (torch < 2.5)."""
    q, k, v = q.double(), k.double(), v.double()
    group = c["hq"] // c["hkv"]
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(c["d"]))
    keep = causal_keep(torch, c).expand(s.shape)
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
    out = torch.matmul(p, v)
    if semantics == "nan":
        out = out.masked_fill(empty, float("nan"))
    return out


def oracle_gradients(torch, c, q, k, v, mask, grad_out, semantics="zero"):
    """dq, dk, dv of oracle_attention for the upstream gradient, by float64 autograd on the CPU
    (flat, float64). A fully masked row passes no gradient; under "nan" its dq row is NaN (as
    kernels::apply_masked_row_semantics)."""
    q, k, v = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    with torch.enable_grad():
        out = oracle_attention(torch, c, q, k, v, mask)
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad_out.double())
    if semantics == "nan":
        dq = dq.masked_fill(fully_masked_rows(torch, c, mask), float("nan"))
    return dq.reshape(-1), dk.reshape(-1), dv.reshape(-1)


def load_oracle(torch, line, q, k, v, mask, semantics="zero"):
    """The doctor's oracle file (computed with "zero" semantics), else computed here: always
    for a masked_rows case under other semantics."""
    n = q_elements(line["case"])
    own = line["case"].get("masked_rows") and semantics != "zero"
    if line["oracle"] and not own:
        with open(line["oracle"], "rb") as f:
            data = f.read()
        if len(data) != 8 * n:
            raise RuntimeError("oracle '%s' has %d bytes, expected %d"
                               % (line["oracle"], len(data), 8 * n))
        t = torch.frombuffer(bytearray(data), dtype=torch.float64)
        if sys.byteorder != "little":
            t = t.byteswap() if hasattr(t, "byteswap") else t
        return t
    return oracle_attention(torch, line["case"], q, k, v, mask, semantics).reshape(-1)


def masked_rows_of(c):
    """cases::masked_rows_of: (lq, d) of a masked_rows case, whose rows i % 4 == 3 are fully
    masked; None otherwise."""
    return (c["lq"], c["d"]) if c.get("masked_rows") else None


def in_masked_rows(torch, n, rows):
    """cases::MaskedRows::contains over indices 0..n-1 (all False without rows)."""
    if rows is None:
        return torch.zeros(n, dtype=torch.bool)
    lq, d = rows
    return (torch.arange(n, dtype=torch.int64) // d % lq % 4) == 3


def first_index(torch, where):
    """The first index where `where` holds, else -1."""
    hits = torch.nonzero(where)
    return int(hits[0][0]) if hits.numel() else -1


def measure(torch, out, ref, tolerance, rows=None, gradient=False):
    """A tensor's TensorErrors (core/measure.hpp) against its float64 oracle: numbers only, the
    doctor judges them. `tolerance` (atol, rtol) is the case line's; `gradient`: atol is per unit
    of the tensor's scale, the larger of 1 and its largest finite |oracle|."""
    atol, rtol = tolerance
    out = out.double().reshape(-1)
    ref = ref.double().reshape(-1)
    n = out.numel()
    scale = 1.0
    if gradient:
        finite_ref = ref[torch.isfinite(ref)]
        if finite_ref.numel():
            scale = max(1.0, float(finite_ref.abs().max()))
    ref_nan = torch.isnan(ref)  # fully masked rows under torch < 2.5: NaN is right there
    finite_where_nan = ref_nan & ~torch.isnan(out)
    nonfinite = ~torch.isfinite(out) & ~ref_nan
    both = torch.isfinite(out) & torch.isfinite(ref)
    err = torch.where(both, (out - ref).abs(), torch.zeros_like(out))
    ref_both = torch.where(both, ref, torch.zeros_like(ref))
    mismatch = both & (err > atol * scale + rtol * ref.abs())
    err2, ref2 = float((err * err).sum()), float((ref_both * ref_both).sum())
    first = first_index(torch, mismatch)
    return {
        "n": n, "atol": atol, "rtol": rtol,
        "max_abs_err": float(err.max()) if n else 0.0,
        "rel_l2_err": math.sqrt(err2 / ref2) if ref2 > 0 else math.sqrt(err2),
        "outside": int((nonfinite | finite_where_nan | mismatch).sum()),
        "first_mismatch": first,
        "mismatch_got": float(out[first]) if first >= 0 else 0.0,
        "mismatch_expected": float(ref[first]) if first >= 0 else 0.0,
        "nan_count": int((torch.isnan(out) & ~ref_nan).sum()),
        "inf_count": int((torch.isinf(out) & ~ref_nan).sum()),
        "first_nonfinite": first_index(torch, nonfinite),
        "nonfinite_in_masked_rows": int((nonfinite & in_masked_rows(torch, n, rows)).sum()),
        "expected_nan": int(ref_nan.sum()),
        "finite_where_nan": int(finite_where_nan.sum()),
        "all_zero": n > 0 and not bool(out.ne(0).any()),
        "oracle_all_zero": not bool(ref.ne(0).any()),
    }


def measure_gradients(torch, got, want, tolerance, rows=None):
    """{"dq", "dk", "dv"}: each gradient's measure against its oracle; `rows` (masked_rows_of)
    are dq's."""
    return {name: measure(torch, g, w, tolerance, rows if name == "dq" else None, gradient=True)
            for name, g, w in zip(("dq", "dk", "dv"), got, want)}


# cases::dropout_seed and the constant of cases::measure_dropout.
DROPOUT_MIN_PROBABILITY = 1e-3


def dropout_seed(c, run):
    """The generator seed of a dropout case's run: 0 the checked run and its repeat, 1 another."""
    return 0x5d0c0000 + 2 * c["seed"] + run


def measure_dropout(torch, first, same_seed, other_seed, probs, p, tolerance):
    """cases::measure_dropout: {"out": kept elements against probability / (1 - p), "dropout":
    the dropped count and the runs' differences}, numbers only."""
    atol, rtol = tolerance
    out = first.double().reshape(-1)
    probs = probs.double().reshape(-1)
    n = out.numel()
    finite = torch.isfinite(out)
    kept = finite & (out != 0)
    expected = probs * (1.0 / (1.0 - p))  # as cases::measure_dropout scales, to the bit
    err = torch.where(kept, (out - expected).abs(), torch.zeros_like(out))
    ref = torch.where(kept, expected, torch.zeros_like(out))
    mismatch = kept & (err > atol + rtol * expected)
    err2, ref2 = float((err * err).sum()), float((ref * ref).sum())
    first_bad = first_index(torch, mismatch)
    counts = probs >= DROPOUT_MIN_PROBABILITY

    def differing(a, b):  # bit for bit, as the C++ side compares
        a32 = a.float().reshape(-1).contiguous().view(torch.int32)
        b32 = b.float().reshape(-1).contiguous().view(torch.int32)
        return int((a32 != b32).sum())

    return {
        "out": {
            "n": n, "atol": atol, "rtol": rtol,
            "max_abs_err": float(err.max()) if n else 0.0,
            "rel_l2_err": math.sqrt(err2 / ref2) if ref2 > 0 else math.sqrt(err2),
            "outside": int(((~finite) | mismatch).sum()),
            "first_mismatch": first_bad,
            "mismatch_got": float(out[first_bad]) if first_bad >= 0 else 0.0,
            "mismatch_expected": float(expected[first_bad]) if first_bad >= 0 else 0.0,
            "nan_count": int(torch.isnan(out).sum()),
            "inf_count": int(torch.isinf(out).sum()),
            "first_nonfinite": first_index(torch, ~finite),
            "nonfinite_in_masked_rows": 0, "expected_nan": 0, "finite_where_nan": 0,
            "all_zero": n > 0 and not bool(out.ne(0).any()),
            "oracle_all_zero": not bool(probs.ne(0).any()),
        },
        "dropout": {
            "p": p,
            "counted": int((counts & finite).sum()),
            "dropped": int((counts & finite & (out == 0)).sum()),
            "differ_same_seed": differing(first, same_seed),
            "differ_other_seed": differing(first, other_seed),
        },
    }


class RepeatCompare(object):
    """cases::RepeatComparer: every later call of a case measured against its first, the checked
    one (RepeatStats, core/measure.hpp): the output bit for bit, each gradient as `measure`
    measures it against the first call's with the gradient tolerance (bit for bit under
    deterministic algorithms)."""

    NAMES = ("out", "dq", "dk", "dv")

    def __init__(self, torch, gradient_tolerance, bitwise_gradients=False):
        self.torch = torch
        self.gradient_tolerance = gradient_tolerance
        self.bitwise_gradients = bitwise_gradients
        self.first = []
        self.stats = {"calls": 1, "differing_call": 0, "tensor": "", "differing": 0,
                      "max_abs_delta": 0.0, "nan_count": 0, "inf_count": 0}

    def set_first(self, out, grads=None):
        self.first = [t.detach().float().cpu().reshape(-1).clone() for t in [out] + list(grads or [])]

    def later(self, out, grads=None):
        self.stats["calls"] += 1
        if self.stats["differing_call"]:
            return  # the first call that differs is the one described
        now = [t.detach().to("cpu", self.torch.float32).reshape(-1)
               for t in [out] + list(grads or [])]
        for name, tensor, first in zip(self.NAMES, now, self.first):
            if name == "out" or self.bitwise_gradients:
                found = self._bitwise(tensor, first)
            else:
                e = measure(self.torch, tensor, first.double(), self.gradient_tolerance,
                            gradient=True)
                found = {"differing": e["outside"], "max_abs_delta": e["max_abs_err"],
                         "nan_count": e["nan_count"], "inf_count": e["inf_count"]}
            if found["differing"]:
                call = self.stats["calls"]
                found.update(calls=call, differing_call=call, tensor=name)
                self.stats.update(found)
                return

    def _bitwise(self, now, first):
        torch = self.torch
        a, b = now.contiguous(), first.contiguous()
        if torch.equal(a.view(torch.int32), b.view(torch.int32)):
            return {"differing": 0}  # the common case, in one op
        differ = a.view(torch.int32) != b.view(torch.int32)
        both = torch.isfinite(a) & torch.isfinite(b)
        delta = torch.where(both & differ, (a.double() - b.double()).abs(),
                            torch.zeros_like(a, dtype=torch.float64))
        return {"differing": int(differ.sum()),
                "max_abs_delta": float(delta.max()) if delta.numel() else 0.0,
                "nan_count": int(torch.isnan(a).sum()), "inf_count": int(torch.isinf(a).sum())}
