"""A plain peer must see exactly the bytes the program sent: ulsock's negotiation may never
leave a byte on the wire of a connection that falls back, not as the first byte, not after
close, not on an empty connection, whichever side speaks first."""

import filecmp
import sys
from pathlib import Path

import pytest

from conftest import check_paths, expect_paths, kv, run_net_client, server_conns, start_net_server

LATE = Path(__file__).with_name("py_late_accept.py")

SIZES = [1, 4096, 300007]


def recorded(tmp_path, idx):
    return (tmp_path / "rec" / f"conn-{idx}.bin").read_bytes()


def assert_same_files(recorded_path, sent_path):
    rec, sent = recorded_path.read_bytes(), sent_path.read_bytes()
    assert len(rec) == len(sent), f"received {len(rec)} bytes, {len(sent)} were sent"
    if rec != sent:
        first = next(i for i in range(len(rec)) if rec[i] != sent[i])
        pytest.fail(f"first difference at byte {first}: {rec[first]:#04x} != {sent[first]:#04x}")
    assert filecmp.cmp(recorded_path, sent_path, shallow=False)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("mode", ["echo", "sink"])
@pytest.mark.parametrize("preloaded", ["client", "server"])
def test_plain_peer_receives_exact_bytes(uls, tmp_path, preloaded, mode, size):
    """One end preloaded, the other plain.  The server records everything it receives;
    the client dumps what it sent; the files must be identical.  The client also checks
    what comes back (the echo, or the sink's count and hash) and that EOF follows it."""
    (tmp_path / "rec").mkdir()
    server, port = start_net_server(uls, "--mode", mode, "--record", tmp_path / "rec",
                                    "--max-conns", "3", ulsock=preloaded == "server")
    client = run_net_client(uls, port, "--mode", mode, "--conns", "3", "--bytes", str(size),
                            "--max-io", "7919", "--dump-dir", tmp_path / "sent",
                            ulsock=preloaded == "client")
    server.wait()
    for k in range(3):
        assert_same_files(tmp_path / "rec" / f"conn-{k}.bin", tmp_path / "sent" / f"tx-{k}.bin")
    check_paths(client, server, 3, port=port)
    uls.assert_no_shm_leftovers()


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("preloaded", ["client", "server"])
def test_server_speaks_first(uls, preloaded, size):
    """The server writes first, right after accept (a greeting banner, like SMTP): the
    client, plain or preloaded, gets exactly the stream, then EOF, nothing else."""
    server, port = start_net_server(uls, "--mode", "source", "--bytes", str(size),
                                    "--seed", "4242", "--max-conns", "3",
                                    ulsock=preloaded == "server")
    client = run_net_client(uls, port, "--mode", "source", "--bytes", str(size),
                            "--seed", "4242", "--conns", "3", ulsock=preloaded == "client")
    assert kv(client.output(), "OK")["rx"] == str(3 * size)
    server.wait()
    check_paths(client, server, 3, port=port)
    uls.assert_no_shm_leftovers()


@pytest.mark.parametrize("preloaded", ["client", "server", "both"])
def test_empty_connection(uls, tmp_path, preloaded):
    """connect() then close() without a byte: the server reads EOF at once and records
    nothing.  Each preloaded end still logs one decision per connection; which path does
    not matter here (the client may close before the server even accepted)."""
    (tmp_path / "rec").mkdir()
    server, port = start_net_server(uls, "--record", tmp_path / "rec", "--max-conns", "5",
                                    ulsock=preloaded in ("server", "both"))
    client = run_net_client(uls, port, "--mode", "none", "--conns", "5",
                            ulsock=preloaded in ("client", "both"))
    server.wait()
    for k in range(5):
        assert recorded(tmp_path, k) == b"", f"connection {k} carried bytes"
    assert all(r["rx"] == "0" and r["tx"] == "0" for r in server_conns(server)), server.output()
    for proc in (client, server):
        lines = proc.paths()
        assert len(lines) == (5 if proc.preloaded else 0), f"{proc.name}: {lines}"
        assert all(ln.path == "shm" or ln.reason for ln in lines), lines
    uls.assert_no_shm_leftovers()


@pytest.mark.parametrize("preloaded", ["both", "server", "client"])
def test_accept_after_client_closed(uls, tmp_path, preloaded):
    """The client sends a request, closes and exits before the server accepts (a load
    generator whose time is up, wrk against nginx): the server reads the request whole,
    then EOF. A ulsock server keeps the connection on kernel TCP and says why: "peer
    closed its socket before the accept" (whether or not the client ran ulsock: a
    segment, if there was one, went with it)."""
    go = tmp_path / "go"
    server, port = uls.server([sys.executable, str(LATE), "server", str(go)], name="late",
                              ulsock=preloaded in ("server", "both"))
    client = uls.run([sys.executable, str(LATE), "client", str(port)], name="early",
                     ulsock=preloaded in ("client", "both"))
    go.touch()
    server.wait()
    sent = kv(client.output(), "SENT")
    assert int(sent["n"]) > 0, client.describe()
    assert kv(server.output(), "GOT") == sent, server.describe()
    expect_paths(server, "kernel", count=1, reason="peer closed its socket before the accept",
                 local_port=port)
    assert all(ln.path != "shm" for ln in client.paths()), client.describe()
    uls.assert_no_shm_leftovers()
