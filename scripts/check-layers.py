#!/usr/bin/env python3
"""Checks which headers each part of the tree may include (docs/design.md, Layout).

Rules that hold today:
  - include/ulsock/ (the public headers): system headers only, and each other;
  - src/cli/ (the `ulsock` command): public headers only (`"ulsock/..."`), so it reads
    the stat records and checks the ULSOCK_* variables through the ABI a user's tools get;
    besides, its own headers, and the fabric directory's wire codec
    (transport/fabric/dir.h) for `ulsock fabricd`, which speaks that protocol;
  - src/os/ (the lowest layer: real libc, futex, clock, membarrier, own descriptors, the
    re-entry guard): system headers and its own only;
  - src/core/ (connections, descriptors, readiness, hand-off): src/os/ and its own only;
    it reaches every transport through the operations table (core/transport.h), never
    through a transport's header;
  - src/transport/NAME/ (one transport): src/os/, src/core/ and its own folder only,
    never another transport's; src/transport/ itself (the table) only core/transport.h
    and its list;
  - src/preload/ (the interposer, the top): anything.
So the layers are os < core < transport < preload, and no include goes down-up.

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


def rel(repo, path):
    return os.path.relpath(path, repo)


def layer_of(src, path):
    """'os', 'core', 'transport/NAME', 'transport' (the table), 'preload' or 'cli'."""
    parts = os.path.relpath(path, src).split(os.sep)
    if parts[0] == "transport" and len(parts) > 2:
        return "transport/" + parts[1]
    return parts[0]


# What each layer may include of the tree, besides itself.
ALLOWED = {
    "os": set(),
    "core": {"os"},
    "transport": {"core/transport.h"},
}


def check_lower(repo, bad):
    """Below the interposer, each layer includes only what is under it."""
    src = os.path.join(repo, "src")
    for part in ("os", "core", "transport"):
        for path in sources(os.path.join(src, part)):
            mine = layer_of(src, path)
            for line, kind, name in includes(path):
                if kind != '"':
                    continue
                target = os.path.normpath(os.path.join(os.path.dirname(path), name))
                theirs = layer_of(src, target)
                if theirs == mine:
                    continue
                if mine.startswith("transport/"):
                    ok = theirs in ("os", "core")
                else:
                    allowed = ALLOWED[mine]
                    ok = theirs in allowed or os.path.relpath(target, src) in allowed
                if not ok:
                    bad.append(f"{rel(repo, path)}:{line}: {mine} includes \"{name}\" "
                               f"({theirs})")


# What the command includes of the library: only the directory codec.
CLI_ALSO = {os.path.join("src", "transport", "fabric", "dir.h")}


def check(repo):
    bad = []
    public = os.path.join(repo, "include", "ulsock")
    for path in sources(public):
        for line, kind, name in includes(path):
            if kind == '"' and not (name.startswith("ulsock/") or "/" not in name):
                bad.append(f"{os.path.relpath(path, repo)}:{line}: a public header includes "
                           f'"{name}"')
    cli = os.path.join(repo, "src", "cli")
    for path in sources(cli):
        for line, kind, name in includes(path):
            target = os.path.relpath(os.path.normpath(os.path.join(cli, name)), repo)
            if kind == '"' and not (name.startswith("ulsock/") or "/" not in name or
                                    target in CLI_ALSO):
                bad.append(f"{os.path.relpath(path, repo)}:{line}: the command includes "
                           f'"{name}", not a public header (include/ulsock/)')
    check_lower(repo, bad)
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
