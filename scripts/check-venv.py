#!/usr/bin/env python3
"""Checks that this interpreter is the project's Python environment, as
scripts/install-deps.sh makes it: .venv/ at the repository root, holding exactly the
packages of requirements.txt at their pinned versions, and nothing else but the
installer's own tools (pip, setuptools).

ctest runs it (toolchain.python_env, label unit) with the interpreter that runs every
pytest suite, so a suite cannot pass or fail on a machine only because of the Python it
happens to have. Exit 0 when all matches, 1 with one line per difference.

usage: .venv/bin/python scripts/check-venv.py
"""

import os
import re
import sys
from importlib import metadata

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(REPO, ".venv")
REQUIREMENTS = os.path.join(REPO, "requirements.txt")
# What `python3 -m venv` puts in every environment; requirements.txt does not pin them.
INSTALLER = {"pip", "setuptools"}


def normalize(name):
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(path):
    """Returns {name: version} of the file's `name==version` lines; any other kind of
    requirement is an error, since the point of the file is exact versions."""
    pins = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)", line)
            if not m:
                raise SystemExit("%s:%d: not an exact pin (name==version): %s"
                                 % (path, n, line))
            pins[normalize(m.group(1))] = m.group(2)
    return pins


def installed():
    """Returns {name: version} of every distribution this interpreter can import."""
    return {normalize(d.metadata["Name"]): d.version for d in metadata.distributions()}


def problems():
    out = []
    here = os.path.realpath(sys.prefix)
    if here != os.path.realpath(VENV):
        out.append("the suites run with %s (environment %s), not the project's %s: run "
                   "`make deps`, then configure with -DPython3_EXECUTABLE=%s/bin/python "
                   "(`make` does)" % (sys.executable, here, VENV, VENV))
    pins, have = pinned(REQUIREMENTS), installed()
    for name, version in sorted(pins.items()):
        if name not in have:
            out.append("%s==%s is not installed" % (name, version))
        elif have[name] != version:
            out.append("%s is %s, requirements.txt pins %s" % (name, have[name], version))
    for name in sorted(set(have) - set(pins) - INSTALLER):
        out.append("%s %s is installed but not in requirements.txt" % (name, have[name]))
    return out, len(pins)


def main():
    found, npins = problems()
    for p in found:
        print("python_env: " + p)
    if found:
        print("python_env: %d difference(s); `make deps` rebuilds .venv from "
              "requirements.txt" % len(found))
        return 1
    print("python_env: %s %s with the %d packages of requirements.txt, as pinned"
          % (sys.executable, sys.version.split()[0], npins))
    return 0


if __name__ == "__main__":
    sys.exit(main())
