#!/usr/bin/env python3
"""Checks which headers each part of the tree may include (docs/design.md, Layout).

Rules that hold today:
  - include/ulsock/ (the public headers): system headers only, and each other;
  - src/cli/ (the `ulsock` command): public headers only (`"ulsock/..."`), so it reads
    the stat records and checks the ULSOCK_* variables through the ABI a user's tools get.

ctest runs it (layout.headers, label unit). Exit 0 when every include follows the rules,
1 with one line per include that does not.

usage: python3 scripts/check-layers.py [REPO]
"""

import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def includes(path):
    """(line number, kind, name) of each #include in a file; kind is '<' or '"'."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for m in INCLUDE.finditer(text):
        yield text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)


def sources(root, exts=(".c", ".h")):
    for dirpath, _, files in os.walk(root):
        for name in sorted(files):
            if name.endswith(exts):
                yield os.path.join(dirpath, name)


def check(repo):
    bad = []
    public = os.path.join(repo, "include", "ulsock")
    for path in sources(public):
        for line, kind, name in includes(path):
            if kind == '"' and not (name.startswith("ulsock/") or "/" not in name):
                bad.append(f"{os.path.relpath(path, repo)}:{line}: a public header includes "
                           f'"{name}"')
    for path in sources(os.path.join(repo, "src", "cli")):
        for line, kind, name in includes(path):
            if kind == '"' and not name.startswith("ulsock/"):
                bad.append(f"{os.path.relpath(path, repo)}:{line}: the command includes "
                           f'"{name}", not a public header (include/ulsock/)')
    return bad


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else \
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bad = check(repo)
    for line in bad:
        print(f"check-layers: {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
