"""redis-server, redis-cli and redis-benchmark, unmodified, over ulsock.

Values go in through `redis-cli -x SET` (stdin, binary-safe, no argv size limit) and
come back through `redis-cli GET`, which prints the raw bytes and one newline when its
output is not a terminal. No timing is asserted.
"""

import random
import re

import pytest

from proglib import (assert_fast_path, assert_kernel_path, both_ulsock, free_port,
                     one_plain, require)
from ulstest import logs

VALUES = {
    "text": b"hello, ulsock",
    "binary": bytes(range(256)) * 4,
    "crlf_nul": b"a\r\nb\x00c\r\n\r\n$5\r\n*1\r\n",
    "newline_end": b"trailing newline\n",
    "one_mib": random.Random(20251122).randbytes(1 << 20),
}


@pytest.fixture
def redis_server(harness, tmp_path):
    """start(end) -> port of a fresh redis-server run as end, no persistence."""
    def start(end):
        require("redis-server")
        port = free_port()
        harness.start_server(end, ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                   "--save", "", "--appendonly", "no", "--dir", str(tmp_path),
                                   "--daemonize", "no"], port)
        return port
    return start


def cli(harness, end, port, args, stdin_data=None):
    require("redis-cli")
    rc, out = harness.run(end, ["redis-cli", "-p", str(port)] + args, timeout=60,
                          stdin_data=stdin_data, tag="redis-cli")
    assert rc == 0, "redis-cli %s exited %s:\n%r" % (args[0], rc, out[-2000:])
    return out


def set_get(harness, end, port, key, value):
    assert cli(harness, end, port, ["-x", "SET", key], stdin_data=value) == b"OK\n"
    got = cli(harness, end, port, ["GET", key])
    assert got[:-1] == value, "%s: got %d bytes back, set %d (first difference at %s)" % (
        key, len(got) - 1, len(value), first_difference(got[:-1], value))
    assert got[-1:] == b"\n"
    assert cli(harness, end, port, ["STRLEN", key]) == b"%d\n" % len(value)


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def benchmark(harness, end, port, clients, tests="set,get", n=2000):
    """Runs redis-benchmark; returns {TEST: requests per second}."""
    require("redis-benchmark")
    rc, out = harness.run(end, ["redis-benchmark", "-p", str(port), "-t", tests, "-c",
                                str(clients), "-n", str(n), "-d", "100", "-q"],
                          timeout=120, tag="redis-benchmark")
    text = out.decode("utf-8", "replace")
    assert rc == 0, "redis-benchmark exited %s:\n%s" % (rc, text[-3000:])
    rates = {m[0]: float(m[1]) for m in
             re.findall(r"(\w+): ([0-9.]+) requests per second", text)}
    for t in tests.upper().split(","):
        assert rates.get(t, 0) > 0, "no %s rate:\n%s" % (t, text[-3000:])
    return rates


@pytest.mark.parametrize("name", list(VALUES))
def test_values_fast_path(harness, make_end, redis_server, name):
    server_end, client_end = both_ulsock(make_end)
    port = redis_server(server_end)
    set_get(harness, client_end, port, "key:" + name, VALUES[name])
    assert_fast_path(server_end, client_end)


@pytest.mark.parametrize("clients", [1, 50])
def test_benchmark_fast_path(harness, make_end, redis_server, clients):
    server_end, client_end = both_ulsock(make_end)
    port = redis_server(server_end)
    benchmark(harness, client_end, port, clients)
    # The server still answers correctly after the load.
    set_get(harness, client_end, port, "after", VALUES["binary"])
    assert_fast_path(server_end, client_end)


@pytest.mark.parametrize("accelerated", ["server", "client"])
def test_one_end_plain(harness, make_end, redis_server, accelerated):
    server_end, client_end = one_plain(make_end, accelerated)
    port = redis_server(server_end)
    for name in ("binary", "one_mib"):
        set_get(harness, client_end, port, "key:" + name, VALUES[name])
    benchmark(harness, client_end, port, 10)
    assert_kernel_path(server_end if accelerated == "server" else client_end)



def test_bgsave_child_gives_its_count_back(harness, make_end, redis_server):
    """BGSAVE forks a child that writes the snapshot and leaves with _exit, closing none of
    the client sockets it inherited. Each connection open at the fork was counted twice
    (design.md, "Fork children, counted"); the child's exit gives its count back, so the
    server's connection is its own again (no locks, pipe wake-ups) once the child is gone.
    The client keeps one connection through it all: the BGSAVE, then waits in the server
    (WAIT with no replica returns at its timeout) and asks whether the save ended."""
    server_end, client_end = both_ulsock(make_end)
    server_end.log_level = "debug"
    port = redis_server(server_end)
    rounds = 6
    script = b"SET k v\nBGSAVE\n" + b"WAIT 1 300\nINFO persistence\n" * rounds + b"GET k\n"
    out = cli(harness, client_end, port, [], stdin_data=script).decode("utf-8", "replace")
    assert "Background saving started" in out, out
    ended = re.findall(r"rdb_bgsave_in_progress:(\d)", out)
    assert len(ended) == rounds, out
    assert out.rstrip().endswith("v"), out[-500:]
    assert_fast_path(server_end, client_end)
    if ended[-2] != "0":
        pytest.skip("the BGSAVE child was still running after %d rounds: nothing to check"
                    % (rounds - 1))
    assert "rdb_last_bgsave_status:ok" in out, out
    conns = server_end.connections()
    main_pid = conns[0]["pid"]
    alone = [(int(m[1]), m[2], m[3])
             for m in logs.matches(server_end.log_text(), logs.ALONE_LINE)]
    held = [(c["pid"], c["local"], c["peer"]) for c in conns]
    # The connection of the redis-cli that asked for the BGSAVE, in the server itself.
    assert any(a in held and a[0] == main_pid for a in alone), \
        "no connection became the server's own again: %s\n%s" % (
            alone, server_end.log_text()[-3000:])
