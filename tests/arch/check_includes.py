#!/usr/bin/env python3
"""The arrows of ARCHITECTURE.md, checked: each folder of src/ includes only the parts its row of
the room table says it may depend on. The table is the rule: this script has no list of its own.

    check_includes.py ARCHITECTURE.md SRC_DIR

Exit 1 naming every include that points the wrong way; exit 2 when the table cannot be read as
the rule (a cell naming no room, a folder of SRC_DIR without a row)."""
import os
import re
import sys

ROW = re.compile(r"^\|\s*`src/([a-z_]+)/`\s*\|")
INCLUDE = re.compile(r'^\s*#\s*include\s+["<]([a-z_]+)/')


def read_cells(path):
    """{room: the words of its last cell}, notes in parentheses dropped."""
    cells = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = ROW.match(line)
            if m:
                cell = line.rstrip().rstrip("|").split("|")[-1]
                cells[m.group(1)] = [w.strip() for w in re.sub(r"\([^)]*\)", "", cell).split(",")
                                     if w.strip()]
    if not cells:
        raise ValueError("%s: no row of the room table (| `src/NAME/` | ... |)" % path)
    return cells


def read_map(path):
    """{room: rooms it may include} from the table's rows: the last cell is a comma-separated list
    of rooms, `everything` or `none`; text in parentheses is a note."""
    cells = read_cells(path)
    allowed = {}
    for room, words in cells.items():
        if words == ["everything"]:
            allowed[room] = set(cells)
        elif words == ["none"]:
            allowed[room] = {room}
        else:
            unknown = [w for w in words if w not in cells]
            if unknown or not words:
                raise ValueError("%s: the row of src/%s/ may depend on %r, which is no room" %
                                 (path, room, ", ".join(unknown) or "nothing"))
            allowed[room] = set(words) | {room}
    return allowed


def wrong_includes(allowed, src):
    """Every include of a room's files that its row does not allow, as "path:line: A includes B/"."""
    wrong = []
    for part, may in allowed.items():
        for root, _, files in os.walk(os.path.join(src, part)):
            for name in sorted(files):
                if not name.endswith((".cpp", ".hpp", ".h", ".cu", ".hip", ".inc")):
                    continue
                path = os.path.join(root, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if m and m.group(1) in allowed and m.group(1) not in may:
                            wrong.append("%s:%d: %s includes %s/" %
                                         (os.path.relpath(path, src), number, part, m.group(1)))
    return wrong


def main(map_path, src):
    try:
        allowed = read_map(map_path)
    except (OSError, ValueError) as e:
        print("check_includes: %s" % e)
        return 2
    unmapped = sorted(d for d in os.listdir(src)
                      if os.path.isdir(os.path.join(src, d)) and d not in allowed)
    if unmapped:
        print("check_includes: %s has no row for %s" % (map_path, ", ".join(unmapped)))
        return 2
    wrong = wrong_includes(allowed, src)
    for w in wrong:
        print(w)
    print("%d include(s) against the arrows" % len(wrong))
    return 1 if wrong else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: check_includes.py ARCHITECTURE.md SRC_DIR")
    sys.exit(main(sys.argv[1], sys.argv[2]))
