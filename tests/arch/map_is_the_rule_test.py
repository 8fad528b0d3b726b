#!/usr/bin/env python3
"""The room table of ARCHITECTURE.md is the rule check_includes.py applies, nothing else:
1. the table with one arrow taken away (compare -> report) refuses the real tree, naming the
   includes that arrow carried;
2. a table whose cell names no room, or that lacks a row for a folder of src/, is refused (exit 2)
   in one line, so a map that drifted from the tree cannot pass by checking less;
3. every arrow the table draws is one an include of the tree takes: each taken away in turn is
   refused, so the table says no more than the code does (`everything` excepted); an arrow drawn
   that nothing takes (advice -> kernels) is named.

    map_is_the_rule_test.py ARCHITECTURE.md SRC_DIR
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_includes  # noqa: E402


def check(map_text, src):
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "ARCHITECTURE.md")
        with open(path, "w") as f:
            f.write(map_text)
        r = subprocess.run([sys.executable, os.path.join(HERE, "check_includes.py"), path, src],
                           capture_output=True, text=True)
        return r.returncode, r.stdout


def unused_arrows(map_path, src):
    """The table's arrows that no include of SRC takes, as "A -> B": each taken away in turn, the
    tree still passes. A row of `everything` draws no arrow of its own."""
    allowed = check_includes.read_map(map_path)
    unused = []
    for room, words in check_includes.read_cells(map_path).items():
        if words == ["everything"]:
            continue
        for arrow in sorted(allowed[room] - {room}):
            fewer = dict(allowed, **{room: allowed[room] - {arrow}})
            if not any(w.endswith(": %s includes %s/" % (room, arrow))
                       for w in check_includes.wrong_includes(fewer, src)):
                unused.append("%s -> %s" % (room, arrow))
    return unused


def main(map_path, src):
    text = open(map_path, encoding="utf-8").read()
    failures = []

    def expect(ok, what):
        if not ok:
            failures.append(what)
            print("FAIL: " + what)

    row = re.search(r"^\| `src/compare/` \|.*\| core, report \|$", text, re.M)
    expect(row is not None, "ARCHITECTURE.md has no row of src/compare/ ending in 'core, report'")
    if row:
        code, out = check(text.replace(row.group(0), row.group(0)[:-len("core, report |")] + "core |"), src)
        expect(code == 1 and re.search(r"^compare/\S+:\d+: compare includes report/$", out, re.M),
               "without the compare -> report arrow the tree still passed: exit %d\n%s" % (code, out))
        code, out = check(text.replace(row.group(0), row.group(0)[:-len("core, report |")] + "core, reports |"), src)
        expect(code == 2 and "'reports', which is no room" in out and len(out.splitlines()) == 1,
               "a cell naming no room: exit %d\n%s" % (code, out))
        code, out = check(text.replace(row.group(0) + "\n", ""), src)
        expect(code == 2 and "has no row for compare" in out,
               "a folder without a row: exit %d\n%s" % (code, out))
    expect(unused_arrows(map_path, src) == [],
           "arrows no include takes: %s" % ", ".join(unused_arrows(map_path, src)))
    row = re.search(r"^\| `src/advice/` \|.*\| core \|$", text, re.M)
    expect(row is not None, "ARCHITECTURE.md has no row of src/advice/ ending in 'core'")
    if row:
        with tempfile.TemporaryDirectory() as work:
            wider = os.path.join(work, "ARCHITECTURE.md")
            with open(wider, "w") as f:
                f.write(text.replace(row.group(0), row.group(0)[:-len("core |")] + "core, kernels |"))
            found = unused_arrows(wider, src)
            expect(found == ["advice -> kernels"],
                   "an arrow no include takes (advice -> kernels) was not found: %s" % found)
    print("%d failed" % len(failures) if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
