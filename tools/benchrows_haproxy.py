"""Benchmark rows for haproxy 2.6 as a TCP proxy (`mode tcp`, `option splice-auto`).

haproxy runs in the foreground (-db) with one thread, a config in a temporary directory
and no stats socket, between a client and a server on loopback; all three processes are
wrapped by the substrate, so under ulsock both of haproxy's connections of each session
are on the fast path.
  haproxy_iperf3  iperf3 -t params["seconds"] with 128 KiB writes through haproxy to an
                  iperf3 server: Gbit/s received. On kernel TCP haproxy moves the stream
                  with splice(2).
  haproxy_mc32    memcaslap (32 connections, 9 gets to 1 set of 1 KiB values, a
                  thousandth of the gets verified) through haproxy to memcached: op/s.
Each run lasts params["seconds"] (>= 2 s in the full mode, 1 s in --smoke).
"""

import json
import os
import tempfile

import benchlib
from benchlib import BenchError, _client, _server, free_port
from benchrows_memcached import memcached_argv, memcaslap_argv, memcaslap_tps

CONFIG = """\
global
    maxconn 1024
    nbthread 1
defaults
    mode tcp
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    option splice-auto
frontend fe
    bind 127.0.0.1:{front}
    default_backend be
backend be
    server s1 127.0.0.1:{back}
"""


def _proxied(sub, record, server_argv, back, client_argv_of, timeout):
    """Starts the server on port back and haproxy in front of it; runs the client
    (client_argv_of(front port)); returns its output. Stops both servers always."""
    front = free_port()
    with tempfile.TemporaryDirectory(prefix="uls-bench-haproxy-") as d:
        cfg = os.path.join(d, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write(CONFIG.format(front=front, back=back))
        with _server(sub, server_argv, back, record):
            with _server(sub, ["haproxy", "-db", "-f", cfg], front, record):
                return _client(sub, client_argv_of(front), record, timeout)


def haproxy_iperf3(sub, params, record):
    back = free_port()
    secs = max(1, int(params["seconds"]))
    out = _proxied(sub, record, ["iperf3", "-s", "-p", str(back), "-1"], back,
                   lambda front: ["iperf3", "-c", "127.0.0.1", "-p", str(front), "-t",
                                  str(secs), "-l", "128K", "-J"], secs + 60)
    try:
        report = json.loads(out)
        if "error" in report:
            raise BenchError("iperf3: %s" % report["error"])
        return report["end"]["sum_received"]["bits_per_second"] / 1e9
    except (ValueError, KeyError, TypeError) as e:
        raise BenchError("bad iperf3 JSON (%s):\n%s" % (e, out[-1000:]))


def haproxy_memcached(sub, params, record):
    back = free_port()
    secs = max(1, int(params["seconds"]))
    out = _proxied(sub, record, memcached_argv(back), back,
                   lambda front: memcaslap_argv(front, 2, 32, secs), secs + 60)
    return memcaslap_tps(out)


BENCHMARKS = [
    benchlib.Benchmark("haproxy_iperf3", "iperf3 through haproxy (tcp, splice-auto)",
                       "Gbit/s", False, haproxy_iperf3, ["haproxy", "iperf3"]),
    benchlib.Benchmark("haproxy_mc32", "memcaslap through haproxy to memcached, 32 conns",
                       "op/s", False, haproxy_memcached,
                       ["haproxy", "memcached", "memcaslap"]),
]
