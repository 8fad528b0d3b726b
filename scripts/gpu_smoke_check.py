#!/usr/bin/env python3
"""Checks an sdpa-doctor report from a real-GPU smoke run (scripts/gpu-smoke.sh) and prints its
figures: every torch probe ran every variant on the device, the fused backends were measured
(on NVIDIA flash and mem_efficient must pass), the canary ran after the cases, the doctor's own
kernels (ref-math, ref-flash) were compiled for the device and passed every case they ran, and
the report validates against the schema. Standard library, plus jsonschema when --schema is given.
Exit 0 when every check passes, 1 otherwise, 2 for usage errors."""

import argparse
import json
import statistics
import sys

FAILURES = ("mismatch", "nonfinite", "error", "crash", "timeout")


def gpu_cells(report, device):
    return [r for r in report.get("results", [])
            if r.get("device") == device and r.get("probe") in ("libtorch", "python")]


def check_variants_ran(report, device, cells):
    problems = []
    workers = [w for w in report.get("workers", [])
               if w.get("device") == device and w.get("probe") in ("libtorch", "python")]
    if not workers:
        problems.append("no torch probe ran on %s" % device)
    for w in workers:
        key = (w["probe"], w["variant"])
        mine = [c for c in cells if (c["probe"], c["variant"]) == key]
        if w.get("available"):
            problems.append("%s %s did not run on %s: %s" % (key + (device, w["available"])))
        elif not mine or all(c["status"] == "skipped" for c in mine):
            problems.append("%s %s ran no case on %s" % (key + (device,)))
    return problems


def check_fused(cells, vendor):
    problems = []
    for backend in ("flash", "mem_efficient", "cudnn"):
        mine = [c for c in cells if c["variant"] == backend]
        if not mine:
            problems.append("no %s cells" % backend)
            continue
        statuses = [c["status"] for c in mine]
        if all(s == "unsupported" for s in statuses):
            if vendor == "nvidia" or backend != "cudnn":  # no cuDNN on ROCm
                problems.append("every %s cell is unsupported: %s" % (backend, mine[0]["reason"]))
        if vendor == "nvidia" and backend in ("flash", "mem_efficient"):
            bad = [c for c in mine if c["status"] in FAILURES]
            if bad or "pass" not in statuses:
                problems.append("%s must pass on NVIDIA: %d failing (%s)" % (
                    backend, len(bad), bad[0]["case_id"] + ": " + bad[0]["reason"] if bad else
                    "none passed"))
    return problems


def check_canary(cells):
    ran = [c for c in cells if c["status"] not in ("skipped",) and "canary" in c]
    if not ran:
        return ["no canary ran after any GPU case"]
    failed = [c for c in ran if c["canary"] != "ok"]
    missing = [c for c in cells if c["status"] in ("pass", "mismatch", "nonfinite") and
               "canary" not in c]
    out = ["no canary after %d case(s) that ran, e.g. %s %s %s" % (
        len(missing), missing[0]["probe"], missing[0]["variant"], missing[0]["case_id"])
        ] if missing else []
    return out + ["canary failed after %s %s %s: %s" % (c["probe"], c["variant"], c["case_id"],
                                                   c["canary"]) for c in failed]


def check_reference(report, device):
    """Our own kernels on the GPU: compiled at run time for it, each variant ran, none failed (a
    failure there is the doctor's own defect, never the card's or torch's)."""
    problems = []
    cells = [r for r in report.get("results", [])
             if r.get("device") == device and r.get("probe") == "reference"]
    workers = [w for w in report.get("workers", [])
               if w.get("device") == device and w.get("probe") == "reference"]
    for variant in ("ref-math", "ref-flash"):
        mine = [c for c in cells if c["variant"] == variant]
        ran = [c for c in mine if c["status"] not in ("skipped", "unsupported")]
        bad = [c for c in mine if c["status"] in FAILURES]
        if not mine:
            problems.append("no %s cells on %s" % (variant, device))
        elif not ran:
            problems.append("%s ran no case on %s: %s" % (variant, device, mine[0].get("reason", "")))
        if bad:
            problems.append("%s failed %d case(s) on %s, e.g. %s %s: %s" % (
                variant, len(bad), device, bad[0]["case_id"], bad[0]["status"], bad[0]["reason"]))
    if workers and not any(w.get("facts", {}).get("rtc_target") for w in workers):
        problems.append("no reference worker on %s said what its kernels were compiled for" % device)
    return problems


def reference_figures(report, device):
    seen = set()
    lines = []
    for w in report.get("workers", []):
        facts = w.get("facts", {})
        if w.get("device") != device or w.get("probe") != "reference" or not facts.get("rtc_target"):
            continue
        line = "  ours on %s: %s, %s by %s, compile %s ms" % (
            facts.get("gpu_device", "?"), facts.get("gpu_runtime", "?"), facts.get("rtc_target"),
            facts.get("rtc_compiler", "?"), facts.get("compile_ms", "?"))
        if line not in seen:
            seen.add(line)
            lines.append(line)
    return lines


def check_schema(report, schema_path):
    try:
        import jsonschema
    except ImportError:
        return ["cannot validate against the schema: no jsonschema module"]
    with open(schema_path) as f:
        schema = json.load(f)
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(report), key=str)
    return ["schema: %s at %s" % (e.message, "/".join(map(str, e.path))) for e in errors[:5]]


def figures(report, cells, wall_s):
    by_status = {}
    for c in cells:
        by_status[c["status"]] = by_status.get(c["status"], 0) + 1
    lines = ["cells on the GPU: %d (%s)" % (len(cells), ", ".join(
        "%s %d" % kv for kv in sorted(by_status.items())))]
    total_ms = report.get("timings", {}).get("total_ms")
    wall = "%s s" % wall_s if wall_s is not None else (
        "%.1f s" % (total_ms / 1000) if total_ms else "unknown")
    lines.append("wall time: %s" % wall)
    per = {}
    ours = [r for r in report.get("results", [])
            if r.get("device") == cells[0]["device"] and r.get("probe") == "reference"] if cells else []
    for c in cells + ours:
        t = c.get("metrics", {}).get("time_ms")
        if c["status"] == "pass" and isinstance(t, (int, float)):
            per.setdefault((c["probe"], c["variant"]), []).append(t)
    for (probe, variant), times in sorted(per.items()):
        lines.append("  %-8s %-28s %3d passed  median %.3f ms  sum %.3f ms" % (
            probe, variant, len(times), statistics.median(times), sum(times)))
    return lines


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", required=True)
    ap.add_argument("--vendor", choices=("nvidia", "amd"), required=True)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--schema")
    ap.add_argument("--wall-s")
    args = ap.parse_args(argv)
    try:
        with open(args.report) as f:
            report = json.load(f)
    except (OSError, ValueError) as e:
        print("gpu-smoke: cannot read the report %s: %s" % (args.report, e))
        return 1
    cells = gpu_cells(report, args.device)
    problems = check_variants_ran(report, args.device, cells) + check_fused(cells, args.vendor)
    problems += check_canary(cells)
    problems += check_reference(report, args.device)
    if args.schema:
        problems += check_schema(report, args.schema)
    for line in figures(report, cells, args.wall_s) + reference_figures(report, args.device):
        print("gpu-smoke: " + line)
    for p in problems:
        print("gpu-smoke: FAIL " + p)
    print("gpu-smoke: %s" % ("every check passed" if not problems else
                             "%d check(s) failed" % len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
