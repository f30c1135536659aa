#!/usr/bin/env python3
"""Checks which headers each part of the tree may include (docs/design.md, Layout).

Rules that hold today:
  - include/ulsock/ (the public headers): system headers only, and each other;
  - src/cli/ (the `ulsock` command): public headers only (`"ulsock/..."`), so it reads
    the stat records and checks the ULSOCK_* variables through the ABI a user's tools get;
  - src/os/ (the lowest layer: real libc, futex, clock, membarrier, own descriptors, the
    re-entry guard): system headers and its own only;
  - src/core/ and src/transport/: never the interposer's headers (src/preload/);
  - src/core/ includes no transport header beyond the edges listed in CORE_TRANSPORT_DEBT,
    which only shrinks: the shared-memory data path still lives partly in core until it
    moves behind the transport table (issue 13). A new edge fails the check, and so does
    a listed one that is gone (remove it from the list). The ring, its fences and the
    shared-memory locks moved to src/transport/shm, which made five of these edges visible
    that were there before as includes of core's own files.

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


# (core file, transport header it still includes): the edges left to cut. conn_io.c and
# revert.c are the shared-memory data path and its move back to TCP, still in core, and
# conn_io.h declares the transport's operations they implement (shm.h); conn.h
# embeds the segment; conn.c creates and opens it; sigrestart.c hands SIGBUS to the guard.
CORE_TRANSPORT_DEBT = {
    ("src/core/conn.h", "../transport/shm/segment.h"),
    ("src/core/conn.c", "../transport/shm/shmlock.h"),
    ("src/core/conn_io.h", "../transport/shm/shm.h"),
    ("src/core/conn_io.c", "../transport/shm/guard.h"),
    ("src/core/conn_io.c", "../transport/shm/fence.h"),
    ("src/core/conn_io.c", "../transport/shm/shmlock.h"),
    ("src/core/revert.c", "../transport/shm/fence.h"),
    ("src/core/revert.c", "../transport/shm/shmlock.h"),
    ("src/core/sigrestart.c", "../transport/shm/guard.h"),
}


def rel(repo, path):
    return os.path.relpath(path, repo)


def check_lower(repo, bad):
    """src/os knows nothing above it; core and transports never know the interposer."""
    os_dir = os.path.join(repo, "src", "os")
    for path in sources(os_dir):
        for line, kind, name in includes(path):
            target = os.path.normpath(os.path.join(os.path.dirname(path), name))
            if kind == '"' and os.path.dirname(target) != os_dir:
                bad.append(f"{rel(repo, path)}:{line}: src/os includes \"{name}\" from "
                           "a layer above it")
    seen = set()
    for part in ("core", "transport"):
        for path in sources(os.path.join(repo, "src", part)):
            for line, kind, name in includes(path):
                if kind != '"':
                    continue
                target = os.path.normpath(os.path.join(os.path.dirname(path), name))
                layer = os.path.relpath(target, os.path.join(repo, "src")).split(os.sep)[0]
                if layer == "preload":
                    bad.append(f"{rel(repo, path)}:{line}: includes the interposer's "
                               f'"{name}"')
                elif part == "core" and layer == "transport":
                    edge = (rel(repo, path), name)
                    seen.add(edge)
                    if edge not in CORE_TRANSPORT_DEBT:
                        bad.append(f"{rel(repo, path)}:{line}: core includes the "
                                   f'transport header "{name}"')
    for edge in sorted(CORE_TRANSPORT_DEBT - seen):
        bad.append(f"{edge[0]}: no longer includes {edge[1]}: remove the edge from "
                   "CORE_TRANSPORT_DEBT in scripts/check-layers.py")


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
