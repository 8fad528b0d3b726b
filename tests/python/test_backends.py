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
