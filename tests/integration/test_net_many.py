"""1,000 connections open at the same time from one client process to one server, each
verified, all visible in `ulsock stat --json` while they are open."""

import pytest

from conftest import (SIDES, check_paths, kv, proc_fd_count, side_flags, start_net_server,
                      split_endpoint)

N = 1000
BYTES = 2000


def check_stat(uls, proc, role, port):
    """While all N connections are open, ulsock stat lists each of PROC's, with its role,
    the path its log line gave and, on the fast path, the bytes it moved."""
    mine = [e for e in uls.stat() if e["pid"] == proc.pid]
    assert len(mine) == N, f"ulsock stat lists {len(mine)} connections of the {role}"
    assert len({e["fd"] for e in mine}) == N
    lines = {ln.fd: ln for ln in proc.paths()}
    for e in mine:
        assert e["fd"] in lines, f"stat lists fd {e['fd']}, which the log never decided"
        assert e["role"] == role, e
        assert e["path"] == lines[e["fd"]].path, (e, lines[e["fd"]])
        assert (e["reason"] == "") == (e["path"] == "shm"), e
        if e["path"] == "shm":
            # What the rings carried; kernel-path connections may count nothing.
            assert e["tx_bytes"] == BYTES and e["rx_bytes"] == BYTES, e
        ep = e["peer"] if role == "client" else e["local"]
        assert split_endpoint(ep)[1] == port, e


@pytest.mark.parametrize("sides", SIDES)
@pytest.mark.parametrize("loop", ["threads", "eventloop"])
def test_thousand_connections_at_once(uls, loop, sides):
    """The client connects N sockets (nothing is sent before all are open), echoes BYTES on
    each with 8 threads, pauses with all N still open, then shuts each down and expects
    EOF.  The server runs a thread per connection or one poll() loop over all of them."""
    cu, su = side_flags(sides)
    args = ["--max-conns", str(N), "--quiet"] + (["--nonblock"] if loop == "eventloop" else [])
    server, port = start_net_server(uls, *args, ulsock=su)
    client = uls.start([uls.helper("net_client"), "--port", port, "--hold", "--conns", N,
                        "--concurrency", "8", "--bytes", BYTES, "--max-io", "1500",
                        "--io", "mix", "--pause-held"],
                       name="client", ulsock=cu, stdin=True)
    client.wait_for(rf"HELD conns={N}", timeout=180)
    assert proc_fd_count(client.pid) >= N
    assert proc_fd_count(server.pid) >= N
    for proc, role in ((client, "client"), (server, "server")):
        if proc.preloaded:
            check_stat(uls, proc, role, port)
    client.send_line()
    client.wait(timeout=120)
    assert kv(client.output(), "OK")["rx"] == str(N * BYTES)
    server.wait(timeout=60)
    check_paths(client, server, N, port=port)
    uls.assert_no_shm_leftovers()
