"""The offer board (docs/protocol.md, section 3): a ulsock server looks for a client's
segment only when a client of its user offered one to its port. Without path lines in the
log (the default), a server whose clients run without ulsock keeps every connection on
kernel TCP without a look and says so in `ulsock stat`; clients under ulsock still get
the fast path, every one, including connections that arrive while others are open."""

import sys

from conftest import check_paths, kv, run_net_client, start_net_server
from ulstest import board
from ulstest.logs import NO_OFFER, NO_SEGMENT

N = 6
BYTES = 3000


def hold(uls, port, ulsock, name):
    """A client holding N echoed connections open; returns it once they all are."""
    client = uls.start([uls.helper("net_client"), "--port", port, "--hold", "--conns", N,
                        "--concurrency", "3", "--bytes", BYTES, "--pause-held"],
                       name=name, ulsock=ulsock, stdin=True, log_level="warn",
                       env={"ULSOCK_SHORT_CALLS": "0"})
    client.wait_for(rf"HELD conns={N}", timeout=60)
    return client


def release(client):
    client.send_line()
    client.wait(timeout=60)
    assert kv(client.output(), "OK")["rx"] == str(N * BYTES), client.describe()


def server_rows(uls, server):
    return [e for e in uls.stat() if e["pid"] == server.pid and e["role"] == "server"]


def test_server_looks_only_for_offers(uls):
    stamp = board.now_stamp()
    server, port = start_net_server(uls, "--max-conns", 2 * N, "--quiet", log_level="warn")

    plain = hold(uls, port, False, "plain")
    rows = server_rows(uls, server)
    assert len(rows) == N, rows
    assert all(e["path"] == "kernel" for e in rows), rows
    # Another test's offer to a port of the same slot, pending meanwhile, makes the
    # server look (and find nothing).
    assert all(e["reason"] in (NO_OFFER, NO_SEGMENT) for e in rows), rows
    if board.quiet_since(port, stamp):
        assert all(e["reason"] == NO_OFFER for e in rows), rows
    release(plain)

    accelerated = hold(uls, port, True, "accelerated")
    rows = [e for e in server_rows(uls, server) if e["path"] == "shm"]
    assert len(rows) == N, server_rows(uls, server)
    release(accelerated)
    server.wait(timeout=60)


def test_logged_reasons(uls):
    """With path lines in the log the server still names what the kernel tells of the
    peer; a plain client's connections say that no segment was offered."""
    stamp = board.now_stamp()
    server, port = start_net_server(uls, "--max-conns", N, "--quiet")
    plain = uls.start([uls.helper("net_client"), "--port", port, "--conns", N,
                       "--bytes", BYTES], name="plain", ulsock=False)
    plain.wait(timeout=60)
    server.wait(timeout=60)
    check_paths(plain, server, N, port=port)
    reasons = [ln.reason for ln in server.paths()]
    assert all(r in (NO_OFFER, NO_SEGMENT) for r in reasons), reasons
    if board.quiet_since(port, stamp):
        assert all(r == NO_OFFER for r in reasons), reasons
    uls.assert_no_shm_leftovers()


def test_offers_to_plain_server_taken_back(uls):
    """A ulsock client whose server runs without ulsock takes its offers back once it
    knows the server never attached (its data on TCP, or the close), so the port's slot
    does not make ulsock servers of other ports in it look for 10 s."""
    server, port = start_net_server(uls, "--max-conns", N, "--quiet", ulsock=False)
    expect = board.counts_before_offer(port)
    client = run_net_client(uls, port, "--conns", N, "--bytes", BYTES,
                            env={"ULSOCK_SHORT_CALLS": "0"})
    server.wait(timeout=60)
    assert kv(client.output(), "OK")["rx"] == str(N * BYTES), client.describe()
    # Each connection offered a segment (ULSOCK_SHORT_CALLS=0) and settled on TCP, told
    # by the server's data or by its own close.
    reasons = [ln.reason for ln in client.paths()]
    assert len(reasons) == N, client.describe()
    assert all(r == "peer is not running ulsock" or r.startswith("peer never attached")
               for r in reasons), reasons
    assert board.read_slot(port)[0] in expect, client.describe()


# A plain listener that accepts and keeps its connections, reading nothing.
KEEPER = r"""
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
print("READY port=%d" % s.getsockname()[1], flush=True)
kept = []
while True:
    kept.append(s.accept()[0])
"""

# A client that connects, waits for a line, and ends its process without a close or a
# byte: _exit, or exit() (atexit handlers and destructors; the socket object is never
# closed).
LEAVER = r"""
import ctypes, os, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print("CONNECTED", flush=True)
sys.stdin.readline()
if sys.argv[2] == "_exit":
    os._exit(0)
ctypes.CDLL(None).exit(0)
"""


def test_offers_taken_back_at_exit(uls):
    """A ulsock client that leaves (exit or _exit) with a connection whose server never
    attached, without closing it, takes its offer back as it goes (and removes its
    segment's name): its segment was offered (ULSOCK_SHORT_CALLS=0), the server runs
    without ulsock, and no close nor data told the client so."""
    server, port = uls.server([sys.executable, "-c", KEEPER], name="keeper", ulsock=False)
    for how in ("_exit", "exit"):
        expect = board.counts_before_offer(port)
        client = uls.start([sys.executable, "-c", LEAVER, str(port), how],
                           name="leaver-" + how, env={"ULSOCK_SHORT_CALLS": "0"}, stdin=True)
        client.wait_for(r"^CONNECTED$")
        assert board.read_slot(port)[0] in {n + 1 for n in expect}, client.describe()
        client.send_line()
        client.wait()
        assert board.read_slot(port)[0] in expect, client.describe()
