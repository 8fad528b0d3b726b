#!/usr/bin/env python3
"""Writes a fixture fleet: N varied sdpa-doctor reports made from one template report.

Every node gets its own hostname (node-01, ...), start time and timings. The first nodes listed
by --odd run an older GPU driver and fail every case of --fail-variant with --fail-status; on the
others those cases pass. A fact that varies without separating anything (the kernel, alternating)
is there so that an explanation must be the driver, not whatever differs.

--bad also writes one of each bad input: a truncated report, a JSON that is no report, a
directory and a report with a newer schema.
--scale K repeats each result K times with distinct case ids (report size of a full suite).
Standard library only.
"""
import argparse
import copy
import json
import os


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--template", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--odd", default="", help="comma-separated node numbers that fail, e.g. 7,12")
    ap.add_argument("--fail-variant", default="flash[ck]")
    ap.add_argument("--fail-status", default="crash")
    ap.add_argument("--good-driver", default="6.10.5")
    ap.add_argument("--odd-driver", default="6.8.0")
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--bad", action="store_true")
    a = ap.parse_args()

    with open(a.template) as f:
        template = json.load(f)
    odd = {int(x) for x in a.odd.split(",") if x}
    os.makedirs(a.out, exist_ok=True)
    width = max(2, len(str(a.nodes)))
    results = template["results"]
    if a.scale > 1:
        scaled = []
        for k in range(a.scale):
            for r in results:
                r = copy.deepcopy(r)
                r["case_id"] = "%s-s%d" % (r["case_id"], k)
                scaled.append(r)
        results = scaled
    for n in range(1, a.nodes + 1):
        doc = copy.deepcopy(template)
        doc["results"] = results if n == 1 else copy.deepcopy(results)
        name = "node-%0*d" % (width, n)
        doc["host"]["hostname"] = name
        doc["host"]["kernel"] = "6.8.0-45-generic" if n % 2 else "6.8.0-47-generic"
        doc["started_at"] = "2026-09-14T%02d:%02d:00Z" % (9 + n // 60 % 10, n % 60)
        for d in doc["inventory"]["devices"]:
            d["driver_version"] = a.odd_driver if n in odd else a.good_driver
        for r in doc["results"]:
            if r["variant"] != a.fail_variant:
                if r["status"] == "pass" and r["metrics"].get("time_ms") is not None:
                    r["metrics"]["time_ms"] *= 1.0 + (n % 7) / 100.0
                continue
            if n in odd:
                r["status"] = a.fail_status
                r["reason"] = "worker died by SIGABRT while running the case"
            else:
                r["status"] = "pass"
                r["reason"] = ""
                r["process_end"] = None
        with open(os.path.join(a.out, name + ".json"), "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
    if a.bad:
        text = json.dumps(template, indent=2)
        with open(os.path.join(a.out, "truncated.json"), "w") as f:
            f.write(text[: len(text) // 2])
        with open(os.path.join(a.out, "not-a-report.json"), "w") as f:
            json.dump({"name": "something else", "results": []}, f)
        os.makedirs(os.path.join(a.out, "a-directory.json"), exist_ok=True)
        newer = copy.deepcopy(template)
        newer["schema"] = "sdpa-doctor/report/v2"
        with open(os.path.join(a.out, "newer-schema.json"), "w") as f:
            json.dump(newer, f)


if __name__ == "__main__":
    main()
