"""An event loop in an interpreted language: Python asyncio over ulsock.

Both ends are tests/programs/asyncio_frames.py run by Debian's /usr/bin/python3 in
isolated mode (-I: no PYTHONPATH, no user site, never the project's virtual environment):
an asyncio.start_server server and a client with many concurrent connections, each with
a writer and a reader task, length-prefixed frames from 0 bytes to 1 MiB, a SHA-256
digest per response, every tag and byte checked. The sendfile variant also asks for
slices of a file that the server sends with loop.sendfile(fallback=False), which is
os.sendfile on the socket; the server counts those calls and their bytes. Layouts: both
plain, both under ulsock (fast path in both logs), one end plain each way.
"""

import os

import pytest

from modes import assert_pair_paths
from proglib import free_port, last_kv

PYTHON = "/usr/bin/python3"
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "asyncio_frames.py")

# (server, client): which run under ulsock.
LAYOUTS = {
    "plain": (False, False),
    "both_ulsock": (True, True),
    "server_ulsock": (True, False),
    "client_ulsock": (False, True),
}


def run_pair(harness, make_end, layout, conns, requests, file_path=None, file_requests=0):
    if not os.access(PYTHON, os.X_OK):
        pytest.skip("%s is not installed" % PYTHON)
    s_acc, c_acc = LAYOUTS[layout]
    server_end, client_end = make_end("server", s_acc), make_end("client", c_acc)
    port = free_port()
    extra = ["--file", str(file_path)] if file_path else []
    server = harness.start_server(server_end, [PYTHON, "-I", SCRIPT, "server", "--port",
                                               str(port), "--conns", str(conns)] + extra, port)
    rc, out = harness.run(client_end, [PYTHON, "-I", SCRIPT, "client", "--port", str(port),
                                       "--conns", str(conns), "--requests", str(requests),
                                       "--seed", "1125", "--file-requests",
                                       str(file_requests), "--timeout", "60"] + extra,
                          timeout=90)
    text = out.decode("utf-8", "replace")
    assert rc == 0, "client exited %s:\n%s" % (rc, text[-3000:])
    got = last_kv(text, "OK")
    assert got["failed"] == "0" and got["conns"] == str(conns), text[-3000:]
    assert got["requests"] == str(conns * (requests + file_requests)), text[-3000:]
    # The server exits by itself once every connection ended.
    src = server.wait(30)
    stext = server.text()
    assert src == 0, "server exited %s:\n%s" % (src, stext[-3000:])
    served = last_kv(stext, "SERVED")
    assert served["errors"] == "0" and served["conns"] == str(conns), stext[-3000:]
    assert served["requests"] == got["requests"], (served, got)
    # Byte counts agree end to end: what one side sent, the other received.
    assert (served["rx"], served["tx"]) == (got["tx"], got["rx"]), (served, got)
    return server_end, client_end, served


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_frames(harness, make_end, layout):
    """50 concurrent connections, 8 pipelined frames each (one of them 1 MiB)."""
    server_end, client_end, _ = run_pair(harness, make_end, layout, conns=50, requests=8)
    assert_pair_paths(server_end, client_end)
    if layout == "both_ulsock":
        assert len(server_end.connections()) == 50, server_end.log_text()


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_sendfile(harness, make_end, tmp_path, layout):
    """10 connections, each 8 echo frames and 4 slices of a 2 MiB file sent with
    loop.sendfile (os.sendfile on the socket), interleaved in random order."""
    path = tmp_path / "served.bin"
    path.write_bytes(os.urandom((2 << 20) + 17))
    server_end, client_end, served = run_pair(harness, make_end, layout, conns=10,
                                              requests=8, file_path=path, file_requests=4)
    assert int(served["sendfile_calls"]) >= 40, served
    assert int(served["sendfile_bytes"]) > 0, served
    assert_pair_paths(server_end, client_end)
