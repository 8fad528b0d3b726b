#!/usr/bin/env python3
"""`repro` over hostile reports, through the real binary: the script it writes holds only the
template's statements, whatever a report says.

  repro_script_test.py DOCTOR PYTHON

1. A real check (reference probe, one tiny case, a tolerance nobody meets) gives a report.
2. A corpus of hostile copies of it: free text (reason, signatures, signal name, hostname) carrying
   quotes, newlines, line separators, placeholders and Python statements gives a script each;
   every script parses with `ast`, and with its constants folded its tree is the benign script's
   tree: no statement but the template's. A known field (variant, device, probe, case id) that is
   not one the doctor knows gives exit 2 and one line, and no script.
3. The measured tolerance and verdict reach the script (its run prints MISMATCH against it).
4. `repro --variant` with an injection is exit 2; `report RUN-DIR --markdown` on a journal whose
   variant is an injection refuses it by name (exit 2, one line) and writes no Markdown, so no
   script for it.
Exit 0 when all hold, 1 otherwise, 77 (skip) when the binary cannot run a reference check.
"""
import ast
import copy
import json
import os
import subprocess
import sys
import tempfile

DOCTOR, PYTHON = sys.argv[1], sys.argv[2]
CASE = "dtype=fp32,b=1,h=1,l=8,d=8"
CASE_ID = "fp32-b1-h1-q8-k8-d8"
INJECTION = 'x"; import os; os.system("touch PWNED"); y="'
failures = []


def doctor(*args, cwd=None):
    return subprocess.run([DOCTOR, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def expect(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


class Fold(ast.NodeTransformer):
    """Tuples, lists and dicts of constants become one constant; every constant the same."""

    def generic_visit(self, node):
        node = super().generic_visit(node)
        if isinstance(node, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Constant) for e in node.elts):
            return ast.copy_location(ast.Constant(value=None), node)
        if isinstance(node, ast.Dict) and all(isinstance(e, ast.Constant) for e in node.keys + node.values):
            return ast.copy_location(ast.Constant(value=None), node)
        return node

    def visit_Constant(self, node):
        return ast.copy_location(ast.Constant(value=None), node)


def shape(script):
    return ast.dump(Fold().visit(ast.parse(script)))


def write(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f)


def main():
    work = tempfile.mkdtemp(prefix="repro-script-test-")
    base_json, run_dir = os.path.join(work, "base.json"), os.path.join(work, "run")
    run = doctor("check", "--probe", "reference", "--variant", "ref-math", "--case", CASE,
                 "--tolerance", "fp32=1e-9:0", "--no-shrink", "--json", base_json,
                 "--run-dir", run_dir, "-q")
    if run.returncode not in (0, 1) or not os.path.exists(base_json):
        print(f"skip: the reference check did not run (exit {run.returncode}): {run.stderr}")
        return 77
    with open(base_json) as f:
        base = json.load(f)
    result = next(r for r in base["results"] if r["case_id"] == CASE_ID)
    expect(result["status"] == "mismatch", f"the reference check measured {result['status']}")

    benign = os.path.join(work, "benign.py")
    r = doctor("repro", CASE_ID, "--report", base_json, "-o", benign)
    expect(r.returncode == 0, f"repro of the real report: exit {r.returncode} {r.stderr}")
    with open(benign) as f:
        benign_script = f.read()
    want = shape(benign_script)

    # 3. The measured tolerance and verdict, and a run that judges by them.
    expect("ATOL, RTOL = 1.0000000000000001e-09, 0.0" in benign_script or
           "ATOL, RTOL = 1e-09, 0.0" in benign_script, "the measured tolerance is not in the script")
    # The script imports torch: it runs where PYTHON has one (a set-up without torch skips this).
    if subprocess.run([PYTHON, "-c", "import torch"], capture_output=True).returncode == 0:
        run_script = subprocess.run([PYTHON, benign], capture_output=True, text=True, timeout=300)
        expect(run_script.returncode == 1 and "MISMATCH" in run_script.stdout,
               f"the script judged by the measured tolerance: exit {run_script.returncode} {run_script.stdout}")
        expect("measured ref-math (reference) here: mismatch" in run_script.stdout,
               f"the script does not say the measured verdict: {run_script.stdout}")
    else:
        print(f"not run: the script itself ({PYTHON} has no torch)")

    # 2. Free text from the report: data in the script, never statements.
    texts = [INJECTION, "a\nimport os\nos.system('touch PWNED')", "a\r\nimport os", "a\u2028b\u2029c\x0c\x0b",
             "\\", "\\\\\"", "'''", '"""', "@VARIANT@", "@NOTES@ @DEVICE@", "\x1b[2J\x00\x7f",
             "\udcff".encode("utf-8", "surrogatepass").decode("latin-1"), "#", "é漢字🙂"]
    for n, text in enumerate(texts):
        doc = copy.deepcopy(base)
        res = next(x for x in doc["results"] if x["case_id"] == CASE_ID)
        res["reason"] = text
        res["signatures"] = [text, text[::-1]]
        res["status"] = "crash"
        res["process_end"] = {"signal": 6, "signal_name": text, "core_dumped": True}
        doc.setdefault("host", {})["hostname"] = text
        path, out = os.path.join(work, f"hostile-{n}.json"), os.path.join(work, f"hostile-{n}.py")
        write(path, doc)
        r = doctor("repro", CASE_ID, "--report", path, "-o", out, cwd=work)
        expect(r.returncode == 0, f"hostile text {n}: exit {r.returncode} {r.stderr}")
        if r.returncode != 0:
            continue
        with open(out) as f:
            script = f.read()
        try:
            got = shape(script)
        except SyntaxError as e:
            expect(False, f"hostile text {n}: the script does not parse: {e}")
            continue
        expect(got == want, f"hostile text {n}: the script's statements are not the template's")
        namespace = {}
        exec(compile(ast.parse(script.split("\nimport torch")[0]), out, "exec"), namespace)
        notes = namespace["MEASURED"]["notes"]
        expect(("reason: " + text) in notes or any("\ufffd" in note for note in notes),
               f"hostile text {n}: the reason is not kept as data: {notes!r}")
    expect(not os.path.exists(os.path.join(work, "PWNED")), "an injected statement ran")

    # 2b. Known fields that are not known: exit 2, one line, no script.
    for field, value in [("variant", INJECTION), ("variant", "flash[ck]\nimport os"),
                         ("device", 'cuda:0"; import os; x="'), ("device", "cpu\n"),
                         ("probe", "fault"), ("probe", INJECTION), ("case_id", CASE_ID + INJECTION)]:
        doc = copy.deepcopy(base)
        for res in doc["results"]:
            res[field] = value
        path, out = os.path.join(work, "evil.json"), os.path.join(work, "evil.py")
        write(path, doc)
        if os.path.exists(out):
            os.remove(out)
        r = doctor("repro", CASE_ID, "--report", path, "-o", out)
        want_exit = 2
        expect(r.returncode == want_exit, f"{field}={value!r}: exit {r.returncode}, wanted {want_exit}")
        expect(len(r.stderr.strip().splitlines()) == 1, f"{field}={value!r}: stderr is not one line: {r.stderr!r}")
        expect(not os.path.exists(out), f"{field}={value!r}: a script was written")

    # 4. The command line, and the Markdown of a journal.
    r = doctor("repro", CASE_ID, "--variant", 'flash"; import os; os.system("touch PWNED"); x="')
    expect(r.returncode == 2 and "import os" not in r.stdout, f"repro --variant injection: exit {r.returncode}")
    journal = os.path.join(run_dir, "journal.jsonl")
    with open(journal) as f:
        lines = f.read().splitlines()
    with open(journal, "w") as f:
        for line in lines:
            # The results' variant only: the plan's own names are checked when the journal is read.
            if '"event":"result"' in line:
                line = line.replace('"variant":"ref-math"', '"variant":' + json.dumps(INJECTION))
            f.write(line + "\n")
    md = os.path.join(work, "journal.md")
    r = doctor("report", run_dir, "--markdown", md, "-q")
    expect(r.returncode == 2, f"report of the hostile journal: exit {r.returncode} {r.stderr}")
    expect(len(r.stderr.strip().splitlines()) == 1, f"report of the hostile journal: stderr is not one line: {r.stderr!r}")
    expect("unplanned" in r.stderr or "does not hold" in r.stderr,
           f"report of the hostile journal does not say why: {r.stderr!r}")
    expect(not os.path.exists(md), "report of the hostile journal wrote Markdown")
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
