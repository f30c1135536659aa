"""Benchmark rows between two hosts (issue 14): the fabric transport with libfabric's tcp
provider ("tcp;ofi_rxm") against libfabric's own fi_pingpong and against kernel TCP.

The hosts are two network namespaces that the bench makes once per run and deletes at its
end, joined by a veth pair on 10.234.N.1/24 (server, S) and 10.234.N.2/24 (client, C),
N = 1 + pid % 250; no other address is ever used. `ulsock fabricd` runs in S for the
whole run. Every server runs in S pinned to CPU 1 and every client in C pinned to CPU 0
(`taskset`), the placement of the fabric brief's measurements: unpinned, two busy-polling
processes on two vCPUs share a CPU with the softirqs of the veth and fi_pingpong's 64 B
half round trip moves from 14 us to 1.5 ms. Each run uses a new port (the namespaces are
the bench's own, so every port is free).

  fabric_pp64      64 B ping-pong, half round trip, microseconds (lower is better).
                   kernel and ulsock: `sockperf sr` in S, `sockperf pp -m 64 -t SECONDS`
                   in C. The number is RunTime / (2 x ReceivedMessages) of sockperf's
                   "[Total Run]" line, the mean half round trip over the whole run, counted
                   as fi_pingpong counts it (elapsed time over 2 x exchanges). Not its
                   "Latency is" summary: that one averages only the exchanges of a valid
                   period and is missing ("No valid observations") when the exchanges take
                   milliseconds. Where both exist they agree (14.5 us, kernel TCP here).
                   sockperf, the program of the one-host pp64 row, which serves in one
                   process. (ulsock-bench's --server forks a child per session, and a
                   connection moves back to kernel TCP at a fork in this cut of the fabric
                   transport; with --inline it serves in its own process and stays on the
                   fabric: test_bench_across_hosts_inline.)
                   reference: `fi_pingpong -p tcp -e rdm -S 64 -I ITERS`, its usec/xfer
                   (elapsed time over 2 x ITERS transfers: also the mean half round trip,
                   busy-polling the completion queue). sockperf runs for a time and
                   fi_pingpong for a count: ITERS = 40,000 per second of sockperf's run,
                   so that both run about as long.
  fabric_stream1m  1 MiB streaming, Gbit/s (higher is better).
                   kernel and ulsock: `iperf3 -s -1` in S, `iperf3 -c -l 1M -t SECONDS -J`
                   in C, the bits per second the server received.
                   reference: `fi_pingpong -p tcp -e rdm -S 1048576 -I ITERS`, its MB/sec
                   (2 x ITERS x 1 MiB over the elapsed time, 10^6 bytes a MB) as Gbit/s,
                   ITERS = 400 per second of iperf3's run.
                   That is ping-pong, one message in flight, not a stream: Debian 12's
                   libfabric-bin has only fi_pingpong, fi_info and fi_strerror, and
                   fabtests (fi_msg_bw, fi_rdm_tagged_bw) is not packaged.

  fabric_net_pp64, fabric_net_stream1m
                   the same two rows with the net provider on both sides: ulsock's
                   ULSOCK_FABRIC_PROVIDER=net and fi_pingpong's `-p net`.
  fabric_shm_pp64, fabric_shm_stream1m
                   the same with the shm provider (`-p shm`): the two namespaces share
                   one kernel and /dev/shm, so this is the fabric transport forced onto
                   shared memory on one host. shm has no completion-queue wait
                   descriptor: ulsock's sleepers look again in slices (protocol.md 9.13).

The kernel column runs the same two programs without the preload; the ulsock columns wrap
both ends with `ulsock run --profile P --` and set ULSOCK_FABRIC_PEERS=10.234.N.0/24,
ULSOCK_FABRIC_PROVIDER=tcp;ofi_rxm (net in the net rows), ULSOCK_LOG=info and
ULSOCK_LOG_FILE: a run counts only when every connection of both ends logged path=fabric.
One that stayed on kernel TCP fails with the reason ulsock gave ("ran on kernel TCP, not
the fabric: ..."), and is never a fabric figure. The fi_pingpong column is the benchmark's
reference (bench.py: a column of its own, and ulsock / reference beside ulsock / kernel).

The rows skip, saying why, where namespaces cannot be made (not root, no ip(8), no veth)
or fi_pingpong is not installed (scripts/install-deps.sh installs libfabric-bin).
"""

import atexit
import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

import benchlib
from benchlib import BenchError
from ulstest.env import clean_env
from ulstest.logs import PATH_LINE, matches

# The provider stacks of the rows, each with fi_pingpong's name of the same stack: tcp
# (rxm over the tcp provider's connections) and net, libfabric 1.17's fork of the tcp
# provider with an FI_EP_RDM of its own (fi_net(7): to be merged back into tcp), where the
# fabric sends DATA of up to 64 KiB in bulk slots (protocol.md 9.2).
PROVIDER = "tcp;ofi_rxm"
FI_NAME = {"tcp;ofi_rxm": "tcp", "net": "net", "shm": "shm"}
SERVER_CPU, CLIENT_CPU = "1", "0"
SOCKPERF_PP_MPS = benchlib.SOCKPERF_PP_MPS

# fi_pingpong iterations per second of the sockperf and iperf3 runs, so that the reference
# runs about as long as they do (14 us half round trips, about 2 GB/s at 1 MiB here).
FI_ITERS_PER_S_64, FI_ITERS_PER_S_1M = 40000, 400

_hosts = {}


class BenchSkip(BenchError):
    """The row cannot run on this machine at all; bench.py reports it as skipped."""
    skip = True


def _ip(*args):
    r = subprocess.run(["ip"] + list(args), capture_output=True, text=True, timeout=20)
    if r.returncode != 0:
        raise BenchSkip("ip %s: %s" % (" ".join(args), r.stderr.strip()))


def _cleanup():
    p = _hosts.pop("fabricd", None)
    if p is not None:
        p.stop()
        p.out.close()
    for ns in _hosts.pop("made", []):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)


def hosts(build_dir):
    """The two namespace hosts and fabricd, made at the first call; BenchSkip if they
    cannot be (the reason is kept: later calls skip at once)."""
    if "skip" in _hosts:
        raise BenchSkip(_hosts["skip"])
    if "s" in _hosts:
        return _hosts
    try:
        if os.geteuid() != 0 or not shutil.which("ip"):
            raise BenchSkip("network namespaces need root and ip(8)")
        if not shutil.which("fi_pingpong"):
            raise BenchSkip("fi_pingpong not installed (libfabric-bin: scripts/install-deps.sh)")
        ulsock = os.path.join(build_dir, "bin", "ulsock")
        if not os.access(ulsock, os.X_OK):
            raise BenchSkip("%s not built (run make build)" % ulsock)
        atexit.register(_cleanup)
        tag = os.getpid()
        net = "10.234.%d" % (1 + tag % 250)
        s, c = "ulsbf%ds" % tag, "ulsbf%dc" % tag
        _hosts["made"] = []
        for ns in (s, c):
            _ip("netns", "add", ns)
            _hosts["made"].append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        vs, vc = "ubf%ds" % (tag % 1000000), "ubf%dc" % (tag % 1000000)
        _ip("-n", s, "link", "add", vs, "type", "veth", "peer", "name", vc, "netns", c)
        for ns, dev, addr in ((s, vs, net + ".1/24"), (c, vc, net + ".2/24")):
            _ip("-n", ns, "addr", "add", addr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
        fd = benchlib.Proc(["ip", "netns", "exec", s, ulsock, "fabricd", "--foreground"],
                           clean_env())
        _hosts["fabricd"] = fd
        deadline = time.monotonic() + 10
        while "listening" not in fd.output():
            if fd.poll() is not None or time.monotonic() > deadline:
                raise BenchSkip("ulsock fabricd did not start:\n%s" % fd.output_tail())
            time.sleep(0.02)
    except BenchSkip as e:
        _cleanup()
        _hosts["skip"] = str(e)
        raise
    _hosts.update(s=s, c=c, net=net, saddr=net + ".1", port=20000, ulsock=ulsock)
    return _hosts


def _next_port(h):
    h["port"] += 1
    return h["port"]


def _in(ns, cpu, argv):
    return ["ip", "netns", "exec", ns, "taskset", "-c", cpu] + list(argv)


def _listening(pid, port):
    """True once process PID's network namespace has a TCP listener on PORT."""
    for name in ("tcp", "tcp6"):
        try:
            with open("/proc/%d/net/%s" % (pid, name)) as f:
                next(f, None)
                for line in f:
                    fl = line.split()
                    if len(fl) > 3 and fl[3] == "0A" and int(fl[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            pass
    return False


def _start(argv, env, port):
    p = benchlib.Proc(argv, env)
    deadline = time.monotonic() + 10
    while not _listening(p.pid, port):
        if p.poll() is not None or time.monotonic() > deadline:
            p.stop()
            out = p.output_tail()
            p.out.close()
            raise BenchError("%s did not listen on port %d:\n%s"
                             % (benchlib.prog_name(argv), port, out))
        time.sleep(0.01)
    return p


class _Ends:
    """The server and client command lines of one run on one substrate, with the
    environment and the log files that say which path each connection took."""

    def __init__(self, h, sub, d, provider):
        self.h, self.sub, self.logs, self.provider = h, sub, [], provider
        self.fabric = sub.profile is not None
        self.d = d

    def argv(self, side, argv):
        ns, cpu = (self.h["s"], SERVER_CPU) if side == "server" else (self.h["c"], CLIENT_CPU)
        if not self.fabric:
            return _in(ns, cpu, argv)
        log = os.path.join(self.d, side + ".log")
        self.logs.append((side, log))
        env = ["ULSOCK_FABRIC_PEERS=%s.0/24" % self.h["net"],
               "ULSOCK_FABRIC_PROVIDER=" + self.provider, "ULSOCK_LOG=info",
               "ULSOCK_LOG_FILE=" + log]
        return ["env"] + env + _in(ns, cpu, self.sub.wrap(argv))

    def check(self):
        """Every connection of both ends on the fabric, else BenchError with why not (each
        end's first reason)."""
        why = []
        for side, log in self.logs:
            try:
                with open(log) as f:
                    text = f.read()
            except OSError:
                text = ""
            paths = matches(text, PATH_LINE)
            if not paths:
                raise BenchError("the %s logged no path line (ulsock not loaded?)" % side)
            off = [m for m in paths if m["path"] != "fabric"]
            if off:
                why.append("%s: %s" % (side, off[0]["reason"] or off[0]["path"]))
        if why:
            raise BenchError("ran on kernel TCP, not the fabric (%s)" % "; ".join(why))


def _pair(sub, params, record, server_of, client_of, timeout, provider):
    """Runs server_of(port) in S and client_of(port) in C on SUB; returns the client's
    output once both ends' paths are checked."""
    h = hosts(params["build_dir"])
    port = _next_port(h)
    with tempfile.TemporaryDirectory(prefix="uls-bench-fabric-") as d:
        ends = _Ends(h, sub, d, provider)
        srv, cli = ends.argv("server", server_of(port)), ends.argv("client", client_of(port))
        record(srv)
        record(cli)
        p = _start(srv, clean_env(), port)
        try:
            out = benchlib.run(cli, clean_env(), timeout)
        finally:
            p.stop()
            p.out.close()
        ends.check()
    return out


FI_LINE = re.compile(r"^\s*(\d+[kKmMgG]?)\s+\S+\s+\S+\s+\S+\s+([0-9.]+)s\s+([0-9.]+)\s+"
                     r"([0-9.]+)\s+[0-9.]+\s*$", re.M)


def fi_pingpong(params, record, size, iters, provider):
    """fi_pingpong in S and C; returns (usec/xfer, MB/sec) of the client's line."""
    h = hosts(params["build_dir"])
    port = _next_port(h)
    base = ["fi_pingpong", "-p", FI_NAME[provider], "-e", "rdm", "-S", str(size), "-I",
            str(iters)]
    srv = _in(h["s"], SERVER_CPU, base + ["-B", str(port)])
    cli = _in(h["c"], CLIENT_CPU, base + ["-P", str(port), h["saddr"]])
    record(srv)
    record(cli)
    p = _start(srv, clean_env(), port)
    try:
        out = benchlib.run(cli, clean_env(), 120)
    finally:
        p.stop()
        p.out.close()
    m = FI_LINE.findall(out)
    if not m:
        raise BenchError("no fi_pingpong result in:\n%s" % out[-800:])
    return float(m[-1][3]), float(m[-1][2])


def pp64(sub, params, record, provider=PROVIDER):
    secs = max(1, int(params["seconds"]))
    h = hosts(params["build_dir"])
    out = _pair(sub, params, record,
                lambda port: ["sockperf", "sr", "--tcp", "-i", h["saddr"], "-p", str(port)],
                lambda port: ["sockperf", "pp", "--tcp", "-i", h["saddr"], "-p", str(port),
                              "-t", str(secs), "-m", "64", "--mps", SOCKPERF_PP_MPS],
                secs + 30, provider)
    m = re.findall(r"\[Total Run\] RunTime=([0-9.]+) sec;.*ReceivedMessages=(\d+)", out)
    if not m or not int(m[-1][1]):
        raise BenchError("no round trips in sockperf's output:\n%s" % out[-800:])
    return float(m[-1][0]) * 1e6 / (2 * int(m[-1][1]))


def pp64_reference(params, record, provider=PROVIDER):
    iters = FI_ITERS_PER_S_64 * max(1, int(params["seconds"]))
    return fi_pingpong(params, record, 64, iters, provider)[0]


def stream1m(sub, params, record, provider=PROVIDER):
    secs = max(1, int(params["iperf_seconds"]))
    h = hosts(params["build_dir"])
    out = _pair(sub, params, record,
                lambda port: ["iperf3", "-s", "-p", str(port), "-1"],
                lambda port: ["iperf3", "-c", h["saddr"], "-p", str(port), "-t", str(secs),
                              "-l", "1M", "-J"], secs + 30, provider)
    try:
        return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e9
    except (ValueError, KeyError, TypeError) as e:
        raise BenchError("bad iperf3 JSON (%s):\n%s" % (e, out[-1000:]))


def stream1m_reference(params, record, provider=PROVIDER):
    iters = FI_ITERS_PER_S_1M * max(1, int(params["iperf_seconds"]))
    return fi_pingpong(params, record, 1 << 20, iters, provider)[1] * 8 / 1000


class FabricBenchmark(benchlib.Benchmark):
    """A row whose reference column (bench.py) is fi_pingpong on the same hosts."""

    reference = "fi_pingpong"

    def __init__(self, name, title, unit, lower_is_better, fn, programs, ref_fn):
        super().__init__(name, title, unit, lower_is_better, fn, programs)
        self.ref_fn = ref_fn

    def run(self, sub, params, record):
        for prog in self.programs:
            if not shutil.which(prog):
                raise BenchSkip("%s not installed (run scripts/install-deps.sh)" % prog)
        hosts(params["build_dir"])
        if getattr(sub, "reference", False):
            return self.ref_fn(params, record)
        return super().run(sub, params, record)


def _rows(prefix, where, provider):
    """The two rows of one provider: ping-pong and stream, named PREFIX_pp64 and so on."""
    return [
        FabricBenchmark(prefix + "_pp64", where + ": ping-pong 64 B, half round trip", "usec",
                        True, functools.partial(pp64, provider=provider),
                        ["sockperf", "fi_pingpong", "taskset"],
                        functools.partial(pp64_reference, provider=provider)),
        FabricBenchmark(prefix + "_stream1m", where + ": stream, 1 MiB writes", "Gbit/s",
                        False, functools.partial(stream1m, provider=provider),
                        ["iperf3", "fi_pingpong", "taskset"],
                        functools.partial(stream1m_reference, provider=provider)),
    ]


BENCHMARKS = (_rows("fabric", "between hosts, fabric tcp", PROVIDER)
              + _rows("fabric_net", "between hosts, fabric net", "net")
              + _rows("fabric_shm", "one host, fabric shm", "shm"))
