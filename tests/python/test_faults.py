"""SDPA_DOCTOR_TEST_FAULT as the probe reads it: the same syntax and conditions as the C++
workers' parse_planted_fault (tests/e2e/*_e2e_test.cpp hold that side)."""
import pytest

from sdpa_probe.faults import matching_fault, parse_fault


def fires(spec, c, variant="math"):
    return matching_fault(parse_fault(spec), variant, "x", c) is not None


def refused(text):
    with pytest.raises(ValueError):
        parse_fault(text)
    return True


def test_a_spec_reads_its_items_and_defaults():
    (spec,) = parse_fault("variant=flash,case=abc,action=nan,when=causal")
    assert spec == {"variant": "flash", "case": "abc", "action": "nan",
                    "when": [("causal", "", 0)], "once": None, "stage": "forward"}


def test_specs_are_separated_by_semicolons_and_empty_text_is_none():
    assert [s["action"] for s in parse_fault("action=nan;;variant=math,action=abort")] == \
        ["nan", "abort"]
    assert parse_fault("") is None and parse_fault(None) is None


@pytest.mark.parametrize("text", ["action=explode", "variant=math", "colour=red,action=nan",
                                  "action", "stage=sideways,action=abort",
                                  "once=relative/path,action=nan", "when=nope,action=nan",
                                  "when=lq<=,action=nan", "when=lq=<16,action=nan",
                                  "when=lq<==16,action=nan", "when=dtype<=fp16,action=nan",
                                  "when=dtype=fp64,action=nan", "when=lq>x,action=nan",
                                  "when=v_layout=x,action=nan", "when=w_layout,action=nan"])
def test_a_bad_spec_is_refused(text):
    assert refused(text)


def test_variant_and_case_id_select(case):
    specs = parse_fault("variant=flash,case=abc,action=nan")
    assert matching_fault(specs, "flash", "abc", case()) is not None
    assert matching_fault(specs, "math", "abc", case()) is None
    assert matching_fault(specs, "flash", "other", case()) is None


def test_the_first_matching_spec_is_taken(case):
    specs = parse_fault("variant=flash,action=abort;action=nan")
    assert matching_fault(specs, "flash", "x", case())["action"] == "abort"
    assert matching_fault(specs, "math", "x", case())["action"] == "nan"


def test_once_fires_for_the_first_match_only(case, tmp_path):
    marker = tmp_path / "fired"
    specs = parse_fault("once=%s,action=nan" % marker)
    assert matching_fault(specs, "math", "x", case()) is not None
    assert marker.exists()
    assert matching_fault(specs, "math", "x", case()) is None


def test_stage_backward_matches_only_backward_cases():
    specs = parse_fault("variant=flash,stage=backward,action=abort")
    fwd = {"b": 1, "hq": 2, "hkv": 2, "lq": 4, "lkv": 4, "d": 8, "causal": False, "mask": "none",
           "layout": "contiguous", "dtype": "fp32", "backward": False}
    bwd = dict(fwd, backward=True)
    assert matching_fault(specs, "flash", "x", fwd) is None
    assert matching_fault(specs, "flash", "x", bwd)["stage"] == "backward"
    assert fires("when=bwd,action=nan", bwd) and not fires("when=bwd,action=nan", fwd)


def test_masked_rows_condition_selects_masked_rows_cases(case):
    assert fires("when=mrows,action=nan", case(mask="bool", masked_rows=True))
    assert not fires("when=mrows,action=nan", case(mask="bool"))


def test_bounds_take_or_equal():
    specs = parse_fault("variant=math,when=causal,when=lq<=16,action=perturb")

    def shape(lq, causal=True, d=32):
        return {"b": 1, "hq": 2, "hkv": 2, "lq": lq, "lkv": 77, "d": d, "causal": causal,
                "mask": "none", "layout": "contiguous", "dtype": "fp32"}

    got = [lq for lq in (1, 2, 8, 16, 17, 64) if matching_fault(specs, "math", "x", shape(lq))]
    assert got == [1, 2, 8, 16]
    assert matching_fault(specs, "math", "x", shape(8, causal=False)) is None
    at_least = parse_fault("when=d>=384,action=nan")
    assert matching_fault(at_least, "flash", "x", shape(1, d=384)) is not None
    assert matching_fault(at_least, "flash", "x", shape(1, d=383)) is None


V_ALONE = "variant=math,when=v_layout,when=q_layout=0,when=k_layout=0,action=perturb"


@pytest.mark.parametrize("layout", ["transposed", "strided", "offset"])
def test_v_alone_non_contiguous_is_selected(case, layout):
    assert fires(V_ALONE, case(v_layout=layout))


@pytest.mark.parametrize("keys", [{}, {"layout": "transposed"}, {"layout": "strided"},
                                  {"q_layout": "transposed"}, {"k_layout": "offset"},
                                  {"k_layout": "strided", "v_layout": "strided"}])
def test_v_alone_is_not_selected_otherwise(case, keys):
    assert not fires(V_ALONE, case(**keys))


def test_a_mask_dtype_of_its_own_is_selected(case):
    spec = "when=mask_dtype,action=nan"
    assert fires(spec, case(dtype="bf16", mask="additive", mask_dtype="fp32"))
    for keys in ({"dtype": "bf16", "mask": "additive"}, {"mask": "additive", "mask_dtype": "fp32"},
                 {"dtype": "bf16", "mask": "bool"}, {"dtype": "bf16"}):
        assert not fires(spec, case(**keys)), keys


def test_mask_shape_window_and_large_conditions(case):
    spec = "when=mask_shape=2,when=window>=4,when=large,action=nan"
    assert fires(spec, case(mask_shape="11qk", window=4, large=True))
    assert not fires(spec, case(mask_shape="11qk", window=3, large=True))
    assert not fires(spec, case(mask_shape="b1qk", window=4, large=True))


def test_the_dropout_condition_is_dropout_p_in_hundredths(case):
    assert fires("when=dropout,action=perturb", case(dropout=0.1))
    assert not fires("when=dropout,action=perturb", case())
    assert not fires("when=dropout>=30,action=perturb", case(dropout=0.25))
    assert fires("when=dropout>=30,action=perturb", case(dropout=0.5))


def test_gqa_dtype_and_transposed_conditions(case):
    assert fires("when=gqa,action=nan", case(hq=4, hkv=2))
    assert not fires("when=gqa,action=nan", case())
    assert fires("when=dtype=half,action=nan", case(dtype="fp16"))
    assert not fires("when=dtype=fp16,action=nan", case(dtype="bf16"))
    assert fires("when=transposed,action=nan", case(layout="transposed"))
    assert not fires("when=transposed,action=nan", case(layout="transposed", v_layout="strided"))


def test_the_bottom_right_condition_selects_causal_aligned_bottom_right(case):
    assert fires("when=bottom_right,action=perturb", case(lq=4, lkv=9, causal="bottom_right"))
    assert not fires("when=bottom_right,action=perturb", case(lq=4, lkv=9, causal=True))
    assert not fires("when=bottom_right,action=perturb", case(lq=4, lkv=9))
    # At lq == lkv the case is top-left.
    assert not fires("when=bottom_right,action=perturb", case(l=8, causal="bottom_right"))
    assert fires("when=causal,action=perturb", case(lq=4, lkv=9, causal="bottom_right"))
    assert fires("when=bottom_right=0,action=perturb", case(lq=4, lkv=9, causal=True))


def test_corrupt_output_hits_the_middle_or_a_fully_masked_row(torch, case):
    from sdpa_probe.faults import corrupt_output
    host = torch.zeros(10, dtype=torch.float64)
    corrupt_output("perturb", host, case())
    assert host.tolist() == [0.0] * 5 + [0.5] + [0.0] * 4
    c = case(l=8, d=4, mask="bool", masked_rows=True)
    host = torch.ones(32, dtype=torch.float64)
    corrupt_output("nan", host, c)
    assert torch.isnan(host).nonzero().flatten().tolist() == [12]  # row 3, first element
    corrupt_output("zeros", host, c)
    assert not host.any()


def test_planted_canary_only_for_poison_and_zeros():
    from sdpa_probe.faults import planted_canary
    assert planted_canary("poison").startswith("failed: ")
    assert "hipErrorInvalidValue" in planted_canary("zeros")
    assert planted_canary("nan") is None
