"""A segment file shrunk mid-stream (what a buggy or hostile process of the same user can
do, with ftruncate): each endpoint touches the lost pages and gets SIGBUS, which the
segment guard must turn into a broken connection. Neither process may die of it; the
receiver checks every byte it got before the cut and must report ECONNRESET, never a
corrupt byte or a clean end of stream; the sender must report ECONNRESET or EPIPE."""

import os
import re

import pytest

from conftest import SHM_DIR, kv

TRUNCATED_LOG = "its segment file was truncated"


def socket_inodes(pid):
    """The inodes of PID's sockets (its /proc/PID/fd links 'socket:[N]')."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            m = re.fullmatch(r"socket:\[(\d+)\]", os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
        if m:
            inodes.add(m.group(1))
    return inodes


def segment_of(client_pid):
    """The segment file named after one of the client's sockets (the connected one)."""
    names = [f"ulsock.{os.getuid()}.{ino}" for ino in socket_inodes(client_pid)]
    found = [SHM_DIR / n for n in names if (SHM_DIR / n).exists()]
    assert len(found) == 1, f"segment of client {client_pid}: {found}"
    return found[0]


@pytest.mark.parametrize("handler", ["default", "signal", "sigset"])
@pytest.mark.parametrize("receiver", ["server", "client"])
def test_segment_truncated_mid_stream(uls, receiver, handler):
    """handler=signal (sigset): both programs install a SIGBUS handler that exits 3 with
    signal() (System V's sigset()), which glibc applies past sigaction: the guard must
    still see the segment's fault."""
    peer = uls.helper("net_peer")
    extra = [] if handler == "default" else ["--sigbus-" + handler]
    server_act, client_act = ("recv", "flood") if receiver == "server" else ("flood", "recv")
    server = uls.start([peer, "--listen", "--act", server_act] + extra, name="server",
                       ready=r"READY port=(\d+)")
    client = uls.start([peer, "--connect", "--port", int(server.ready.group(1)),
                        "--act", client_act] + extra, name="client")
    rx = server if receiver == "server" else client
    tx = client if receiver == "server" else server
    rx.wait_for(r"PROGRESS rx=\d+")

    os.truncate(segment_of(client.pid), 0)

    # Exit status 0: neither died of SIGBUS; the receiver saw no corrupt byte.
    rx.wait()
    tx.wait()
    got = kv(rx.output(), "RESULT")
    sent = kv(tx.output(), "RESULT")
    print(f"receiver: {got}\nsender: {sent}")
    assert got["outcome"] == "ECONNRESET", rx.describe()
    assert sent["outcome"] in ("ECONNRESET", "EPIPE"), tx.describe()
    assert int(got["bytes"]) <= int(sent["bytes"])
    assert TRUNCATED_LOG in rx.log_text() + tx.log_text(), rx.describe() + tx.describe()
    uls.assert_no_shm_leftovers()
