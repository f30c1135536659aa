"""haproxy 2.6, unmodified, as a TCP proxy that splices, over ulsock.

One haproxy (`mode tcp`, in the foreground with -db) proxies three frontends to three
tests/helpers/net_server processes, one per mode, and tests/helpers/net_client drives
each through it with 8 MiB per connection, four connections, two at a time:
  echo    the client's bytes go to the server and come back (both directions at once),
  sink    the client's bytes go to the server, which answers their count and FNV-64,
  source  the server sends a seeded stream that the client verifies.
Every byte is checked by the helpers; haproxy's own log line per session (termination
state `--`, bytes up and down) is checked too.

Splicing: `option splice-auto` lets haproxy decide, `splice-request` + `splice-response`
force it on both channels. On kernel TCP haproxy then moves the bytes with splice(2),
socket -> pipe -> socket (`strace -f -e splice`: forced, about 1,100 calls per 32 MiB
one way, nearly all moving 16-64 KiB; auto, a part of the echo traffic and none of sink
and source). With both of haproxy's connections on the fast path a splice reads the
kernel socket, which after the switch carries ulsock's wake-up bytes, and writes into the
peer's kernel socket, whose bytes the peer takes for wake-ups: issue 12 point 3 asks
ulsock to serve splice; these tests assert the correct result.

Layouts (server, haproxy, client): all plain; all three under ulsock (both of haproxy's
connections on shm); haproxy plain with ulsock ends (each end falls back to the kernel);
haproxy under ulsock with plain ends (both of its connections on the kernel path).

Not tested: net_client's duplex mode, where both directions half-close while data is
still buffered. haproxy 2.6 then treats EPOLLHUP on a socket it polls for writing as an
error and drops the unread part of the other direction; kernel TCP does the same (3 in
30 plain runs with tune.sndbuf.server 65536 and tune.rcvbuf.client 1048576), and the
1 MiB rings make it likelier under ulsock (EPOLLHUP with unread data is what the kernel
reports as well: sk_shutdown == SHUTDOWN_MASK). No timing is asserted.
"""

import os
import re
import time

import pytest

from proglib import BUILD, assert_fast_path, assert_kernel_path, free_port, require
from ulstest import net

HELPERS = os.environ.get("ULSOCK_HELPERS") or os.path.join(BUILD, "tests", "helpers")
MODES = ("echo", "sink", "source")
NBYTES = 8 << 20
CONNS = 4
SEED = 1207

# (server, haproxy, client): which run under ulsock.
LAYOUTS = {
    "plain": (False, False, False),
    "all_ulsock": (True, True, True),
    "proxy_plain": (True, False, True),
    "ends_plain": (False, True, False),
}

SPLICE = {
    "nosplice": [],
    "auto": ["option splice-auto"],
    "forced": ["option splice-request", "option splice-response"],
}

CASES = [(layout, splice, 1) for layout in LAYOUTS for splice in SPLICE] + [
    (layout, splice, 2) for layout in ("plain", "all_ulsock") for splice in ("auto", "forced")]

# One line per session, written by haproxy to its stdout when the session ends.
LOG_FORMAT = "HAPROXY fe=%ft ts=%ts up=%U down=%B"
LOG_LINE = re.compile(r"^HAPROXY fe=(\S+) ts=(\S+) up=(\d+) down=(\d+)$")


def helper(name):
    path = os.path.join(HELPERS, name)
    if not os.access(path, os.X_OK):
        pytest.fail("%s is missing: build the tests (ninja tests/helpers/all) or set "
                    "ULSOCK_HELPERS" % path)
    return path


def write_config(tmp_path, threads, splice, routes):
    """routes: [(mode, frontend port, server port)]."""
    lines = ["global",
             "    maxconn 256",
             "    nbthread %d" % threads,
             "    log stdout format raw local0 info",
             "defaults",
             "    mode tcp",
             "    log global",
             '    log-format "%s"' % LOG_FORMAT,
             "    timeout connect 5s",
             "    timeout client 30s",
             "    timeout server 30s"]
    lines += ["    " + s for s in SPLICE[splice]]
    for mode, fport, sport in routes:
        lines += ["frontend fe_%s" % mode,
                  "    bind 127.0.0.1:%d" % fport,
                  "    default_backend be_%s" % mode,
                  "backend be_%s" % mode,
                  "    server s1 127.0.0.1:%d" % sport]
    path = tmp_path / "haproxy.cfg"
    path.write_text("\n".join(lines) + "\n")
    return path


def wait_ports(ports, proc, timeout=15):
    if net.wait_listening(ports, lambda: not proc.alive, timeout) != "listening":
        pytest.fail("haproxy not listening on %s:\n%s" % (ports, proc.text()[-3000:]))


def run_client(harness, end, mode, port):
    rc, out = harness.run(end, [helper("net_client"), "--port", str(port), "--mode", mode,
                                "--conns", str(CONNS), "--concurrency", "2",
                                "--bytes", str(NBYTES), "--seed", str(SEED),
                                "--max-io", "1M", "--timeout", "20"],
                          timeout=90, tag="client-" + mode)
    text = out.decode("utf-8", "replace")
    assert rc == 0, "net_client %s through haproxy exited %s:\n%s" % (mode, rc, text[-3000:])
    last = text.strip().splitlines()[-1]
    tx = NBYTES * CONNS if mode in ("echo", "sink") else 0
    rx = NBYTES * CONNS if mode in ("echo", "source") else 0
    assert last.startswith("OK conns=%d failed=0 tx=%d rx=%d " % (CONNS, tx, rx)), text[-3000:]


def check_server(proc, mode):
    """Every connection of the net_server behind haproxy ended well, with the right
    byte counts (the sink's answer is 'SINK <count> <16 hex>\\n'). The server writes a
    connection's line once it has seen haproxy close it, which may be just after haproxy
    logged the session."""
    deadline = time.monotonic() + 10
    while True:
        text = proc.text()
        rows = [ln for ln in text.splitlines() if ln.startswith("CONN ")]
        if len(rows) >= CONNS or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(rows) == CONNS, "net_server %s saw %d connections:\n%s" % (mode, len(rows),
                                                                           text[-3000:])
    reply = len("SINK %d " % NBYTES) + 17
    rx, tx = {"echo": (NBYTES, NBYTES), "sink": (NBYTES, reply), "source": (0, NBYTES)}[mode]
    for row in rows:
        assert row.endswith("result=ok") and " rx=%d tx=%d " % (rx, tx) in row, \
            "net_server %s: %s" % (mode, row)


def session_logs(proc, count, timeout=10):
    """haproxy's session lines; it logs a session when both of its sides have closed,
    which may be just after the client returns."""
    deadline = time.monotonic() + timeout
    while True:
        rows = [LOG_LINE.match(ln.strip()) for ln in proc.text().splitlines()]
        rows = [m for m in rows if m]
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


def check_sessions(proc):
    rows = session_logs(proc, CONNS * len(MODES))
    assert len(rows) == CONNS * len(MODES), "haproxy logged %d sessions:\n%s" % (
        len(rows), proc.text()[-3000:])
    reply = len("SINK %d " % NBYTES) + 17
    want = {"fe_echo": (NBYTES, NBYTES), "fe_sink": (NBYTES, reply),
            "fe_source": (0, NBYTES)}
    for m in rows:
        fe, ts, up, down = m[1], m[2], int(m[3]), int(m[4])
        assert ts == "--", "haproxy session on %s ended with state %s: %s" % (fe, ts, m[0])
        assert (up, down) == want[fe], "haproxy %s: up %d down %d bytes, want %s" % (
            fe, up, down, want[fe])


@pytest.mark.parametrize("layout,splice,threads", CASES,
                         ids=["%s-%s-%dthr" % c for c in CASES])
def test_proxy(harness, make_end, tmp_path, layout, splice, threads):
    require("haproxy")
    s_acc, h_acc, c_acc = LAYOUTS[layout]
    server_end = make_end("server", s_acc)
    proxy_end = make_end("haproxy", h_acc)
    client_end = make_end("client", c_acc)

    servers, routes = {}, []
    for mode in MODES:
        sport = free_port()
        servers[mode] = harness.start_server(
            server_end, [helper("net_server"), "--port", str(sport), "--mode", mode,
                         "--bytes", str(NBYTES), "--seed", str(SEED), "--timeout", "20"],
            sport, tag="server-" + mode)
        routes.append((mode, free_port(), sport))
    cfg = write_config(tmp_path, threads, splice, routes)
    proxy = harness.start_server(proxy_end, ["haproxy", "-db", "-f", str(cfg)], routes[0][1],
                                 tag="haproxy")
    wait_ports([r[1] for r in routes], proxy)

    for mode, fport, _ in routes:
        run_client(harness, client_end, mode, fport)
    check_sessions(proxy)
    for mode in MODES:
        check_server(servers[mode], mode)
    assert proxy.popen.poll() is None, "haproxy exited:\n%s" % proxy.text()[-3000:]

    # Each of haproxy's sessions is two connections: the accepted one and its own to
    # the server. Every one must have taken the path the layout promises.
    sessions = CONNS * len(MODES)
    if layout == "all_ulsock":
        assert_fast_path(server_end, proxy_end, client_end)
        assert len(proxy_end.connections()) >= 2 * sessions, proxy_end.log_text()
    elif layout == "proxy_plain":
        assert_kernel_path(server_end)
        assert_kernel_path(client_end)
    elif layout == "ends_plain":
        assert_kernel_path(proxy_end)
        assert len(proxy_end.connections()) >= 2 * sessions, proxy_end.log_text()
