#!/usr/bin/env python3
"""The room table of ARCHITECTURE.md is the rule check_includes.py applies, nothing else:
1. the table with one arrow taken away (compare -> report) refuses the real tree, naming the
   includes that arrow carried;
2. a table whose cell names no room, or that lacks a row for a folder of src/, is refused (exit 2)
   in one line, so a map that drifted from the tree cannot pass by checking less.

    map_is_the_rule_test.py ARCHITECTURE.md SRC_DIR
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def check(map_text, src):
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "ARCHITECTURE.md")
        with open(path, "w") as f:
            f.write(map_text)
        r = subprocess.run([sys.executable, os.path.join(HERE, "check_includes.py"), path, src],
                           capture_output=True, text=True)
        return r.returncode, r.stdout


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
    print("%d failed" % len(failures) if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
