#!/usr/bin/env python3
"""Which stages of scripts/test.sh run each test, from a build tree's CTest labels.

    scripts/test-stages.py BUILD_DIR          (a tree with every test binary built: stage 1's)

Prints Markdown: the count per stage, and a line for every test that runs in fewer stages than
before the stages were split by label (when stages 2 and 3 ran every test but `setup` and
`wheel`), with the stages that still run it. The selections are scripts/test.sh's own
(`ctest -L`/`-LE` with the label expressions below); keep the two in step.
"""
import json
import re
import subprocess
import sys

STAGES = {  # stage -> (its name, whether a test with these labels runs there)
    1: ("default build", lambda labels: "slow" not in labels),
    2: ("minimal build (no LibTorch)", lambda labels: "libtorch" in labels),
    3: ("asan build", lambda labels: not labels & {"torch", "setup", "wheel", "package"}),
}
BEFORE = {1: lambda labels: True, 2: lambda labels: not labels & {"setup", "wheel"},
          3: lambda labels: not labels & {"setup", "wheel"}}


def tests_of(build_dir):
    out = subprocess.run(["ctest", "--test-dir", build_dir, "--show-only=json-v1"],
                         capture_output=True, text=True, check=True).stdout
    for test in json.loads(out)["tests"]:
        labels = set()
        for prop in test.get("properties", []):
            if prop["name"] == "LABELS":
                labels = set(prop["value"])
        # A parameterised GoogleTest name carries its parameter's bytes: keep the name.
        yield re.sub(r"\s+# GetParam\(\).*$", "", test["name"]), labels


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/test-stages.py BUILD_DIR")
    tests = sorted(tests_of(sys.argv[1]))
    print("| stage | tests before | tests now |\n|---|---|---|")
    for stage, (name, runs) in STAGES.items():
        before = sum(1 for _, labels in tests if BEFORE[stage](labels))
        now = sum(1 for _, labels in tests if runs(labels))
        print(f"| {stage}. {name} | {before} | {now} |")
    print("\nTests that run in fewer stages now, and the stages that still run them:\n")
    for name, labels in tests:
        now = [s for s, (_, runs) in STAGES.items() if runs(labels)]
        before = [s for s, runs in BEFORE.items() if runs(labels)]
        if len(now) < len(before):
            where = ", ".join(str(s) for s in now) or "none (SDPA_DOCTOR_TEST_SLOW=1 adds it to 1)"
            print(f"- `{name}`: stages {where} (was {', '.join(str(s) for s in before)})")


if __name__ == "__main__":
    main()
