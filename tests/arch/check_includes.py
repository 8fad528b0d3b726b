#!/usr/bin/env python3
"""The arrows of ARCHITECTURE.md, checked: each folder of src/ includes only the parts it may
depend on. Exit 1 naming every include that points the wrong way."""
import os
import re
import sys

ALLOWED = {
    "core": {"core"},
    "protocol": {"core"},
    "loader": {"core"},
    "isolate": {"core", "protocol"},
    "devices": {"core", "isolate", "loader"},
    "kernels": {"core", "loader"},
    "cases": {"core"},
    "workers": {"core", "loader", "kernels", "protocol", "cases"},
    "run": {"core", "protocol", "isolate", "cases", "workers"},
    "advice": {"core"},
    "report": {"core"},
    "compare": {"core", "report"},
    "check": {"core", "protocol", "devices", "cases", "run", "advice", "report"},
    "cli": {"core", "protocol", "loader", "isolate", "devices", "kernels", "cases", "workers",
            "run", "advice", "report", "compare", "check"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


def main(src):
    wrong = []
    for part, allowed in ALLOWED.items():
        for root, _, files in os.walk(os.path.join(src, part)):
            for name in files:
                if not name.endswith((".cpp", ".hpp", ".hip", ".inc")):
                    continue
                path = os.path.join(root, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if m and m.group(1) != part and m.group(1) in ALLOWED \
                                and m.group(1) not in allowed:
                            wrong.append("%s:%d: %s includes %s/" %
                                         (os.path.relpath(path, src), number, part, m.group(1)))
    for w in wrong:
        print(w)
    print("%d include(s) against the arrows" % len(wrong))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "src"))
