"""The library's exported names stay in step with src/ulsock.map and docs/calls.md.

libulsock.so exports exactly the interposed functions: the version script's `global:` list
(everything else is `local: *`). Each of them is a call of the audit in docs/calls.md, so
each must appear there, in backquotes, in a table row: a name added to the library without
a row in the audit fails here, and so does one left in the version script that the
library no longer defines, or one the library exports by mistake.

The exported list is read from the built library with `nm -D --defined-only` (binutils,
which every build of the library has). No process runs under ulsock here and no socket is
opened.
"""

import re
import shutil
import subprocess

import pytest

from conftest import REPO, ULSOCK_LIB

MAP = REPO / "src" / "ulsock.map"
DOC = REPO / "docs" / "calls.md"
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def map_globals(text):
    """The names of the version script's `global:` block, in order."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"#[^\n]*", " ", text)
    m = re.search(r"\bglobal\s*:(.*?)\blocal\s*:", text, re.S)
    assert m, f"{MAP}: no `global:` block followed by `local:`"
    names = [n.strip() for n in m.group(1).split(";")]
    names = [n for n in names if n]
    bad = [n for n in names if not IDENT.fullmatch(n)]
    assert not bad, f"{MAP}: entries that are not plain names (no patterns here): {bad}"
    return names


def exported(lib):
    """{name: nm type} of the symbols the library defines in its dynamic table."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    out = subprocess.run([nm, "-D", "--defined-only", str(lib)], check=True,
                         capture_output=True, text=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        kind, name = parts[-2], parts[-1].split("@")[0]
        if kind == "A":
            continue  # a version node, not a symbol
        syms[name] = kind
    return syms


def documented(text):
    """Every identifier inside backquotes on a table row of the audit."""
    names = set()
    for line in text.splitlines():
        if not line.lstrip().startswith("|"):
            continue
        for span in re.findall(r"`([^`]+)`", line):
            names.update(IDENT.findall(span))
    return names


@pytest.fixture(scope="module")
def lib_syms():
    if not ULSOCK_LIB.is_file():
        pytest.fail(f"{ULSOCK_LIB} is not built (set ULSOCK_BUILD to a build tree)")
    return exported(ULSOCK_LIB)


def test_map_has_no_duplicates():
    names = map_globals(MAP.read_text())
    dups = sorted({n for n in names if names.count(n) > 1})
    assert not dups, f"{MAP}: listed more than once: {dups}"


def test_exports_equal_map(lib_syms):
    want = set(map_globals(MAP.read_text()))
    have = set(lib_syms)
    assert have - want == set(), f"exported but not in {MAP.name}: {sorted(have - want)}"
    assert want - have == set(), f"in {MAP.name} but not exported: {sorted(want - have)}"


def test_exports_are_functions(lib_syms):
    """Interposed calls only: no data object of the library is visible to programs."""
    other = {n: k for n, k in lib_syms.items() if k not in ("T", "W", "i")}
    assert not other, f"exported symbols that are not functions: {other}"


def test_every_export_in_the_audit(lib_syms):
    assert DOC.is_file(), f"{DOC} is missing"
    missing = sorted(set(lib_syms) - documented(DOC.read_text()))
    assert not missing, (f"exported by libulsock.so but in no table row of "
                         f"{DOC.relative_to(REPO)} (as `name`): {missing}")
