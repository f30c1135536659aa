"""Node.js over ulsock: libuv's event loop (epoll, non-blocking sockets, writev) and the
threads Node starts for itself.

Both ends are tests/programs/node_frames.js run by /usr/bin/node (Debian's nodejs): a
net.createServer server and a client with 20 concurrent connections, each writing 8
length-prefixed requests of 0 bytes to 1 MiB before reading, the server answering each
with the payload's SHA-256 and the payload; every tag, digest and byte is checked, and
the byte counts of both ends agree. Layouts: both plain, both under ulsock (fast path in
both logs), one end plain each way. Node starts threads with small stacks of its own at
every start: under a library with a large static TLS they failed ("pthread_create:
Invalid argument" on stderr), so no end may print that.
"""

import os
import shutil

import pytest

from modes import assert_pair_paths
from proglib import free_port, last_kv

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_frames.js")
CONNS, REQUESTS = 20, 8

# (server, client): which run under ulsock.
LAYOUTS = {
    "plain": (False, False),
    "both_ulsock": (True, True),
    "server_ulsock": (True, False),
    "client_ulsock": (False, True),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_frames(harness, make_end, layout):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node (Debian's nodejs) is not installed")
    s_acc, c_acc = LAYOUTS[layout]
    server_end, client_end = make_end("server", s_acc), make_end("client", c_acc)
    port = free_port()
    server = harness.start_server(server_end, [node, SCRIPT, "server", str(port), str(CONNS)],
                                  port)
    rc, out = harness.run(client_end, [node, SCRIPT, "client", str(port), str(CONNS),
                                       str(REQUESTS), "1125"], timeout=90)
    text = out.decode("utf-8", "replace")
    assert rc == 0, "client exited %s:\n%s" % (rc, text[-3000:])
    got = last_kv(text, "OK")
    assert got["failed"] == "0" and got["conns"] == str(CONNS), text[-3000:]
    assert got["requests"] == str(CONNS * REQUESTS), text[-3000:]
    src = server.wait(30)
    stext = server.text()
    assert src == 0, "server exited %s:\n%s" % (src, stext[-3000:])
    served = last_kv(stext, "SERVED")
    assert served["errors"] == "0" and served["conns"] == str(CONNS), stext[-3000:]
    assert served["requests"] == got["requests"], (served, got)
    assert (served["rx"], served["tx"]) == (got["tx"], got["rx"]), (served, got)
    for name, t in (("client", text), ("server", stext)):
        assert "pthread_create" not in t, "%s:\n%s" % (name, t[-3000:])
    assert_pair_paths(server_end, client_end)
    if layout == "both_ulsock":
        assert len(server_end.connections()) == CONNS, server_end.log_text()
