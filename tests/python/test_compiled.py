"""Compiled cells: the worker's --mode and --compile flags, the server's warm-up flag, and SDPA
run through torch.compile(fullgraph=True, dynamic=False) with the mask an argument, forward and
backward, one Dynamo reset per case."""
import pytest

from sdpa_probe.backends import Probe
from sdpa_probe.inputs import make_inputs, make_upstream_gradient
from sdpa_probe.main import parse_args, parse_serve

BASE = ["--device", "cpu", "--variant", "flash", "--results-fd", "3", "--cases", "c.jsonl"]


def test_a_worker_is_eager_unless_told_compiled_and_compiles_with_aot_eager_by_default():
    assert parse_args(BASE)["mode"] == "eager"
    args = parse_args(BASE + ["--mode", "compiled"])
    assert (args["mode"], args["compile"]) == ("compiled", "aot_eager")
    assert parse_args(BASE + ["--mode", "compiled", "--compile", "inductor"])["compile"] == "inductor"


@pytest.mark.parametrize("extra", [["--mode", "jit"], ["--mode", "compiled", "--compile", "tvm"],
                                   ["--compile", "inductor"]])
def test_a_bad_mode_or_backend_is_refused(extra):
    with pytest.raises(ValueError):
        parse_args(BASE + extra)


def test_the_server_warms_dynamo_only_when_told():
    plain = {"path": "s", "preload_backward": False, "preload_causal_bias": False,
             "preload_compile": None, "compiled_path": None}
    assert parse_serve(["--serve", "s"]) == plain
    assert parse_serve(["--serve", "s", "--preload-backward", "--preload-causal-bias",
                        "--preload-compile", "aot_eager", "c"]) == \
        dict(plain, preload_backward=True, preload_causal_bias=True, preload_compile="aot_eager",
             compiled_path="c")
    assert parse_serve(["--serve", "s", "--preload-compile", "tvm", "c"]) is None
    assert parse_serve(["--serve", "s", "--preload-compile", "aot_eager"]) is None  # no socket
    assert parse_serve(BASE) is None


def line_of(case, grad=False):
    return {"id": "x", "case": case, "atol": 1e-5, "rtol": 1e-5,
            "gradient_tolerance": (1e-4, 1e-4), "oracle": "", "warmup": 1, "repeat": 2,
            "budget_ms": 0}


@pytest.mark.parametrize("keys", [{"causal": True}, {"mask": "additive"}, {"hq": 4, "hkv": 2},
                                  {"causal": True, "backward": True}])
def test_a_compiled_call_gives_what_the_eager_call_gives(torch, case, keys):
    if not callable(getattr(torch, "compile", None)):
        pytest.skip("no torch.compile")
    c = case(**keys)
    results = []
    for compile_backend in (None, "aot_eager"):
        probe = Probe(torch, "cpu", "math", [], compile_backend)
        probe.new_case()
        q, k, v, mask = make_inputs(torch, c)
        grad_out = make_upstream_gradient(torch, c) if c.get("backward") else None
        seen = []
        host, times, chosen, grads, reruns, repeats = probe.run(
            line_of(c), q, k, v, mask, grad_out, lambda out: seen.append(out))
        results.append((host, grads))
        assert len(times) == 2
    (eager, eager_grads), (compiled, compiled_grads) = results
    assert torch.allclose(eager, compiled, atol=1e-6)
    if c.get("backward"):  # the backward ran through the compiled function too
        for a, b in zip(eager_grads, compiled_grads):
            assert torch.allclose(a, b, atol=1e-5)


def test_many_shapes_in_one_worker_never_hit_the_recompile_limit(torch, case):
    if not callable(getattr(torch, "compile", None)):
        pytest.skip("no torch.compile")
    probe = Probe(torch, "cpu", "math", [], "aot_eager")
    for l in range(8, 8 + 12):  # more distinct shapes than Dynamo's recompile limit (8)
        c = case(l=l)
        probe.new_case()
        q, k, v, mask = make_inputs(torch, c)
        probe.run(line_of(c), q, k, v, mask)


def test_a_torch_without_compile_fails_the_compiled_cell(torch, case, monkeypatch):
    probe = Probe(torch, "cpu", "math", [], "aot_eager")
    monkeypatch.delattr(torch, "compile", raising=False)
    with pytest.raises(RuntimeError, match="no torch.compile"):
        probe.attention({"dropout_p": 0.0, "is_causal": False})


def test_a_graph_break_is_an_error_even_where_its_words_read_as_a_refusal(torch):
    from sdpa_probe.backends import classify
    unsupported = torch._dynamo.exc.Unsupported
    try:
        exc = unsupported("Unsupported: torch.* op returned non-Tensor")
    except TypeError:  # another constructor in another torch
        pytest.skip("cannot build a Dynamo Unsupported here")
    assert classify(exc, [])[0] == "error"
