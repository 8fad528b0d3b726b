#!/usr/bin/env python3
"""The golden lines of protocol v1 (tests/protocol/golden), from the Python probe's side: its
writer writes the same event lines for the same fields, and its reader takes the doctor's case
lines (and refuses the ones the doctor refuses). protocol_test.cpp holds the C++ side.

    protocol_golden_test.py SDPA_PROBE_PACKAGE GOLDEN_DIR

The Python writer spaces its JSON as json.dumps does and keeps its fields in the order it builds
them; the doctor's writer is compact with sorted keys. The lines are compared in that one
canonical form: the same objects, the same values, the same numbers as text."""
import importlib
import json
import math
import os
import sys


def load_probe(path):
    """The probe package's protocol module; `path` is the package folder (no torch needed)."""
    sys.dont_write_bytecode = True  # nothing written into the build tree's data directory
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    return importlib.import_module("sdpa_probe.protocol")


def canonical(line):
    return json.dumps(json.loads(line), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def golden(directory, name):
    with open(os.path.join(directory, name), encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def written(probe, events):
    """What probe.Writer writes for each (name, fields), as lines."""
    read_fd, write_fd = os.pipe()
    writer = probe.Writer(write_fd)
    for name, fields in events:
        assert writer.event(name, **fields), "the writer failed on %s" % name
    os.close(write_fd)
    data = b""
    while True:
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        data += chunk
    os.close(read_fd)
    return data.decode("utf-8").splitlines()


def check_events(probe, directory, failures):
    lines = golden(directory, "events.jsonl")
    events = []
    for line in lines:
        obj = json.loads(line)
        # What a worker passes to Writer.event: all but "v" and "event", the metrics through
        # finite_or_none as run_cases passes them.
        fields = {k: v for k, v in obj.items() if k not in ("v", "event")}
        if obj["event"] == "result":
            fields["metrics"] = {k: (probe.finite_or_none(v) if isinstance(v, float) else v)
                                 for k, v in fields["metrics"].items()}
        events.append((obj["event"], fields))
    out = written(probe, events)
    if len(out) != len(lines):
        failures.append("wrote %d lines for %d golden events" % (len(out), len(lines)))
    for want, got in zip(lines, out):
        if canonical(got) != want:
            failures.append("event written as\n  %s\nnot\n  %s" % (canonical(got), want))
    # A non-finite metric is written as null, as the doctor's writer writes it.
    nan = written(probe, [("result", {"case": "c", "metrics": {
        "time_ms": probe.finite_or_none(float("nan")),
        "max_abs_err": probe.finite_or_none(math.inf)}})])
    metrics = json.loads(nan[0])["metrics"]
    if metrics != {"time_ms": None, "max_abs_err": None}:
        failures.append("non-finite metrics written as %r" % metrics)


def check_case_lines(probe, directory, failures):
    for line in golden(directory, "case_lines.jsonl"):
        j = json.loads(line)
        try:
            parsed = probe.parse_case_line(line)
        except Exception as e:  # noqa: BLE001 - any refusal is the failure reported
            failures.append("the probe refused a golden case line: %s: %s" % (e, line))
            continue
        # Every key the doctor wrote, as it wrote it; the probe adds the defaults of the rest.
        if parsed["case"].get("causal_bottom_right"):  # the alignment, as the doctor writes it
            parsed["case"]["causal"] = "bottom_right"
        parsed["case"] = {key: parsed["case"][key] for key in j["case"]}
        want = {"id": j["id"], "case": j["case"], "atol": j["tolerance"]["atol"],
                "rtol": j["tolerance"]["rtol"],
                "gradient_tolerance": (j["gradient_tolerance"]["atol"],
                                       j["gradient_tolerance"]["rtol"]),
                "oracle": j["oracle"] or "",
                "warmup": j["warmup"], "repeat": j["repeat"], "budget_ms": j.get("budget_ms", 0)}
        if parsed != want:
            failures.append("case line read as\n  %r\nnot\n  %r" % (parsed, want))
    for line in golden(directory, "case_lines_refused.jsonl"):
        try:
            probe.parse_case_line(line)
        except (ValueError, KeyError, TypeError):
            continue
        failures.append("the probe took a case line the doctor refuses: %s" % line)


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    probe = load_probe(argv[1])
    failures = []
    check_events(probe, argv[2], failures)
    check_case_lines(probe, argv[2], failures)
    for f in failures:
        print("FAIL: " + f)
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
