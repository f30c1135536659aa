"""Wake-ups of sleepers in poll, epoll and select (docs/protocol.md section 5): between two
processes of one user they go through the sleeper's pipe, and the connection's kernel
TCP sockets carry next to nothing; with ULSOCK_TRUST_UIDS set the sleepers' pipes are
FIFOs with names in /dev/shm (a client cannot know its server's user, and a peer of
another user cannot open a pipe through /proc), so the same holds between users who
trust each other (the server running as nobody). Where a side may not write its peer's
pipe it wakes it with a byte on TCP instead, and nothing is lost either way.

py_sleepy_pingpong.py's two ends, both under ulsock with the efficient profile (a wait
sleeps at once, so every message wakes the other end), echo N messages of 64 bytes, each
checked; then, with the connection still open, `ss` reads what the kernel sent on each of
its two TCP sockets (bytes_sent, which ulsock's own TCP_INFO would correct). With TCP
wake-ups a message whose reader was asleep costs its writer one byte there: about 40% of
them on this project's VMs (the trust_uids client), hundreds in a run."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PLAIN, ULSOCK_BIN, ULSOCK_LIB, expect_paths, kv, require_user
from ulstest import logs

PINGPONG = Path(__file__).with_name("py_sleepy_pingpong.py")
N = 1000
# Bytes a side may put on TCP besides: a client's first message can go there before its
# server attached; a wake-up or two may (a waker's first try at a pipe it cannot open).
FIRST = 64
STRAY = 16


def tcp_bytes_sent(port):
    """{local port: bytes_sent} of the established TCP sockets on PORT, as the kernel counts."""
    out = subprocess.run(["ss", "-tinH", "state", "established",
                          f"( sport = :{port} or dport = :{port} )"],
                         capture_output=True, text=True, timeout=10, check=True).stdout
    sent = {}
    # One socket is two lines: addresses, then its TCP_INFO (bytes_sent only when not 0).
    for addr, info in re.findall(r"^\s*\d+\s+\d+\s+(\S+)\s+\S+\s*\n(.*)$", out, re.M):
        m = re.search(r"\bbytes_sent:(\d+)", info)
        sent[int(addr.rsplit(":", 1)[1])] = int(m.group(1)) if m else 0
    return sent


def run_pingpong(uls, how, hold="alone", env=None, server_log="info", server_user=None):
    """Runs the ping-pong (the server's socket held as HOLD says, its process running as
    SERVER_USER); returns the bytes the server's and the client's TCP sockets sent, and
    the server's Proc."""
    server, port = uls.server([sys.executable, str(PINGPONG), "server", how, str(N), hold],
                              name="server", profile="efficient", env=env, stdin=True,
                              log_level=server_log, user=server_user)
    client = uls.start([sys.executable, str(PINGPONG), "client", how, str(N), str(port)],
                       name="client", profile="efficient", env=env, stdin=True)
    client.wait_for(rf"^DONE n={N}$")
    server.wait_for(rf"^DONE n={N}$")
    sent = tcp_bytes_sent(port)
    client.send_line()
    server.send_line()
    client.wait()
    server.wait()
    assert kv(client.output(), "DONE")["n"] == str(N)
    expect_paths(client, "shm", count=1)
    expect_paths(server, "shm", count=1)
    assert server.rc == 0, server.describe()
    assert len(sent) == 2 and port in sent, f"ss saw {sent}"
    print(f"bytes_sent on TCP: {sent} (server port {port})")
    return sent[port], sum(v for p, v in sent.items() if p != port), server


@pytest.mark.parametrize("trust", ["one_user", "trust_uids", "other_user"])
@pytest.mark.parametrize("how", ["poll", "epoll", "select"])
def test_sleepers_woken(uls, how, trust):
    """one_user: both ends of one user, nobody else trusted; trust_uids: the same with
    ULSOCK_TRUST_UIDS set in both (so every bell has a name); other_user: the server runs
    as nobody, both trust each other. No side wakes the other on TCP in any of them."""
    if PLAIN:
        pytest.skip("what ulsock puts on TCP: nothing to see without it")
    user = None
    env = {"ULSOCK_TRUST_UIDS": "65534"} if trust == "trust_uids" else None
    if trust == "other_user":
        require_user("nobody", PINGPONG, sys.executable, ULSOCK_BIN, ULSOCK_LIB)
        user = "nobody"
        env = {"ULSOCK_TRUST_UIDS": "0,65534"}
    srv_sent, cli_sent, _ = run_pingpong(uls, how, env=env, server_user=user)
    assert srv_sent <= STRAY, f"the server sent {srv_sent} bytes on TCP for {N} messages"
    assert cli_sent <= FIRST + STRAY, f"the client sent {cli_sent} bytes on TCP for {N} messages"
    uls.assert_no_shm_leftovers()


@pytest.mark.parametrize("hold", ["fork", "fork-parent", "fork-keep", "fork-exit"])
def test_sleepers_after_fork(uls, hold):
    """A server that forks after accept (a process per connection, as PostgreSQL's
    postmaster does): once the other process closed its copy of the socket, the one that
    echoes is its only holder and sleeps on its pipe, whichever of parent and child it is
    (fork, fork-parent), and so once a child that closed nothing left with _exit
    (fork-exit, Redis's BGSAVE child: its exit gives its count back); while the other keeps its copy (fork-keep), either could read the
    socket, so the server's wake-ups stay on TCP, which both see, and still not a message
    is lost (design.md, "Fork children, counted"). How often a sleeper sleeps is the
    machine's business, so with fork-keep it is the debug line that says the socket became
    one process's alone that must be missing from the child (the parent, which closes
    last, gets it then)."""
    if PLAIN:
        pytest.skip("what ulsock puts on TCP: nothing to see without it")
    srv_sent, cli_sent, server = run_pingpong(uls, "poll", hold, server_log="debug")
    assert srv_sent <= STRAY, f"the server sent {srv_sent} bytes on TCP for {N} messages"
    alone = [int(m[1]) for m in logs.matches(server.log_text(), logs.ALONE_LINE)]
    child = [pid for pid in alone if pid != server.pid]
    if hold == "fork-keep":
        assert not child, server.describe()
    else:
        assert len(alone) == 1 and bool(child) == (hold == "fork"), server.describe()
        assert cli_sent <= FIRST + STRAY, f"the client sent {cli_sent} bytes on TCP for {N} messages"
