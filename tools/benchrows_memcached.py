"""Benchmark rows for memcached with memcaslap: gets and sets per second.

memcached runs in the foreground with four worker threads, TCP only, 64 MiB of cache.
memcaslap (libmemcached-tools, Debian's name for memaslap) sets and gets 1 KiB values in
its default mix (9 gets to 1 set) for params["seconds"] (>= 2 s in the full mode, 1 s
in --smoke) and reports operations per second (TPS). Both processes are wrapped by the
substrate. A run whose verification or gets failed gives no number.
"""

import os
import re

import benchlib
from benchlib import BenchError, _client, _server, free_port, parse_float


def memcached_argv(port):
    argv = ["memcached", "-t", "4", "-l", "127.0.0.1", "-p", str(port), "-U", "0",
            "-m", "64", "-c", "1024"]
    if os.geteuid() == 0:
        argv += ["-u", "root"]  # memcached refuses to run as root otherwise
    return argv


def memcaslap_argv(port, threads, conns, secs):
    """-v 0.001: a thousandth of the gets is compared with what was set (checks
    correctness at a cost the rate does not notice)."""
    return ["memcaslap", "-s", "127.0.0.1:%d" % port, "-T", str(threads), "-c", str(conns),
            "-t", "%ds" % secs, "-X", "1024", "-v", "0.001"]


def memcaslap_tps(out):
    """The operations per second memcaslap printed; failed checks raise BenchError."""
    for key in ("verify_failed", "verify_misses"):
        m = re.search(r"^%s: (\d+)$" % key, out, re.M)
        if m and m[1] != "0":
            raise BenchError("memcaslap %s=%s:\n%s" % (key, m[1], out[-1500:]))
    return parse_float(r"TPS: ([0-9.]+)", out, "operations per second")


def memcached_slap(threads, conns):
    def fn(sub, params, record):
        port = free_port()
        secs = max(1, int(params["seconds"]))
        with _server(sub, memcached_argv(port), port, record):
            out = _client(sub, memcaslap_argv(port, threads, conns, secs), record, secs + 60)
        return memcaslap_tps(out)
    return fn


BENCHMARKS = [
    benchlib.Benchmark("memcached1", "memcached + memcaslap get/set 9:1, 1 connection",
                       "op/s", False, memcached_slap(1, 1), ["memcached", "memcaslap"]),
    benchlib.Benchmark("memcached32", "memcached + memcaslap get/set 9:1, 32 connections",
                       "op/s", False, memcached_slap(2, 32), ["memcached", "memcaslap"]),
]
