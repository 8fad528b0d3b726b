"""The probe's numbers: each tensor against its float64 oracle (measure), dropout's statistics,
the repeated calls' comparison, and the oracle itself against torch's math SDPA."""
import struct

import pytest

torch = pytest.importorskip("torch")

from sdpa_probe.inputs import make_inputs  # noqa: E402
from sdpa_probe.oracle import (RepeatCompare, fully_masked_rows, in_masked_rows,  # noqa: E402
                               masked_row_semantics, measure, measure_dropout, measure_gradients,
                               oracle_attention, oracle_gradients)

TOL = (1e-3, 1e-2)


def t(values):
    return torch.tensor(values, dtype=torch.float64)


def test_an_exact_output_has_nothing_outside():
    e = measure(torch, t([1.0, -2.0, 3.0]), t([1.0, -2.0, 3.0]), TOL)
    assert (e["n"], e["outside"], e["first_mismatch"], e["max_abs_err"]) == (3, 0, -1, 0.0)
    assert (e["nan_count"], e["inf_count"], e["first_nonfinite"]) == (0, 0, -1)
    assert not e["all_zero"] and not e["oracle_all_zero"]


def test_an_error_within_atol_plus_rtol_times_the_oracle_passes():
    e = measure(torch, t([10.0 + 0.1009, 0.0]), t([10.0, 0.0]), TOL)  # 1e-3 + 1e-2 * 10 = 0.101
    assert e["outside"] == 0
    assert e["max_abs_err"] == pytest.approx(0.1009)


def test_elements_outside_the_tolerance_are_counted_from_the_first():
    out, ref = t([0.0] * 8), t([0.0] * 8)
    out[5], out[6] = 0.5, -0.25
    e = measure(torch, out, ref, TOL)
    assert (e["outside"], e["first_mismatch"]) == (2, 5)
    assert (e["mismatch_got"], e["mismatch_expected"], e["max_abs_err"]) == (0.5, 0.0, 0.5)


def test_rel_l2_err_is_the_error_norm_over_the_oracle_norm():
    e = measure(torch, t([3.0, 4.0 + 1.0]), t([3.0, 4.0]), TOL)
    assert e["rel_l2_err"] == pytest.approx(1.0 / 5.0)


def test_nan_and_inf_are_counted_with_the_first_index():
    out = t([0.0, 1.0, float("nan"), 3.0, float("inf"), float("-inf")])
    e = measure(torch, out, t([0.0, 1.0, 2.0, 3.0, 4.0, 5.0]), TOL)
    assert (e["nan_count"], e["inf_count"], e["first_nonfinite"], e["outside"]) == (1, 2, 2, 3)
    assert e["first_mismatch"] == -1  # a mismatch is between finite numbers


def test_nan_where_the_oracle_has_nan_is_right_and_a_number_there_is_not():
    ref = t([1.0, float("nan"), float("nan")])
    e = measure(torch, t([1.0, float("nan"), 7.0]), ref, TOL)
    assert (e["expected_nan"], e["finite_where_nan"], e["nan_count"], e["outside"]) == (2, 1, 0, 1)


def test_non_finite_in_fully_masked_rows_is_counted_there():
    lq, d = 8, 2  # rows 3 and 7 are fully masked: elements 6, 7, 14, 15
    out = t([0.0] * (lq * d))
    out[7], out[9], out[14] = float("nan"), float("nan"), float("inf")
    e = measure(torch, out, t([0.0] * (lq * d)), TOL, rows=(lq, d))
    assert (e["nonfinite_in_masked_rows"], e["first_nonfinite"], e["outside"]) == (2, 7, 3)
    assert in_masked_rows(torch, lq * d, (lq, d)).nonzero().flatten().tolist() == [6, 7, 14, 15]
    assert not in_masked_rows(torch, 4, None).any()


def test_all_zero_flags_the_output_and_the_oracle():
    e = measure(torch, t([0.0, 0.0]), t([0.0, 1.0]), TOL)
    assert e["all_zero"] and not e["oracle_all_zero"]
    e = measure(torch, t([0.0, 1.0]), t([0.0, 0.0]), TOL)
    assert not e["all_zero"] and e["oracle_all_zero"]
    assert not measure(torch, t([]), t([]), TOL)["all_zero"]


def test_a_gradients_atol_is_per_unit_of_its_largest_finite_oracle_value():
    ref, out = t([100.0, 0.0, float("nan")]), t([100.0, 0.05, float("nan")])
    assert measure(torch, out, ref, (1e-3, 0.0))["outside"] == 1
    assert measure(torch, out, ref, (1e-3, 0.0), gradient=True)["outside"] == 0  # 1e-3 * 100
    small = measure(torch, t([0.0, 0.05]), t([0.5, 0.0]), (1e-3, 0.0), gradient=True)
    assert small["outside"] == 2  # the scale is at least 1


def test_measure_gradients_names_each_and_gives_rows_to_dq_only():
    lq, d = 4, 1
    bad = t([0.0, 0.0, 0.0, float("nan")])  # row 3: fully masked
    got = measure_gradients(torch, (bad, bad, t([0.0] * 4)), (t([0.0] * 4),) * 3, TOL,
                            rows=(lq, d))
    assert sorted(got) == ["dk", "dq", "dv"]
    assert got["dq"]["nonfinite_in_masked_rows"] == 1
    assert got["dk"]["nonfinite_in_masked_rows"] == 0 and got["dk"]["nan_count"] == 1
    assert got["dv"]["outside"] == 0


def dropout_run(probs, p, dropped):
    out = probs / (1.0 - p)
    out[dropped] = 0.0
    return out.float()


def test_dropout_counts_the_dropped_and_checks_the_kept_against_the_rescaled_probability():
    probs = t([0.5, 0.25, 0.25, 1e-4, 0.0, 0.0])
    first = dropout_run(probs, 0.5, [1, 3])
    same = first.clone()
    other = dropout_run(probs, 0.5, [0])
    got = measure_dropout(torch, first, same, other, probs, 0.5, TOL)
    assert got["dropout"] == {"p": 0.5, "counted": 3, "dropped": 1, "differ_same_seed": 0,
                              "differ_other_seed": 3}
    assert (got["out"]["n"], got["out"]["outside"], got["out"]["first_mismatch"]) == (6, 0, -1)


def test_a_kept_value_that_is_not_the_rescaled_probability_is_outside():
    probs = t([0.5, 0.5])
    first = dropout_run(probs, 0.5, [])
    first[1] = 0.75
    first[0] = float("nan")
    got = measure_dropout(torch, first, first, first, probs, 0.5, TOL)["out"]
    assert (got["outside"], got["first_mismatch"], got["mismatch_got"]) == (2, 1, 0.75)
    assert (got["mismatch_expected"], got["nan_count"], got["first_nonfinite"]) == (1.0, 1, 0)


def grads(value=0.0):
    return [torch.full((4,), value, dtype=torch.float32) for _ in range(3)]


def test_identical_repeated_calls_differ_nowhere():
    r = RepeatCompare(torch, (1e-3, 1e-3))
    r.set_first(torch.ones(4), grads(1.0))
    r.later(torch.ones(4), grads(1.0))
    r.later(torch.ones(4), grads(1.0))
    assert r.stats == {"calls": 3, "differing_call": 0, "tensor": "", "differing": 0,
                       "max_abs_delta": 0.0, "nan_count": 0, "inf_count": 0}


def test_the_output_is_compared_bit_for_bit_and_the_first_differing_call_is_described():
    r = RepeatCompare(torch, (1e-3, 1e-3))
    r.set_first(torch.ones(4))
    r.later(torch.ones(4))
    one_ulp = torch.ones(4)
    one_ulp[2] = 1.0 + 2.0 ** -23  # one float32 ulp
    r.later(one_ulp)
    r.later(torch.full((4,), float("nan")))
    assert r.stats["calls"] == 4
    assert (r.stats["differing_call"], r.stats["tensor"], r.stats["differing"]) == (3, "out", 1)
    assert r.stats["max_abs_delta"] == pytest.approx(2.0 ** -23)
    assert r.stats["nan_count"] == 0


def test_gradients_are_compared_within_the_gradient_tolerance():
    r = RepeatCompare(torch, (1e-3, 0.0))
    r.set_first(torch.ones(4), grads(1.0))
    close = grads(1.0)
    close[0][1] += 5e-4
    r.later(torch.ones(4), close)
    assert r.stats["differing_call"] == 0
    far = grads(1.0)
    far[1][3] = 1.5
    r.later(torch.ones(4), far)
    assert (r.stats["differing_call"], r.stats["tensor"], r.stats["differing"]) == (3, "dk", 1)
    assert r.stats["max_abs_delta"] == pytest.approx(0.5)


def test_deterministic_algorithms_compare_gradients_bit_for_bit():
    r = RepeatCompare(torch, (1e-3, 0.0), bitwise_gradients=True)
    r.set_first(torch.ones(4), grads(1.0))
    close = grads(1.0)
    close[2][0] += 5e-4
    r.later(torch.ones(4), close)
    assert (r.stats["differing_call"], r.stats["tensor"], r.stats["differing"]) == (2, "dv", 1)


def test_masked_row_semantics_follow_the_torch_version():
    class Fake(object):
        __version__ = "2.4.1+rocm6.1"
    assert masked_row_semantics(Fake) == "nan"
    Fake.__version__ = "2.5.0"
    assert masked_row_semantics(Fake) == "zero"
    Fake.__version__ = "nightly"
    assert masked_row_semantics(Fake) == "zero"


def math_sdpa(q, k, v, mask, causal, group):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    with sdpa_kernel([SDPBackend.MATH]):
        return torch.nn.functional.scaled_dot_product_attention(
            q.double(), k.double(), v.double(),
            attn_mask=None if mask is None else (mask if mask.dtype == torch.bool
                                                 else mask.double()),
            is_causal=causal)


@pytest.mark.parametrize("keys", [
    {},
    {"causal": True, "lq": 8, "lkv": 16},
    {"mask": "bool"},
    {"mask": "additive", "mask_shape": "bhqk"},
    {"hq": 4, "hkv": 2, "mask": "bool", "mask_shape": "11qk"},
    {"mask": "bool", "masked_rows": True},
    {"window": 3},
])
def test_the_oracle_is_torchs_math_sdpa_in_float64(case, keys):
    c = case(**keys)
    q, k, v, mask = make_inputs(torch, c)
    want = math_sdpa(q, k, v, mask, c["causal"], c["hq"] // c["hkv"])
    got = oracle_attention(torch, c, q, k, v, mask)
    assert got.dtype == torch.float64
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("keys", [
    {"lq": 1, "lkv": 13},
    {"lq": 5, "lkv": 16, "hq": 4, "hkv": 2},
    {"lq": 15, "lkv": 16},
])
def test_a_bottom_right_oracle_is_math_sdpa_under_causal_lower_right(case, keys):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right
    c = case(causal="bottom_right", **keys)
    assert c["causal_bottom_right"]
    q, k, v, _ = make_inputs(torch, c)
    group = c["hq"] // c["hkv"]
    k64, v64 = (x.double().repeat_interleave(group, dim=1) for x in (k, v))
    with sdpa_kernel([SDPBackend.MATH]):
        want = torch.nn.functional.scaled_dot_product_attention(
            q.double(), k64, v64, attn_mask=causal_lower_right(c["lq"], c["lkv"]))
    got = oracle_attention(torch, c, q, k, v, None)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    # Not the top-left answer: the last query sees every key.
    top_left = oracle_attention(torch, case(causal=True, **keys), q, k, v, None)
    assert not torch.allclose(got, top_left, rtol=1e-3, atol=1e-3)
    dq, dk, dv = oracle_gradients(torch, c, q, k, v, None, torch.ones(q.shape, dtype=torch.float64))
    assert torch.isfinite(dq).all() and dk.abs().sum() > 0


def test_a_fully_masked_row_is_zero_or_nan_by_the_semantics(case):
    c = case(mask="bool", masked_rows=True, l=8)
    q, k, v, mask = make_inputs(torch, c)
    rows = fully_masked_rows(torch, c, mask)
    assert rows.reshape(-1).nonzero().flatten().tolist() == [3, 7]
    zero = oracle_attention(torch, c, q, k, v, mask)
    nan = oracle_attention(torch, c, q, k, v, mask, semantics="nan")
    assert not zero[:, :, 3].any() and torch.isnan(nan[:, :, 3]).all()
    assert torch.equal(zero[:, :, :3], nan[:, :, :3])


def test_the_oracle_gradients_are_float64_autograd_and_nan_in_masked_dq_rows(case):
    c = case(mask="bool", masked_rows=True, l=8, d=4)
    q, k, v, mask = make_inputs(torch, c)
    dout = torch.ones(q.shape, dtype=torch.float64)
    dq, dk, dv = oracle_gradients(torch, c, q, k, v, mask, dout)
    assert dq.dtype == torch.float64 and dq.numel() == q.numel()
    assert torch.allclose(dv.reshape(v.shape).sum(dim=2), torch.full((1, 2, 4), 6.0,
                                                                      dtype=torch.float64))
    dq_nan = oracle_gradients(torch, c, q, k, v, mask, dout, semantics="nan")[0]
    assert torch.isnan(dq_nan).sum() == 2 * 2 * 4  # rows 3 and 7 of two heads


def oracle_line(c, path=""):
    return {"case": c, "oracle": path}


def test_the_doctors_oracle_file_is_read_as_little_endian_float64(case, tmp_path):
    from sdpa_probe.oracle import load_oracle
    c = case(l=2, d=2, h=1)
    q, k, v, mask = make_inputs(torch, c)
    path = tmp_path / "oracle.bin"
    values = [0.5, -1.25, 1e-300, 2.0 ** 60]
    path.write_bytes(struct.pack("<4d", *values))
    assert load_oracle(torch, oracle_line(c, str(path)), q, k, v, mask).tolist() == values
    path.write_bytes(b"\0" * 8)
    with pytest.raises(RuntimeError, match="has 8 bytes, expected 32"):
        load_oracle(torch, oracle_line(c, str(path)), q, k, v, mask)


def test_without_a_file_or_under_nan_semantics_the_oracle_is_computed_here(case, tmp_path):
    from sdpa_probe.oracle import load_oracle
    c = case(l=4, d=2, h=1, mask="bool", masked_rows=True)
    q, k, v, mask = make_inputs(torch, c)
    own = oracle_attention(torch, c, q, k, v, mask).reshape(-1)
    assert torch.equal(load_oracle(torch, oracle_line(c), q, k, v, mask), own)
    path = tmp_path / "zeros.bin"  # the doctor's file: ignored for a masked_rows case under "nan"
    path.write_bytes(b"\0" * 8 * 8)
    got = load_oracle(torch, oracle_line(c, str(path)), q, k, v, mask, semantics="nan")
    assert torch.isnan(got).sum() == 2 and torch.equal(got[:6], own[:6])


def test_finite_numbers_turns_every_non_finite_float_into_none():
    from sdpa_probe.worker import finite_numbers
    assert finite_numbers({"out": {"max_abs_err": float("nan"), "n": 3, "all_zero": False},
                           "time_ms": float("inf"), "rel": 0.5}) == \
        {"out": {"max_abs_err": None, "n": 3, "all_zero": False}, "time_ms": None, "rel": 0.5}
