"""The short `make soak` (tools/soak.py --short, docs/RELIABILITY.md): each part of the
soak runs here at CI size, so that the tool cannot rot and every change meets a small
version of it.  The tool judges the run itself; these tests read its --json and check
the same things again from the figures, so that a tool that stopped checking would fail
too:

  data    64 connections at once, duplex streams of 64 MiB in all, random I/O sizes,
          blocking and non-blocking sockets mixed: every byte sent arrived and was
          verified at both ends, every connection on shared memory at both ends, no
          /dev/shm segment left.
  cycles  2,000 connect / 1-byte echo / close cycles after 200 warm-up ones: neither
          process gained a descriptor (but for the library's reused wake-up bells, 16 at
          most, and its spare segment, one), RSS stayed within the tool's tolerance,
          /dev/shm held no more of the soak's entries and no orphan, every connection on
          shared memory.
  kill    50 connections, one end of each killed with SIGKILL at a random moment, every
          phase, victim and way of waiting covered: each survivor saw EOF, ECONNRESET or
          EPIPE after the kill, with no hang and no wrong or lost byte, logged path=shm,
          and its segment is gone.
  users   another user (nobody) tries 50 times, every way, to open or map the segment of
          a connection of root's: every way worked as root, none as nobody (needs root).

Throughput, connections per second and the kill part's notice times are in the output,
never asserted.  Skipped with ULSOCK_TEST_PLAIN=1: the soak measures ulsock itself."""

import json
import sys

import pytest

from conftest import BUILD, PLAIN, REPO, ULSOCK_BIN, ULSOCK_LIB, Runner, require_user

SOAK = REPO / "tools" / "soak.py"
LIMIT = 120
# The library's wake-up bells are reused, bounded by the threads alive at once, and its
# spare segment comes and goes with timing: both are bounded rather than compared
# (BELLS_MAX and SPARES_MAX in tools/soak.py).
BELLS_MAX = 16


def run_soak(uls, part):
    """Runs one part of the short soak; returns (exit status, the part's JSON record)."""
    if PLAIN:
        pytest.skip("the soak measures ulsock itself: nothing to check on kernel TCP")
    out = uls.dir / "soak.json"
    proc = uls.run([sys.executable, SOAK, "--short", "--build", BUILD, "--only", part,
                    "--json", out, "--workdir", uls.dir / "files"],
                   name="soak-" + part, ulsock=False, timeout=LIMIT, expect_rc=None)
    print(proc.output())
    assert out.exists(), f"soak.py wrote no JSON\n{proc.describe()}"
    data = json.loads(out.read_text())
    assert data["short"] and list(data["parts"]) == [part], data
    for cmd in data["parts"][part]["commands"]:
        assert "--addr 127.0.0.1 " in cmd or "--conn 127.0.0.1:" in cmd, cmd
    return proc.rc, data["parts"][part]


def check_paths(fig, conns):
    for side in ("client", "server"):
        p = fig[side + "_paths"]
        assert p["shm"] == conns and p["kernel"] == p["fabric"] == 0, (side, p)
        assert p["left_fast_path"] == 0, (side, p)


def test_data(uls):
    """Every byte of 64 duplex connections verified by its receiver, all on shm."""
    rc, res = run_soak(uls, "data")
    fig = res["figures"]
    assert rc == 0 and res["passed"] and res["error"] is None, res
    expect = fig["conns"] * fig["bytes_per_conn_each_way"]
    assert fig["conns"] == 64 and 2 * expect == 64 << 20, fig
    c = fig["client"]
    assert c["verdict"] == "OK" and c["failed"] == 0 and c["conns"] == 64, c
    assert c["tx"] == c["rx"] == expect, c
    assert fig["server_exit"] == 0 and fig["server_conns"] == 64, fig
    assert fig["server_rx_verified"] == fig["server_tx"] == expect, fig
    assert fig["bytes_moved"] == 2 * expect, fig
    check_paths(fig, 64)
    assert fig["shm_left_behind"] == [], fig


def test_cycles(uls):
    """2,000 connection cycles leave no descriptor, memory or /dev/shm entry behind."""
    rc, res = run_soak(uls, "cycles")
    fig = res["figures"]
    assert rc == 0 and res["passed"] and res["error"] is None, res
    total = fig["connections"]
    assert fig["cycles"] == 2000 and total == fig["warmup"] + 2001, fig
    c = fig["client"]
    assert c["verdict"] == "OK" and c["failed"] == 0 and c["tx"] == c["rx"] == total, c
    assert fig["server_exit"] == 0, fig
    before, after = fig["before"], fig["after"]
    for role in ("server", "client"):
        b, a = before[role], after[role]
        assert a["fds_program"] <= b["fds_program"], (role, b, a)
        assert a["fds_library"] <= b["fds_library"], (role, b, a)
        assert a["fds_bells"] <= BELLS_MAX and a["fds_spare"] <= 1, (role, b, a)
        assert a["rss_kib"] - b["rss_kib"] <= fig["rss_tolerance_kib"], (role, b, a)
    assert after["shm_held_by_soak"] <= before["shm_held_by_soak"], (before, after)
    assert fig["shm_orphans_after_cycles"] == [] and fig["shm_left_behind"] == [], fig
    check_paths(fig, total)


def test_kill(uls):
    """50 peers killed at random moments: every survivor saw its connection end, on shm."""
    rc, res = run_soak(uls, "kill")
    fig = res["figures"]
    assert rc == 0 and res["passed"] and res["error"] is None, res
    assert fig["trials"] == fig["trials_planned"] == 50 and not fig["notice_judged"], fig
    recs = fig["trial_records"]
    assert {r["phase"] for r in recs} == {"idle", "full", "stream-in", "stream-out",
                                          "duplex"}, recs
    assert {r["victim"] for r in recs} == {"client", "server"}, recs
    assert {r["survivor_wait"] for r in recs} == {"block", "poll", "epoll"}, recs
    for r in recs:
        assert r["notice_ms"] >= 0, r
        if r["rx"] is not None and "eof" in r["kind"]:
            assert r["rx"] >= r["victim_sent"], r
    assert sum(fig["outcomes"].values()) == 50, fig
    assert fig["shm_left_behind"] == [], fig


def test_users(uls):
    """50 attempts by nobody to open or map root's segment, every way: none succeeded."""
    if not PLAIN:
        require_user("nobody", Runner.helper("net_server"), Runner.helper("shm_intruder"),
                     ULSOCK_BIN, ULSOCK_LIB)
    rc, res = run_soak(uls, "users")
    fig = res["figures"]
    assert rc == 0 and res["passed"] and res["error"] is None, res
    assert fig["attempts"] == 50 and fig["successes"] == 0, fig
    assert len(fig["ways"]) == 18, fig["ways"]
    for name, way in fig["ways"].items():
        assert way["attempts"] >= 1 and way["successes"] == 0, (name, way)
    assert fig["segment_mode"] == "0600" and fig["segment_uid"] == fig["user_a"], fig
    assert fig["shm_left_behind"] == [], fig
