"""Which failures are a backend's refusal (unsupported) and which an error: the texts of
data/backend_refusals.json, the one list both workers read."""
import json
import os
import shutil

import pytest

from sdpa_probe import backends

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REFUSALS_FILE = os.path.join(SOURCE_DIR, "data", "backend_refusals.json")


@pytest.fixture
def refusals(monkeypatch):
    with open(REFUSALS_FILE, encoding="utf-8") as f:
        texts = tuple(json.load(f)["refusals"])
    monkeypatch.setattr(backends, "REFUSALS", texts)
    return texts


@pytest.mark.parametrize("exc", [
    RuntimeError("No available kernel. Aborting execution."),
    RuntimeError("FlashAttention only supports head dimension at most 256"),
    ValueError("Expected query, key and value to all be of dtype: {Half, BFloat16}"),
    RuntimeError("mem_efficient attention has not been built for this GPU"),
])
def test_a_refusal_text_is_unsupported(refusals, exc):
    status, reason = backends.classify(exc, [])
    assert status == "unsupported"
    assert reason == "%s: %s" % (type(exc).__name__, exc)


def test_any_other_failure_is_an_error(refusals):
    assert backends.classify(RuntimeError("CUDA error: an illegal memory access"), []) == \
        ("error", "RuntimeError: CUDA error: an illegal memory access")


def test_a_refusal_in_a_captured_warning_is_unsupported_and_the_warnings_join_the_reason(
        refusals):
    status, reason = backends.classify(
        RuntimeError("failed"),
        ["Flash attention does not support\nthis mask", "another"])
    assert status == "unsupported"
    assert reason == "RuntimeError: failed | Flash attention does not support this mask | another"


def test_a_multi_line_message_is_one_line(refusals):
    status, reason = backends.classify(RuntimeError("first\nsecond"), [])
    assert (status, reason) == ("error", "RuntimeError: first second")


def test_the_refusals_are_read_beside_the_package(monkeypatch, tmp_path):
    package = tmp_path / "sdpa_probe"
    package.mkdir()
    shutil.copy(REFUSALS_FILE, str(tmp_path / "backend_refusals.json"))
    monkeypatch.setattr(backends, "__file__", str(package / "backends.py"))
    assert backends.load_refusals()[0] == "No available kernel"


def test_without_the_list_every_failure_is_an_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(backends, "__file__", str(tmp_path / "sdpa_probe" / "backends.py"))
    assert backends.load_refusals() == ()
    assert "cannot read" in capsys.readouterr().err
    monkeypatch.setattr(backends, "REFUSALS", ())
    assert backends.classify(RuntimeError("No available kernel"), [])[0] == "error"


def test_a_bottom_right_case_passes_a_causal_lower_right_bias_as_models_do(torch):
    from sdpa_probe.protocol import normalise_case
    from torch.nn.attention.bias import CausalBias, CausalVariant
    c = normalise_case({"lq": 3, "lkv": 7, "causal": "bottom_right", "hq": 4, "hkv": 2})
    kwargs = backends.sdpa_kwargs(torch, c, None, True)
    assert isinstance(kwargs["attn_mask"], CausalBias)
    assert kwargs["attn_mask"].variant == CausalVariant.LOWER_RIGHT
    assert (kwargs["is_causal"], kwargs["enable_gqa"]) == (False, True)
    # For the dispatcher's choice: the bool mask it stands for.
    mask = backends.sdpa_kwargs(torch, c, None, False, device="cpu")["attn_mask"]
    assert torch.equal(mask, torch.ones(3, 7, dtype=torch.bool).tril(4))
    assert "enable_gqa" not in backends.sdpa_kwargs(torch, c, None, False)
    top_left = normalise_case({"lq": 3, "lkv": 7, "causal": True})
    assert backends.sdpa_kwargs(torch, top_left, None, False) == {
        "attn_mask": None, "dropout_p": 0.0, "is_causal": True}


def test_a_torch_without_causal_lower_right_refuses_a_bottom_right_case(torch, monkeypatch,
                                                                          refusals):
    import builtins
    from sdpa_probe.protocol import normalise_case
    real_import = builtins.__import__

    def no_bias(name, *args, **kwargs):
        if name == "torch.nn.attention.bias":
            raise ImportError("No module named 'torch.nn.attention.bias'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_bias)
    c = normalise_case({"lq": 1, "lkv": 7, "causal": "bottom_right"})
    with pytest.raises(RuntimeError) as raised:
        backends.sdpa_kwargs(torch, c, None, False)
    status, reason = backends.classify(raised.value, [])
    assert status == "unsupported"
    assert "causal_lower_right" in reason
