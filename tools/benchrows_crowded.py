"""Benchmark rows for issue 15: crowded machines, sleeping receivers, short connections.

- hotspotN_p50, hotspotN_p99: ulsock-bench's hotspot test, N client processes (1, 4, 16,
  64) each in a ping-pong of 64-byte messages with one server process, which serves them
  all; the median and the 99th percentile of a message's round trip. With 16 and 64
  clients the busy processes outnumber this VM's two cores: the case where a spinning
  wait takes the core its peer needs. The two percentiles are separate rows (each its own
  run): the framework keeps one number a run.
- ganglia: ulsock-bench's ganglia test, a connection per fetch of 2 to 10 KiB (seed 001's
  monitoring pattern): connections a second.
- redis50t2: redis-benchmark GET with 50 clients and `--threads 2`, sized to last about 2 s
  or more on any substrate (the redis50 row's 100,000 requests take 0.1 to 0.3 s under
  ulsock, too short to mean much).

ulsock-bench forks its server from the client's process, so the substrate's wrapper puts
both under the same ulsock profile (or none, for kernel TCP). Every ulsock-bench row
checks its bytes (`verified`); one that did not gives no number.
"""

import json
import os

import benchlib
from benchlib import BenchError, _client


def _ubench_row(test, out):
    """The JSON line of TEST in ulsock-bench --json-lines output, verified."""
    for line in out.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if row.get("test") == test:
            if row.get("verified") is not True:
                raise BenchError("ulsock-bench %s: bytes not verified:\n%s" % (test, line))
            return row
    raise BenchError("ulsock-bench printed no %s row:\n%s" % (test, out[-1500:]))


def _ubench(params, test, args, record, sub):
    prog = os.path.join(params["build_dir"], "bin", "ulsock-bench")
    if not os.access(prog, os.X_OK):
        raise BenchError("%s not built (run make build)" % prog)
    secs = max(1, int(params["seconds"]))
    out = _client(sub, [prog, test, "--time", str(secs), "--json-lines"] + args, record,
                  secs + 60)
    return _ubench_row(test, out)


def hotspot(clients, key):
    def fn(sub, params, record):
        row = _ubench(params, "hotspot", ["--clients", str(clients)], record, sub)
        if key not in row:
            raise BenchError("ulsock-bench hotspot row without %s: %r" % (key, row))
        return float(row[key])
    return fn


def ganglia(sub, params, record):
    row = _ubench(params, "ganglia", [], record, sub)
    return float(row["conn_s"])


BENCHMARKS = []
for _n in (1, 4, 16, 64):
    BENCHMARKS.append(benchlib.Benchmark(
        "hotspot%d_p50" % _n, "ulsock-bench hotspot, %d client%s, median round trip"
        % (_n, "" if _n == 1 else "s"), "usec", True, hotspot(_n, "lat_median_us"), []))
    BENCHMARKS.append(benchlib.Benchmark(
        "hotspot%d_p99" % _n, "ulsock-bench hotspot, %d client%s, p99 round trip"
        % (_n, "" if _n == 1 else "s"), "usec", True, hotspot(_n, "lat_p99_us"), []))
BENCHMARKS += [
    benchlib.Benchmark("ganglia", "ulsock-bench ganglia, a connection per 2-10 KiB fetch",
                       "conn/s", False, ganglia, []),
    # 20 times the redis50 row's requests: 2 s and more on every substrate here (about
    # 1 M requests/s at best).
    benchlib.Benchmark("redis50t2", "redis-benchmark GET, 50 clients, 2 threads", "req/s",
                       False, benchlib.redis_get(50, threads=2, scale=20),
                       ["redis-server", "redis-benchmark"]),
]
