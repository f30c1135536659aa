"""Shared machinery for the test_calls_*.py suites, on top of conftest.py's Runner (`uls`).

Each suite runs the self-checking C helpers build/tests/helpers/calls_* case by case, once
plain (no preload: this validates the test against the kernel) and once under `ulsock run`.
A helper case exits 0 only if all its checks passed (77: skip) and prints

    calls: preload VALUE           the LD_PRELOAD it ran with ("-" for none), once per image
    calls: expect shm ADDR:PORT    connections accepted there must take the fast path
    calls: expect kernel ADDR:PORT connections to there must stay on the kernel path
    calls: expect moved ADDR:PORT  connections accepted there take the fast path, then move
                                   back to kernel TCP in place (SCM_RIGHTS): a process that
                                   takes the socket over finds it on the kernel path
    calls: PASS CASE

Under ulsock every `expect` line is checked against the `path=` lines of the ulsock log
(docs/INTERFACES-dev.md), and conftest's `uls` fixture checks that no /dev/shm entry outlives
the processes. With ULSOCK_TEST_PLAIN=1 only the plain half runs (the ulsock half would be
the same plain run again) and no path is asserted.

Conformance per transport: the cases of case_test run plain and then under ulsock once per
transport in TRANSPORTS, each selected by its environment; an `expect shm` line (the case
expects the fast path) is then checked against that transport's path. A new transport runs
every case by adding its row. Suites with checks of their own use MODES, whose "ulsock" is
the default transport (shared memory).
"""

import re

import pytest

from conftest import PLAIN, TIMEOUT, parse_path_lines
from ulstest import logs

MODES = ("plain", "ulsock")
RUN_TIMEOUT_S = max(TIMEOUT, 60.0)

# name: (environment that selects it, the path= its connections take, reason it logs or None)
TRANSPORTS = {
    "shm": ({}, "shm", None),
    # Loaded, every connection on the kernel transport: the pass-through that every
    # fallback uses, with ulsock's descriptor table, readiness and hand-off code in the way.
    "kernel": ({"ULSOCK_DISABLE": "1"}, "kernel", "disabled by ULSOCK_DISABLE"),
}
CONFORMANCE_MODES = ("plain",) + tuple("ulsock-" + t for t in TRANSPORTS)


def transport_of(mode):
    """The transport a mode runs on: None plain, "shm" for MODES' "ulsock"."""
    if mode == "plain":
        return None
    return "shm" if mode == "ulsock" else mode.removeprefix("ulsock-")


def require_mode(mode):
    """Skips the ulsock half when ULSOCK_TEST_PLAIN=1 asks for plain runs only."""
    if transport_of(mode) and PLAIN:
        pytest.skip("ULSOCK_TEST_PLAIN=1: the plain run covers it")


def expects(text):
    """The (kind, addr) pairs of a helper's `calls: expect` lines."""
    return re.findall(r"^calls: expect (shm|kernel|moved) (\S+)$", text, re.M)


def check_preload(proc, out, plain_images=0):
    """Every program image of the run printed its LD_PRELOAD: with the library exactly when
    it should have, except PLAIN_IMAGES images that were exec'd without it on purpose."""
    seen = re.findall(r"^calls: preload (.*)$", out, re.M)
    assert seen, f"no 'calls: preload' line\n{proc.describe()}"
    without = [v for v in seen if "ulsock" not in v]
    if proc.preloaded:
        assert len(without) == plain_images, f"images without the preload: {without}\n" + proc.describe()
    else:
        assert len(without) == len(seen), f"preloaded in a plain run: {seen}\n{proc.describe()}"


def check_paths(proc, out, transport="shm"):
    """Each `expect shm` address has path lines of TRANSPORT's path (and its reason, if it
    logs one) for both its server side (LOCAL is the address) and a client side (PEER is
    the address), and no other; each `expect kernel` address has a path=kernel line with a
    reason for the side that connected to it."""
    _, want, why = TRANSPORTS[transport]
    lines = parse_path_lines(proc.log_text())
    ctx = f"\n{proc.describe()}"
    for kind, addr in expects(out):
        server = [ln for ln in lines if ln.local == addr]
        client = [ln for ln in lines if ln.peer == addr]
        if kind == "moved" and transport == "shm":
            check_moved(proc, addr, server, client)
        elif kind in ("shm", "moved"):
            assert server, f"no server-side path line for {addr}" + ctx
            assert client, f"no client-side path line for {addr}" + ctx
            wrong = [ln.line for ln in server + client
                     if ln.path != want or (why is not None and ln.reason != why)]
            assert not wrong, f"connections via {addr} not path={want}: {wrong[:4]}" + ctx
        else:
            assert client, f"no path line for the connection to the plain peer {addr}" + ctx
            wrong = [ln.line for ln in client if ln.path != "kernel" or not ln.reason]
            assert not wrong, f"connection to plain peer {addr} not path=kernel+reason: {wrong}" + ctx


def check_moved(proc, addr, server, client):
    """`expect moved ADDR`: both ends took the fast path, both logged the move back to
    kernel TCP, and every process that took the socket over later logged path=kernel with
    a reason."""
    ctx = f"\n{proc.describe()}"
    left = [m for m in logs.matches(proc.log_text(), logs.LEFT_LINE)
            if addr in (m["local"], m["peer"])]
    for side, found, key in (("server", server, "local"), ("client", client, "peer")):
        assert any(ln.path == "shm" for ln in found), f"no {side} path=shm line for {addr}" + ctx
        moved = [m for m in left if m[key] == addr and "moved back to kernel TCP" in m["reason"]]
        assert moved, f"the {side} side of {addr} never moved back to kernel TCP" + ctx
        wrong = [ln.line for ln in found if ln.path not in ("shm", "kernel") or
                 (ln.path == "kernel" and not ln.reason)]
        assert not wrong, f"connections via {addr}: unexpected path lines {wrong[:4]}" + ctx


def run_case(uls, helper, case, mode, args=(), plain_images=0, timeout=RUN_TIMEOUT_S,
             profile=None, env=None):
    """Runs `HELPER CASE ARGS` plain or under ulsock (with PROFILE, default the default);
    asserts it passed, ran with the intended preload and, under ulsock, took the expected
    paths. Returns (proc, stdout)."""
    require_mode(mode)
    transport = transport_of(mode)
    if transport:
        env = {**TRANSPORTS[transport][0], **(env or {})}
    proc = uls.run([uls.helper(helper), case, *map(str, args)], name=f"{helper}-{case}",
                   ulsock=transport is not None, timeout=timeout, expect_rc=None,
                   profile=profile, env=env)
    out = proc.output()
    if proc.rc == 77:
        why = " ".join(re.findall(r"^calls: skip (.*)$", out, re.M))
        pytest.skip(f"{helper} {case}: {why}")
    assert proc.rc == 0, f"{helper} {case} failed (exit {proc.rc})\n{proc.describe()}"
    assert f"calls: PASS {case}" in out, proc.describe()
    check_preload(proc, out, plain_images)
    if proc.preloaded:
        check_paths(proc, out, transport)
    return proc, out


def listed_cases(uls, helper):
    """The cases a helper says it has (`HELPER list`)."""
    proc = uls.run([uls.helper(helper), "list"], name=f"{helper}-list", ulsock=False)
    return proc.output().split()


def case_list_test(helper, cases, internal=()):
    """A suite's test_case_list: HELPER lists exactly the suite's CASES and its INTERNAL
    ones (cases that other cases start, never run on their own)."""
    def test_case_list(uls):
        listed, known = sorted(listed_cases(uls, helper)), sorted([*cases, *internal])
        assert listed == known, f"{helper} lists {listed}; the suite knows {known}"
    return test_case_list


def case_test(helper, cases):
    """The test of a suite whose cases need no check beyond their own: each of CASES runs
    with run_case, plain and under ulsock on every transport (CONFORMANCE_MODES)."""
    @pytest.mark.parametrize("mode", CONFORMANCE_MODES)
    @pytest.mark.parametrize("case", sorted(cases))
    def test(uls, case, mode):
        run_case(uls, helper, case, mode)
    return test


def start_plain_peer(uls, family6=False):
    """A calls_peer echo server without the preload (so connections to it are kernel-path),
    serving one connection. Returns (proc, port); proc.wait() checks it ended cleanly."""
    argv = [uls.helper("calls_peer")] + (["-6"] if family6 else []) + ["1"]
    proc = uls.start(argv, name="calls_peer", ulsock=False, ready=r"^port (\d+)$")
    return proc, int(proc.ready.group(1))
