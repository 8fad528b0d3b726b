"""The float64 oracle of a case (the doctor's file, else computed here) and the comparison of an
output with it, with the definitions of cases::compare_to_oracle."""

import math
import sys

from .inputs import q_elements


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


# cases::k_all_zero_output: a mismatch's reason opens with it when the output is all zeros and the
# oracle is not.
ALL_ZERO_OUTPUT = "all-zero output where the oracle is not"


def compare(torch, out, ref, atol, rtol):
    """Same definitions as cases::compare_to_oracle, in float64."""
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
        # Zeros where the oracle is not: what a kernel that never ran leaves (cases.hpp).
        zeros = n > 0 and not bool(out.ne(0).any()) and bool(ref.ne(0).any())
        reason = ("%d of %d elements outside atol=%g + rtol=%g*|ref| (first at index %d: "
                  "got %.6g, expected %.6g); max abs err %.3g, rel L2 err %.3g"
                  % (outside, n, atol, rtol, first, float(out[first]), float(ref[first]),
                     max_abs, rel_l2))
        return "mismatch", (ALL_ZERO_OUTPUT + ": " if zeros else "") + reason, metrics
    return "pass", "", metrics
