"""The float64 oracle of a case (the doctor's file, else computed here) and the comparison of an
output with it, with the definitions of cases::compare_to_oracle."""

import math
import sys

from .inputs import q_elements


def masked_row_semantics(torch):
    """What this torch gives a fully masked query row: "zero" from 2.5 on (SDPA's
    _safe_softmax), "nan" before (MaskedRowSemantics)."""
    try:
        major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    except ValueError:
        return "zero"
    return "zero" if (major, minor) >= (2, 5) else "nan"


def fully_masked_rows(torch, c, mask):
    """Bool (B or 1, H or 1, Lq, 1): the query rows with no key to attend to."""
    keep = torch.ones(c["lq"], c["lkv"], dtype=torch.bool)
    if c["causal"]:
        keep = keep.tril()
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


# cases::k_all_zero_output: a mismatch's reason opens with it when the output is all zeros and the
# oracle is not.
ALL_ZERO_OUTPUT = "all-zero output where the oracle is not"


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


def first_of(torch, mask):
    """The first index where `mask` holds: a reason's example is one of the elements it counts."""
    return int(torch.nonzero(mask)[0][0])


def compare(torch, out, ref, atol, rtol, rows=None):
    """Same definitions as cases::compare_to_oracle, in float64."""
    out = out.double().reshape(-1)
    ref = ref.double().reshape(-1)
    n = out.numel()
    ref_nan = torch.isnan(ref)  # fully masked rows under torch < 2.5: NaN is right there
    expected_nan = int(ref_nan.sum())
    not_nan_mask = ref_nan & ~torch.isnan(out)
    not_nan = int(not_nan_mask.sum())
    bad = ~torch.isfinite(out) & ~ref_nan
    nan = int((torch.isnan(out) & ~ref_nan).sum())
    inf = int((torch.isinf(out) & ~ref_nan).sum())
    in_rows = int((bad & in_masked_rows(torch, n, rows)).sum())
    fin = torch.isfinite(out) & torch.isfinite(ref)
    err = (out - ref).abs()
    err_f = torch.where(fin, err, torch.zeros_like(err))
    ref_f = torch.where(fin, ref, torch.zeros_like(ref))
    max_abs = float(err_f.max()) if n else 0.0
    err2 = float((err_f * err_f).sum())
    ref2 = float((ref_f * ref_f).sum())
    rel_l2 = math.sqrt(err2 / ref2) if ref2 > 0 else math.sqrt(err2)
    mismatch_mask = fin & (err > atol + rtol * ref.abs())
    outside = int((bad | not_nan_mask | mismatch_mask).sum())
    metrics = {"max_abs_err": max_abs, "rel_l2_err": rel_l2,
               "frac_outside_tol": (outside / n) if n else 0.0,
               "nan_count": nan, "inf_count": inf}
    if nan + inf:
        reason = ("%d NaN and %d Inf of %d output elements (first at index %d)"
                  % (nan, inf, n, first_of(torch, bad)))
        if in_rows == nan + inf:  # a backend that returns NaN for padded rows
            reason += ", all in fully masked rows, where torch >= 2.5 returns 0"
        return "nonfinite", reason, metrics
    if outside:
        # Zeros where the oracle is not: what a kernel that never ran leaves (cases.hpp).
        zeros = n > 0 and not bool(out.ne(0).any()) and bool(ref.ne(0).any())
        reason = ""
        if not_nan:
            reason = ("%d of %d elements in fully masked rows are finite where torch < 2.5 "
                      "returns NaN" % (not_nan, expected_nan))
        if outside > not_nan:
            first = first_of(torch, mismatch_mask)
            reason += ("%s%s%d of %d elements outside atol=%g + rtol=%g*|ref| (first at index "
                       "%d: got %.6g, expected %.6g); max abs err %.3g, rel L2 err %.3g"
                       % ("; " if reason else "", ALL_ZERO_OUTPUT + ": " if zeros else "",
                          outside - not_nan, n, atol, rtol, first, float(out[first]),
                          float(ref[first]), max_abs, rel_l2))
        return "mismatch", reason, metrics
    return "pass", "", metrics


# cases::k_gradient_slack and cases::gradient_tolerance: a gradient is judged with the case's
# tolerance, atol scaled by its largest |oracle| element (at least 1), both times the slack.
GRADIENT_SLACK = 2.0
BADNESS = {"pass": 0, "mismatch": 1, "nonfinite": 2}


def worst_metrics(a, b):
    out = dict(a)
    for key in ("max_abs_err", "rel_l2_err", "frac_outside_tol"):
        if b.get(key) is not None and (out.get(key) is None or b[key] > out[key]):
            out[key] = b[key]
    for key in ("nan_count", "inf_count"):
        out[key] = out.get(key, 0) + b.get(key, 0)
    return out


def compare_gradients(torch, got, want, atol, rtol, rows=None):
    """cases::compare_gradients: (status, reason, metrics) over [(name, got, oracle)]; `rows`
    (masked_rows_of) are dq's."""
    status, reason, metrics = "pass", "", None
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        w = w.double().reshape(-1)
        finite = w[torch.isfinite(w)]
        scale = max(1.0, float(finite.abs().max())) if finite.numel() else 1.0
        s, r, m = compare(torch, g, w, atol * scale * GRADIENT_SLACK, rtol * GRADIENT_SLACK,
                          rows if name == "dq" else None)
        metrics = m if metrics is None else worst_metrics(metrics, m)
        if BADNESS.get(s, 3) > BADNESS.get(status, 3):
            status, reason = s, "%s: %s" % (name, r)
    return status, reason, metrics


def combine_directions(forward, backward):
    """cases::combine_directions of two (status, reason, metrics)."""
    (fs, fr, fm), (bs, br, bm) = forward, backward
    status = bs if BADNESS.get(bs, 3) > BADNESS.get(fs, 3) else fs
    metrics = worst_metrics(fm, bm)
    if bs == "pass":
        return status, fr, metrics
    reason = "backward: %s" % br if fs == "pass" else "forward: %s; backward: %s" % (fr, br)
    return status, reason, metrics


# cases::dropout_seed and the constants of cases::judge_dropout.
DROPOUT_MIN_PROBABILITY = 1e-3
DROPOUT_MIN_COUNTED = 200
DROPOUT_SIGMAS = 6.0


def dropout_seed(c, run):
    """The generator seed of a dropout case's run: 0 the checked run and its repeat, 1 another."""
    return 0x5d0c0000 + 2 * c["seed"] + run


def judge_dropout(torch, first, same_seed, other_seed, probs, p, atol, rtol):
    """cases::judge_dropout: (status, reason, metrics) of a dropout case's three outputs against
    the probabilities (the oracle of its forward: V is the identity)."""
    out = first.double().reshape(-1)
    probs = probs.double().reshape(-1)
    n = out.numel()
    nan = int(torch.isnan(out).sum())
    inf = int(torch.isinf(out).sum())
    finite = torch.isfinite(out)
    counts = probs >= DROPOUT_MIN_PROBABILITY
    zero = finite & (out == 0)
    kept = finite & (out != 0)
    expected = probs / (1.0 - p)
    err = torch.where(kept, (out - expected).abs(), torch.zeros_like(out))
    ref = torch.where(kept, expected, torch.zeros_like(out))
    mismatch_mask = kept & (err > atol + rtol * expected)
    outside = int(((~finite) | mismatch_mask).sum())
    err2, ref2 = float((err * err).sum()), float((ref * ref).sum())
    metrics = {"max_abs_err": float(err.max()) if n else 0.0,
               "rel_l2_err": math.sqrt(err2 / ref2) if ref2 > 0 else math.sqrt(err2),
               "frac_outside_tol": (outside / n) if n else 0.0,
               "nan_count": nan, "inf_count": inf}
    problems = []
    status = "pass"
    if nan + inf:
        status = "nonfinite"
        problems.append("%d NaN and %d Inf of %d output elements (first at index %d)"
                        % (nan, inf, n, first_of(torch, ~finite)))
    elif outside:
        first_index = first_of(torch, mismatch_mask)
        problems.append("%d of %d elements are neither 0 nor their probability / (1 - p) within "
                        "atol=%g + rtol=%g*|ref| (first at index %d: got %.6g, expected 0 or "
                        "%.6g)" % (outside, n, atol, rtol, first_index, float(out[first_index]),
                                   float(expected[first_index])))
    counted = int((counts & finite).sum())
    dropped = int((counts & zero).sum())
    if counted >= DROPOUT_MIN_COUNTED:
        sigma = math.sqrt(counted * p * (1.0 - p))
        bound = DROPOUT_SIGMAS * sigma + 1.0
        if abs(dropped - p * counted) > bound:
            problems.append("%.2f%% of %d probabilities >= %g were dropped, expected %g%% +/- "
                            "%.2f%% (%g binomial sigmas)"
                            % (100.0 * dropped / counted, counted, DROPOUT_MIN_PROBABILITY,
                               100 * p, 100.0 * bound / counted, DROPOUT_SIGMAS))

    def differing(a, b):  # bit for bit, as the C++ side compares
        a32 = a.float().reshape(-1).contiguous().view(torch.int32)
        b32 = b.float().reshape(-1).contiguous().view(torch.int32)
        return int((a32 != b32).sum())

    diff = differing(first, same_seed)
    if diff:
        problems.append("not reproducible: %d of %d elements differ between two runs under the "
                        "same seed" % (diff, n))
    all_zero = n > 0 and not bool(out.ne(0).any())
    if n and not all_zero and differing(first, other_seed) == 0:
        problems.append("the seed is ignored: a run under another seed gave the same output")
    if not problems:
        return "pass", "", metrics
    zeros = all_zero and bool(probs.ne(0).any())
    return ("mismatch" if status == "pass" else status,
            (ALL_ZERO_OUTPUT + ": " if zeros else "") + "dropout: " + "; ".join(problems),
            metrics)
