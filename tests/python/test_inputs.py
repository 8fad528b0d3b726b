"""The deterministic inputs of a case (bit for bit the C++ workers'; the cross-language check is
tests/workers/probes_e2e_test.cpp's PythonWorker.InputsAreBitExactWithCore): shapes, dtypes,
masks and layouts."""
import pytest

torch = pytest.importorskip("torch")

from sdpa_probe.inputs import (INPUT_CHUNK, bits, fill_tensor, hash32_int,  # noqa: E402
                               input_key, laid_out, make_inputs, make_upstream_gradient,
                               mask_row_width, place_inputs)


def test_the_hash_of_a_tensor_is_the_hash_of_each_element():
    assert bits(torch, 0, 5).tolist() == [hash32_int(i) for i in range(5)]
    wraps = (0xFFFFFFFE, 0xFFFFFFFF, 0)
    assert bits(torch, wraps[0], 3).tolist() == [hash32_int(k) for k in wraps]
    assert input_key(0, 0) != input_key(0, 1) != input_key(1, 1)


def test_inputs_are_the_same_every_time_and_differ_by_seed(case):
    first = make_inputs(torch, case(mask="additive"))
    again = make_inputs(torch, case(mask="additive"))
    other = make_inputs(torch, case(mask="additive", seed=1))
    for a, b, c in zip(first, again, other):
        assert torch.equal(a, b)
        assert not torch.equal(a, c)


def test_values_are_in_range_and_q_k_v_differ(case):
    q, k, v, mask = make_inputs(torch, case())
    assert mask is None
    assert q.abs().max() <= 4.0 and k.abs().max() <= 1.0 and v.abs().max() <= 1.0
    assert not torch.equal(q / 4.0, k)
    large_q = make_inputs(torch, case(large=True))[0]
    assert torch.equal(large_q, q * 16.0)  # powers of two: exactly the same units


@pytest.mark.parametrize("dtype, torch_dtype", [("fp16", "float16"), ("bf16", "bfloat16"),
                                                ("fp32", "float32")])
def test_shapes_and_dtypes_follow_the_case(case, dtype, torch_dtype):
    c = case(dtype=dtype, b=2, hq=4, hkv=2, lq=5, lkv=7, d=8)
    q, k, v, _ = make_inputs(torch, c)
    assert (q.shape, k.shape, v.shape) == ((2, 4, 5, 8), (2, 2, 7, 8), (2, 2, 7, 8))
    assert {q.dtype, k.dtype, v.dtype} == {getattr(torch, torch_dtype)}
    assert make_upstream_gradient(torch, c).shape == (2, 4, 5, 8)


def test_a_lower_precision_input_is_the_fp32_one_rounded(case):
    q32 = make_inputs(torch, case())[0]
    q16 = make_inputs(torch, case(dtype="fp16"))[0]
    assert torch.equal(q16, q32.to(torch.float16))


def test_filling_in_chunks_equals_filling_at_once():
    key = input_key(3, 1)
    n = INPUT_CHUNK + 5
    whole = fill_tensor(torch, torch.float32, key, n, 1.0)
    assert whole.numel() == n
    tail = fill_tensor(torch, torch.float32, key, 5, 1.0)
    assert torch.equal(whole[:5], tail)


@pytest.mark.parametrize("mask_shape, shape", [("b1qk", (2, 1, 4, 6)), ("bhqk", (2, 3, 4, 6)),
                                               ("11qk", (1, 1, 4, 6)), ("qk", (4, 6))])
def test_the_mask_has_the_shape_sdpa_is_given(case, mask_shape, shape):
    mask = make_inputs(torch, case(b=2, h=3, lq=4, lkv=6, mask="bool", mask_shape=mask_shape))[3]
    assert tuple(mask.shape) == shape and mask.dtype == torch.bool
    if mask_shape == "bhqk":
        assert torch.equal(mask[:, 0], mask[:, 2])  # the same for every head


def test_a_bool_mask_keeps_the_first_key_of_every_row(case):
    mask = make_inputs(torch, case(mask="bool", l=32))[3]
    assert mask[..., 0].all() and not mask.all()


def test_an_additive_mask_is_in_its_own_dtype_and_non_positive(case):
    mask = make_inputs(torch, case(dtype="bf16", mask="additive", mask_dtype="fp32"))[3]
    assert mask.dtype == torch.float32
    assert (mask <= 0).all() and (mask >= -4).all()


def test_masked_rows_mask_every_fourth_row_from_row_3(case):
    mask = make_inputs(torch, case(mask="bool", l=12, masked_rows=True))[3]
    assert [r for r in range(12) if not mask[0, 0, r].any()] == [3, 7, 11]
    additive = make_inputs(torch, case(mask="additive", l=8, masked_rows=True))[3]
    assert torch.isneginf(additive[0, 0, 3]).all() and not torch.isneginf(additive[0, 0, 2]).all()


def test_a_window_keeps_a_band_and_a_row_without_keys_keeps_the_last():
    from sdpa_probe.inputs import window_mask
    from sdpa_probe.protocol import normalise_case
    band = window_mask(torch, normalise_case({"lq": 4, "lkv": 4, "window": 2})).int().tolist()
    assert band == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    wide = window_mask(torch, normalise_case({"lq": 2, "lkv": 6, "window": 1}))
    assert wide.int().tolist() == [[1, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0]]


def test_dropout_cases_take_the_identity_as_v(case):
    v = make_inputs(torch, case(dropout=0.25, l=8, d=8))[2]
    assert torch.equal(v[0, 1], torch.eye(8))


def test_layouts_keep_the_values_and_change_the_strides():
    t = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    transposed = laid_out(t, "transposed")
    strided = laid_out(t, "strided")
    offset = laid_out(t, "offset")
    for x in (transposed, strided, offset):
        assert torch.equal(x, t)
    assert transposed.stride() == (60, 5, 15, 1)
    assert strided.stride() == (120, 40, 10, 1) and torch.isnan(strided.as_strided((1,), (1,), 5))
    assert offset.storage_offset() == 1 and offset.is_contiguous()
    assert laid_out(t, "contiguous") is t


def test_a_strided_mask_rows_stride_is_no_multiple_of_16(case):
    c = case(lkv=32, mask="bool", mask_layout="strided")
    assert mask_row_width(c) == 33
    q, k, v, mask = place_inputs(torch, c, *make_inputs(torch, c), device="cpu")
    assert mask.stride()[-2] == 33 and not mask.is_contiguous()


def test_each_tensor_is_placed_in_its_own_layout(case):
    c = case(layout="transposed", v_layout="offset")
    q, k, v, _ = place_inputs(torch, c, *make_inputs(torch, c), device="cpu")
    assert not q.is_contiguous() and not k.is_contiguous()
    assert v.is_contiguous() and v.storage_offset() == 1
