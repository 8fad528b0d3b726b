"""The probe's case-line reader and event writer (protocol v1). The golden lines both sides share
are tests/protocol/protocol_golden_test.py's."""
import json
import math
import os

import pytest

from sdpa_probe.protocol import (Writer, causal_offset, finite_or_none, normalise_case, one_line,
                                 parse_case_line, parse_variant, variant_environment)

TOLERANCES = {"tolerance": {"atol": 0.01, "rtol": 0.02},
              "gradient_tolerance": {"atol": 0.03, "rtol": 0.04}}


def line(**fields):
    j = {"v": 1, "id": "abc", "case": {"dtype": "bf16", "l": 16, "d": 8}}
    j.update(TOLERANCES)
    j.update(fields)
    return json.dumps(j)


def test_a_case_line_is_read_with_its_tolerances_and_defaults():
    got = parse_case_line(line())
    assert got["id"] == "abc"
    assert (got["atol"], got["rtol"]) == (0.01, 0.02)
    assert got["gradient_tolerance"] == (0.03, 0.04)
    assert (got["oracle"], got["warmup"], got["repeat"], got["budget_ms"]) == ("", 1, 3, 0)
    assert (got["case"]["dtype"], got["case"]["lq"], got["case"]["lkv"]) == ("bf16", 16, 16)


def test_a_case_line_takes_oracle_warmup_repeat_and_budget():
    got = parse_case_line(line(oracle="/tmp/o.bin", warmup=0, repeat=5, budget_ms=250))
    assert (got["oracle"], got["warmup"], got["repeat"], got["budget_ms"]) == \
        ("/tmp/o.bin", 0, 5, 250)
    assert parse_case_line(line(warmup=None, repeat=None))["repeat"] == 3


@pytest.mark.parametrize("text", [
    json.dumps([1]),
    line(v=2),
    line(id=""),
    line(budget_ms=-1),
    line(case={"colour": "red"}),
    line(case={"mask_shape": "qkq"}),
    line(case={"dtype": "fp64"}),
    line(gradient_tolerance=None),
    "not json",
])
def test_a_bad_case_line_is_refused(text):
    with pytest.raises((ValueError, KeyError, TypeError)):
        parse_case_line(text)


def test_normalise_case_resolves_aliases_layouts_and_the_mask_dtype():
    c = normalise_case({"dtype": "half", "h": 4, "l": 32, "mask": "add", "layout": "blhd",
                        "v_layout": "offset", "causal": "true", "dropout": 0.254})
    assert (c["dtype"], c["hq"], c["hkv"], c["lq"], c["lkv"]) == ("fp16", 4, 4, 32, 32)
    assert (c["mask"], c["mask_dtype"], c["causal"], c["dropout"]) == ("additive", "fp16", True,
                                                                        0.25)
    assert (c["q_layout"], c["k_layout"], c["v_layout"]) == ("transposed", "transposed", "offset")


def test_causal_names_its_alignment_and_bottom_right_needs_fewer_queries_than_keys():
    for value in (True, 1, "1", "true", "top_left"):
        c = normalise_case({"lq": 4, "lkv": 9, "causal": value})
        assert (c["causal"], c["causal_bottom_right"]) == (True, False), value
    c = normalise_case({"lq": 4, "lkv": 9, "causal": "bottom_right"})
    assert (c["causal"], c["causal_bottom_right"]) == (True, True)
    assert causal_offset(c) == 5
    assert normalise_case({"causal": False})["causal_bottom_right"] is False
    # At lq == lkv bottom-right is top-left, as the doctor reads it; past it, refused.
    square = normalise_case({"l": 8, "causal": "bottom_right"})
    assert (square["causal"], square["causal_bottom_right"], causal_offset(square)) == (True, False, 0)
    with pytest.raises(ValueError, match="needs lq <= lkv"):
        normalise_case({"lq": 9, "lkv": 8, "causal": "bottom_right"})


def test_a_window_makes_the_mask_bool():
    assert normalise_case({"window": 4})["mask"] == "bool"
    assert normalise_case({})["mask"] == "none"


def test_variants_and_their_environment():
    assert parse_variant("flash") == ("flash", [])
    assert parse_variant("flash[ck,experimental]") == ("flash", ["ck", "experimental"])
    for bad in ("flash[fast]", "flash[]", "fl ash"):
        with pytest.raises(ValueError):
            parse_variant(bad)
    assert variant_environment(["ck", "experimental"]) == {
        "TORCH_ROCM_FA_PREFER_CK": "1", "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL": "1"}
    assert variant_environment(["aotriton"]) == {"TORCH_ROCM_FA_PREFER_CK": "0"}


def read_lines(fd):
    os.close(fd[1])
    with os.fdopen(fd[0], "rb") as f:
        return [json.loads(x) for x in f.read().decode().splitlines()]


def test_the_writer_writes_one_versioned_line_per_event_and_non_finite_as_null():
    fd = os.pipe()
    w = Writer(fd[1])
    assert w.event("result", id="abc", max_abs_err=finite_or_none(float("nan")),
                   time_ms=finite_or_none(1.5), worst=finite_or_none(math.inf))
    assert w.event("done")
    assert read_lines(fd) == [
        {"v": 1, "event": "result", "id": "abc", "max_abs_err": None, "time_ms": 1.5,
         "worst": None},
        {"v": 1, "event": "done"}]


def test_the_writer_never_writes_nan_as_a_number():
    fd = os.pipe()
    with pytest.raises(ValueError):
        Writer(fd[1]).event("result", max_abs_err=float("nan"))
    assert read_lines(fd) == []


def test_the_writer_stops_after_a_failed_write():
    r, wfd = os.pipe()
    os.close(r)  # writing now fails (EPIPE; Python ignores SIGPIPE)
    w = Writer(wfd)
    assert not w.event("hello")
    assert not w.ok and not w.event("again")
    os.close(wfd)


def test_finite_or_none_and_one_line():
    assert [finite_or_none(x) for x in (None, 2, -math.inf, 0.5)] == [None, 2.0, None, 0.5]
    assert one_line("a\nb\r\nc") == "a b c"
    assert one_line("x" * 10, limit=4) == "xxxx..."
