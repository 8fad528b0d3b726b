"""One worker run: hello, then begin -> inputs -> the forced backend -> oracle comparison ->
result for each case line, then bye; and the test hook that dumps a case's inputs."""

import json
import os
import statistics
import sys
import warnings

from .backends import Probe, add_canary, classify, import_torch
from .faults import (corrupt_output, matching_fault, parse_fault, planted_canary,
                     process_fault)
from .inputs import batch_form, make_inputs, make_upstream_gradient, torch_dtype
from .oracle import (load_oracle, masked_row_semantics, masked_rows_of, measure,
                     measure_dropout, measure_gradients, oracle_gradients)
from .protocol import (CANARY_FAILED_EXIT, Writer, finite_or_none, normalise_case, one_line,
                       parse_case_line, parse_variant, variant_environment)


def timing(times):
    if not times:
        return None, None, 0
    return statistics.median(times), min(times), len(times)


def run_snippet(torch, device, source, path, first_case):
    """Executes a recommendation's Python as printed, with q, k, v bound for its `with
    sdpa_kernel(...)` example: '' when it ran, else why not, one line."""
    c = first_case or {"dtype": "fp32"}
    try:
        shape = (1, 2, 16, 64)
        dt = torch_dtype(torch, c["dtype"])
        q, k, v = (torch.ones(shape, dtype=dt, device=device) for _ in range(3))
        scope = {"__name__": "__main__", "q": q, "k": k, "v": v}
        exec(compile(source, path, "exec"), scope)
        if device.startswith("cuda"):
            torch.cuda.synchronize(torch.device(device))
        return ""
    except BaseException as e:  # SystemExit included: the snippet must not end the worker
        return "the recommended Python raised %s" % one_line("%s: %s" % (type(e).__name__, e))


def run_worker(args, started):
    backend, flags = parse_variant(args["variant"])
    variant_name = args["variant"]
    verify = args.get("verify")
    if verify:  # a recommendation's re-run: the fault switch names it so
        variant_name = "verify:" + verify
    for key, value in variant_environment(flags).items():
        os.environ.setdefault(key, value)  # before torch reads them, once per process
    writer = Writer(args["results_fd"])
    fault = parse_fault(os.environ.get("SDPA_DOCTOR_TEST_FAULT", ""))

    torch, import_error = import_torch()

    with open(args["cases"], "r") as f:
        raw = [l for l in f.read().splitlines() if l.strip()]
    lines = []
    for number, text in enumerate(raw, 1):
        try:
            lines.append(parse_case_line(text))
        except Exception as e:
            sys.stderr.write("%s:%d: %s\n" % (args["cases"], number, e))
            return 2

    versions = {"python": "%d.%d.%d" % sys.version_info[:3]}
    facts = {"python_executable": sys.executable}
    probe = None
    unavailable = import_error
    if torch is not None:
        probe = Probe(torch, args["device"], backend, flags,
                      args.get("compile") if args.get("mode") == "compiled" else None)
        with warnings.catch_warnings(record=True) as startup:
            warnings.simplefilter("always")
            try:
                unavailable = probe.unavailable()  # first: it selects the variant's FA library
                versions, facts = probe.facts()
            except Exception as e:
                unavailable = one_line(e)
        if unavailable:
            for w in startup:
                unavailable += " | " + one_line(w.message)
    else:
        facts["torch"] = "missing"
    facts["started"] = started
    facts["variant_environment"] = ",".join(
        "%s=%s" % (k, os.environ.get(k, "")) for k in sorted(variant_environment(flags)))
    source = None
    if verify:
        import hashlib
        with open(args["snippet"], "rb") as f:
            source = f.read()
        facts["verify"] = verify
        facts["snippet_sha256"] = hashlib.sha256(source).hexdigest()
    writer.event("hello", worker="python", device=args["device"], variant=args["variant"],
                 versions=versions, facts=facts)
    if probe is None:
        return run_cases(writer, lines, probe, torch, unavailable, fault, variant_name,
                         args["device"])
    with probe.threads.serial():  # Probe.run takes the pool back for the SDPA calls
        broken = ""
        if source is not None and not unavailable:
            broken = run_snippet(torch, args["device"], source, args["snippet"],
                                 lines[0]["case"] if lines else None)
        return run_cases(writer, lines, probe, torch, unavailable, fault, variant_name,
                         args["device"], broken)


def checked_output(line, host, corrupt):
    """The forward's output, flat, after a planted corruption; an output of another shape than
    the case's is an error."""
    c = line["case"]
    shape = (c["b"], c["hq"], c["lq"], c["d"])
    if tuple(host.shape) != shape:
        raise RuntimeError("output has shape %s, expected %s" % (tuple(host.shape), shape))
    host = host.reshape(-1).clone()
    if corrupt:
        corrupt_output(corrupt, host, c)
    return host


def measure_output(torch, line, host, q, k, v, mask, corrupt):
    """A forward output's measure against the oracle, after a planted corruption."""
    host = checked_output(line, host, corrupt)
    ref = load_oracle(torch, line, q, k, v, mask, masked_row_semantics(torch))
    return measure(torch, host, ref, (line["atol"], line["rtol"]), masked_rows_of(line["case"]))


def measure_dropout_runs(torch, line, host, reruns, q, k, v, mask, corrupt):
    """A dropout case's three outputs measured against the probabilities (its oracle: V is the
    identity), after a planted corruption of the first."""
    host = checked_output(line, host, corrupt)
    probs = load_oracle(torch, line, q, k, v, mask, masked_row_semantics(torch))
    return measure_dropout(torch, host, reruns[0], reruns[1], probs, line["case"]["dropout"],
                           (line["atol"], line["rtol"]))


def measure_backward(torch, line, grads, q, k, v, mask, grad_out, corrupt):
    """dq, dk, dv measured against the float64 oracle's gradients."""
    got = [g.reshape(-1).clone() for g in grads]
    if corrupt:
        corrupt_output(corrupt, got[0], line["case"])
    want = oracle_gradients(torch, line["case"], q, k, v, mask, grad_out,
                            masked_row_semantics(torch))
    return measure_gradients(torch, got, want, line["gradient_tolerance"],
                             masked_rows_of(line["case"]))


def finite_numbers(measured):
    """The measures with every float that is not finite as None (JSON has no NaN)."""
    if isinstance(measured, dict):
        return {key: finite_numbers(value) for key, value in measured.items()}
    return finite_or_none(measured) if isinstance(measured, float) else measured


def run_cases(writer, lines, probe, torch, unavailable, faults, variant_name, device, broken=""):
    """Runs every case line and writes begin/result, then bye; the worker's exit code.
    `unavailable`: every case is `unsupported` with it; `broken`: every case is an `error`."""
    for line in lines:
        cid = line["id"]
        if not writer.event("begin", case=cid):
            return 1
        fault = matching_fault(faults, variant_name, cid, line["case"])
        hit = fault is not None
        in_backward = hit and fault["stage"] == "backward"
        forward_fault = fault["action"] if hit and not in_backward else None
        backward_fault = fault["action"] if in_backward else None
        if forward_fault:
            process_fault(forward_fault)
        backward = line["case"].get("backward", False)
        forward = []  # a backward case's forward measure, once its backward starts
        result = {"case": cid, "status": "error", "reason": "", "metrics": {},
                  "tolerance": {"atol": line["atol"], "rtol": line["rtol"]},
                  "backend_chosen": "", "warnings": []}
        if line["case"].get("masked_rows") and torch is not None:
            result["masked_rows"] = masked_row_semantics(torch)
        metrics = {"max_abs_err": None, "rel_l2_err": None, "frac_outside_tol": None,
                   "nan_count": 0, "inf_count": 0, "time_ms": None, "time_min_ms": None,
                   "timed_runs": 0}
        if unavailable:
            result["status"], result["reason"] = "unsupported", unavailable
        elif broken:
            result["status"], result["reason"] = "error", broken
        else:
            with warnings.catch_warnings(record=True) as captured:
                warnings.simplefilter("always")
                host = reruns = repeats = None
                q = k = v = mask = grad_out = None

                def entering_backward(output):
                    forward.append(measure_output(torch, line, output, q, k, v, mask,
                                                  forward_fault))
                    writer.event("phase", case=cid, phase="backward",
                                 measured=finite_numbers({"out": forward[0]}))
                    if backward_fault:
                        process_fault(backward_fault)

                try:
                    probe.new_case()
                    q, k, v, mask = make_inputs(torch, line["case"])
                    if backward:
                        grad_out = make_upstream_gradient(torch, line["case"])
                    host, times, chosen, grads, reruns, repeats = probe.run(
                        line, q, k, v, mask, grad_out, entering_backward)
                    result["backend_chosen"] = chosen
                except Exception as e:
                    texts = [str(w.message) for w in captured]
                    result["status"], result["reason"] = classify(e, texts)
                    if backward and forward:  # the doctor judges the measured forward
                        result["reason"] = "in backward: " + result["reason"]
                        result["measured"] = finite_numbers({"out": forward[0]})
                    elif backward:
                        result["directions"] = {"forward": result["status"]}
            result["warnings"] = []
            for w in captured:
                text = one_line(w.message)
                if text not in result["warnings"]:
                    result["warnings"].append(text)
            if host is not None:
                try:
                    if reruns is not None:
                        measured = measure_dropout_runs(torch, line, host, reruns, q, k, v,
                                                        mask, forward_fault)
                    else:
                        measured = {"out": forward[0] if forward else measure_output(
                            torch, line, host, q, k, v, mask, forward_fault)}
                    if backward:
                        measured.update(measure_backward(torch, line, grads, q, k, v, mask,
                                                         grad_out, backward_fault))
                    if repeats is not None:
                        measured["repeats"] = repeats
                    metrics["time_ms"], metrics["time_min_ms"], metrics["timed_runs"] = \
                        timing(times)
                    result["status"], result["measured"] = "measured", finite_numbers(measured)
                except Exception as e:
                    result["status"], result["reason"] = "error", one_line(e)
        result["metrics"] = {key: (finite_or_none(v) if isinstance(v, float) else v)
                             for key, v in metrics.items()}
        poisoned = add_canary(result, torch, device, not (unavailable or broken),
                              planted_canary(fault["action"]) if hit else None)
        if not writer.event("result", **result):
            return 1
        if poisoned:
            return CANARY_FAILED_EXIT  # no bye: the runner resumes the rest in a fresh worker
    writer.event("bye")
    return 0


def dump_inputs(case_json, path):
    """Test hook: the raw float32 values of q, k, v (and mask) for a case, concatenated."""
    import ctypes
    import torch
    c = normalise_case(json.loads(case_json))
    q, k, v, mask = make_inputs(torch, c)
    with open(path, "wb") as f:
        for t in [q, k, v] + ([batch_form(c, mask)] if mask is not None else []):
            t = t.to(torch.float32).contiguous().reshape(-1)
            f.write(ctypes.string_at(t.data_ptr(), t.numel() * 4))
