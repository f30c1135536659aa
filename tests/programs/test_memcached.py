"""memcached 1.6 (threaded, libevent) and the libmemcached tools, unmodified, over ulsock.

The server runs in the foreground with four worker threads: its listener thread accepts
and hands each connection to a worker through libevent, so every connection is served
by another thread than the one that accepted it. Debian names the libmemcached tools
with a `memc` prefix:
  memccapable  memcached's protocol conformance test, 27 ascii and 27 binary commands
               (one `[pass]`, `[skip]` or `[FAIL]` line each, then "All tests passed");
  memccp       stores files (key = file name); memccat prints values, each followed by one
               newline, binary-safe (fwrite of the value's length, NULs and CRLFs kept);
  memcaslap    a load generator that verifies a share of what it reads back;
  memcstat     the server's `stats`, read here for its own error counters.
Layouts: both plain, both under ulsock (fast path checked in both logs), and one end
plain each way (the ulsock end logs path=kernel with a reason). No timing is asserted.
"""

import os
import random
import re

import pytest

from modes import assert_pair_paths
from proglib import free_port, require

# (server, client): which run under ulsock.
LAYOUTS = {
    "plain": (False, False),
    "both_ulsock": (True, True),
    "server_ulsock": (True, False),
    "client_ulsock": (False, True),
}

_rng = random.Random(20251125)
VALUES = {
    "empty": b"",
    "one": b"\x00",
    "text": b"hello, memcached over ulsock",
    "protocol_like": b"VALUE x 0 5\r\nEND\r\n\x00STORED\r\n",
    "all_bytes": bytes(range(256)) * 64,
    "odd_64k": _rng.randbytes(65536 + 7),
    "half_mib": _rng.randbytes(500000),
    "one_mib": _rng.randbytes(1 << 20),
}

# Server counters that must stay 0: each one counts a failure memcached saw.
ERROR_COUNTERS = ("rejected_connections", "listen_disabled_num", "malloc_fails",
                  "read_buf_oom", "response_obj_oom", "auth_errors", "store_too_large",
                  "store_no_memory")

CAPABLE_LINE = re.compile(r"^(ascii|binary) (.+?)\s+\[(pass|skip|FAIL)\]$")


def ends(make_end, layout):
    s, c = LAYOUTS[layout]
    return make_end("server", s), make_end("client", c)


@pytest.fixture
def memcached(harness):
    """start(end) -> port of a fresh memcached run as end: four threads, TCP only,
    items up to 2 MiB (a 1 MiB value plus its header must fit)."""
    def start(end):
        require("memcached")
        port = free_port()
        argv = ["memcached", "-t", "4", "-l", "127.0.0.1", "-p", str(port), "-U", "0",
                "-I", "2m", "-m", "64", "-c", "1024"]
        if os.geteuid() == 0:
            argv += ["-u", "root"]  # memcached refuses to run as root otherwise
        harness.start_server(end, argv, port, tag="memcached")
        return port
    return start


def tool(harness, end, argv, timeout=60, ok_codes=(0,)):
    require(argv[0])
    rc, out = harness.run(end, argv, timeout=timeout, tag=argv[0])
    assert rc in ok_codes, "%s exited %s:\n%r" % (" ".join(argv), rc, out[-2000:])
    return out


def stats(harness, end, port):
    """The server's counters through memcstat, as {name: string}."""
    out = tool(harness, end, ["memcstat", "--servers=127.0.0.1:%d" % port])
    got = {}
    for line in out.decode("utf-8", "replace").splitlines():
        m = re.match(r"^\s+(\w+): (.*)$", line)
        if m:
            got[m[1]] = m[2].strip()
    assert "curr_connections" in got, "memcstat printed no stats:\n%r" % out[-2000:]
    return got


def check_no_errors(st):
    bad = {k: st.get(k) for k in ERROR_COUNTERS if st.get(k, "0") != "0"}
    assert not bad, "memcached counted errors: %s" % bad


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_memccapable(harness, make_end, memcached, layout):
    """Every ascii and binary command of memcached's conformance test passes."""
    server_end, client_end = ends(make_end, layout)
    port = memcached(server_end)
    out = tool(harness, client_end, ["memccapable", "-h", "127.0.0.1", "-p", str(port),
                                     "-t", "10"], timeout=90)
    text = out.decode("utf-8", "replace")
    results = [CAPABLE_LINE.match(line.strip()) for line in text.splitlines()]
    results = [m for m in results if m]
    failed = [m[0] for m in results if m[3] != "pass"]
    assert not failed, "memccapable:\n%s" % "\n".join(failed)
    for proto in ("ascii", "binary"):
        n = sum(1 for m in results if m[1] == proto)
        assert n >= 20, "only %d %s tests ran:\n%s" % (n, proto, text[-3000:])
    assert "All tests passed" in text, text[-3000:]
    check_no_errors(stats(harness, client_end, port))
    assert_pair_paths(server_end, client_end)


@pytest.mark.parametrize("protocol", ["ascii", "binary"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_values(harness, make_end, memcached, tmp_path, layout, protocol):
    """Values of 0 bytes to 1 MiB go in with memccp and come back byte for byte with
    memccat; the server counted exactly those sets and hits and no error."""
    server_end, client_end = ends(make_end, layout)
    port = memcached(server_end)
    vdir = tmp_path / "values"
    vdir.mkdir()
    for name, value in VALUES.items():
        (vdir / name).write_bytes(value)
    servers = "--servers=127.0.0.1:%d" % port
    flags = ["--binary"] if protocol == "binary" else []
    names = list(VALUES)
    tool(harness, client_end, ["memccp", servers] + flags + [str(vdir / n) for n in names])
    out = tool(harness, client_end, ["memccat", servers] + flags + names)
    want = b"".join(VALUES[n] + b"\n" for n in names)
    pos = 0
    for n in names:
        got = out[pos:pos + len(VALUES[n]) + 1]
        assert got == VALUES[n] + b"\n", "%s: value differs (%d bytes expected, output %d " \
            "bytes in all)" % (n, len(VALUES[n]), len(out))
        pos += len(VALUES[n]) + 1
    assert out == want
    st = stats(harness, client_end, port)
    check_no_errors(st)
    assert st["curr_items"] == str(len(names)), st
    assert st["cmd_set"] == str(len(names)), st
    assert st["get_hits"] == str(len(names)) and st["get_misses"] == "0", st
    assert_pair_paths(server_end, client_end)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_load(harness, make_end, memcached, layout):
    """memcaslap: 16 connections on two threads, 9 gets to 1 set, a tenth of the gets
    verified against what was set; none may fail or miss."""
    server_end, client_end = ends(make_end, layout)
    port = memcached(server_end)
    out = tool(harness, client_end, ["memcaslap", "-s", "127.0.0.1:%d" % port, "-T", "2",
                                     "-c", "16", "-x", "30000", "-v", "0.1"], timeout=90)
    text = out.decode("utf-8", "replace")
    got = dict(re.findall(r"^(\w+): (\d+)$", text, re.M))
    for key in ("cmd_get", "cmd_set", "verify_failed", "verify_misses", "get_misses"):
        assert key in got, "memcaslap printed no %s:\n%s" % (key, text[-3000:])
    assert int(got["cmd_get"]) + int(got["cmd_set"]) >= 30000, text[-3000:]
    assert got["verify_failed"] == "0" and got["verify_misses"] == "0", text[-3000:]
    assert got["get_misses"] == "0", text[-3000:]
    st = stats(harness, client_end, port)
    check_no_errors(st)
    assert int(st["cmd_get"]) >= int(got["cmd_get"]), (st, got)
    assert_pair_paths(server_end, client_end)
