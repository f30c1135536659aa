"""Resource leaks: 10,000 connect / small exchange / close cycles between two preloaded
processes, every one of them on shared memory (ULSOCK_SHORT_CALLS=0 in the client).
Between a checkpoint after a warm-up and one after the cycles (both taken
while every connection is closed), neither process may gain file descriptors (the
library's own, at 900 and up, may be four at most) or memory mappings, its RSS may not
grow beyond a small tolerance, and /dev/shm may not gain entries."""

import os
import time

import pytest

from conftest import check_paths, kv, proc_map_count, proc_rss_kib, shm_entries, start_net_server
from ulstest import procs

WARMUP = 500
CYCLES = 10000
RSS_TOLERANCE_KIB = 4096
MAPS_TOLERANCE = 8
# The library keeps its own descriptors at 900 and up, one of each at most: the log file
# (src/core/log.c), the `ulsock stat` record (src/core/stat.c), the sock_diag socket
# (src/core/handshake.c) and the spare segment (src/transport/shm/segment.h). Besides them,
# wake-up bells (pipes, src/core/bell.h), one per thread and epoll set that slept on an
# accelerated socket: bells are reused, so their number follows the threads alive at once,
# never the connections made; and the peers' bells it opened to wake them
# (src/transport/shm/wakepipe.c: one per peer process and bell, 64 at most).
LIB_FDS_MAX = 4
BELLS_MAX = 16
WAKE_PIPES_MAX = 64


def fd_counts(pid):
    """(the program's descriptors, the library's, its bells, the peers' bells it holds)."""
    k = procs.lib_fds(pid)
    return k["program"], k["library"] + k["spare"], k["bells"], k["wake_pipes"]


def settled_fds(pid, timeout=5.0):
    """PID's fd counts once they stopped changing for 0.3 s (the server may still be
    closing the last connection when the client pauses)."""
    deadline = time.monotonic() + timeout
    last, since = fd_counts(pid), time.monotonic()
    while time.monotonic() - since < 0.3 and time.monotonic() < deadline:
        time.sleep(0.05)
        now = fd_counts(pid)
        if now != last:
            last, since = now, time.monotonic()
    return last


def snapshot(procs):
    snap = {"shm": len(shm_entries("")), "shm_ulsock": shm_entries()}
    for p in procs:
        fds, lib_fds, bells, wake_pipes = settled_fds(p.pid)
        snap[p.name] = {"fds": fds, "lib_fds": lib_fds, "bells": bells, "wake_pipes": wake_pipes,
                        "maps": proc_map_count(p.pid),
                        "rss": proc_rss_kib(p.pid)}
    return snap


@pytest.mark.parametrize("loop", ["threads", "eventloop"])
def test_open_close_cycles_do_not_leak(uls, loop):
    """The client pauses after WARMUP connections and again after WARMUP + CYCLES, then
    makes one last connection, which lets the server (--max-conns) exit on its own."""
    total = WARMUP + CYCLES + 1
    args = ["--max-conns", str(total), "--quiet"] + (["--nonblock"] if loop == "eventloop" else [])
    server, port = start_net_server(uls, *args)
    # One 256-byte write per connection: several small writes would wait on Nagle and
    # delayed ACKs over kernel TCP, which makes the run slow without testing more.
    # ULSOCK_SHORT_CALLS=0: connections this short would soon stay on kernel TCP, and the
    # segments' life is what this test watches.
    client = uls.start([uls.helper("net_client"), "--port", port, "--conns", total,
                        "--bytes", "256", "--min-io", "256", "--max-io", "256", "--io", "mix",
                        "--pause-at", WARMUP, "--pause-at", WARMUP + CYCLES],
                       name="client", stdin=True, env={"ULSOCK_SHORT_CALLS": "0"})
    client.wait_for(rf"PAUSE done={WARMUP}$", timeout=120)
    before = snapshot([client, server])
    client.send_line()
    client.wait_for(rf"PAUSE done={WARMUP + CYCLES}$", timeout=600)
    after = snapshot([client, server])
    client.send_line()
    client.wait(timeout=30)
    server.wait(timeout=30)
    assert kv(client.output(), "OK")["failed"] == "0"
    print(f"before: {before}\nafter:  {after}")

    for p in (client, server):
        b, a = before[p.name], after[p.name]
        assert a["fds"] <= b["fds"], f"{p.name} fds grew {b['fds']} -> {a['fds']}"
        assert a["lib_fds"] <= LIB_FDS_MAX, f"{p.name} holds {a['lib_fds']} fds >= {procs.LIB_FD_MIN}"
        assert a["bells"] <= BELLS_MAX, f"{p.name} holds {a['bells']} bells"
        assert a["wake_pipes"] <= WAKE_PIPES_MAX, f"{p.name} holds {a['wake_pipes']} peers' bells"
        assert a["maps"] <= b["maps"] + MAPS_TOLERANCE, \
            f"{p.name} mappings grew {b['maps']} -> {a['maps']}"
        assert a["rss"] <= b["rss"] + RSS_TOLERANCE_KIB, \
            f"{p.name} RSS grew {b['rss']} -> {a['rss']} KiB over {CYCLES} connections"
    if client.preloaded:
        # Only meaningful with ulsock: other users of /dev/shm come and go meanwhile.
        assert after["shm"] <= before["shm"], f"/dev/shm grew {before['shm']} -> {after['shm']}"
        assert not after["shm_ulsock"] - before["shm_ulsock"], after["shm_ulsock"]
    check_paths(client, server, total, port=port)
    uls.assert_no_shm_leftovers()
