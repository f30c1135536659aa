"""Shared by tools/bench.py and tools/demo.py: substrates, bounded processes, benchmarks.

A substrate is how both ends of a benchmark run: plain kernel TCP, or each end wrapped
with `ulsock run --profile P --`. A benchmark starts its server on a free loopback port,
runs its client, parses one number from the client's output and always stops the server.
Every process runs in its own session with a timeout, so a hung peer cannot hang the
tool: on timeout or error the whole process group is killed.
"""

import atexit
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "pylib"))
from ulstest import net, procs  # noqa: E402
from ulstest.env import clean_env  # noqa: E402
from ulstest.net import free_port  # noqa: E402, F401 (benchrows_*.py import it from here)

# Processes started by start() that have not been stopped yet; atexit kills them.
_live = set()


class BenchError(Exception):
    """One run failed; the message says why (shown in progress output, not fatal)."""


def default_build_dir():
    return os.environ.get("ULSOCK_BUILD") or os.path.join(ROOT, "build")


class Substrate:
    """Kernel TCP (profile None) or ulsock with one profile."""

    def __init__(self, profile, build_dir):
        self.profile = profile
        self.ulsock = os.path.join(build_dir, "bin", "ulsock")
        self.name = "kernel" if profile is None else "ulsock-" + profile

    def wrap(self, argv):
        if self.profile is None:
            return list(argv)
        return [self.ulsock, "run", "--profile", self.profile, "--"] + list(argv)

    def env(self):
        return clean_env()

    def check(self):
        if self.profile is not None and not os.access(self.ulsock, os.X_OK):
            raise BenchError("%s not built (run make build)" % self.ulsock)


def wait_listening(port, proc, timeout=10.0):
    """Waits until something listens on port, reading /proc rather than connecting:
    a probe connection would count as a client (iperf3 -1 would then exit)."""
    state = net.wait_listening([port], lambda: proc.poll() is not None, timeout)
    if state == "exited":
        raise BenchError("%s exited with status %s before listening:\n%s"
                         % (prog_name(proc.argv), proc.returncode, proc.output_tail()))
    if state == "timeout":
        raise BenchError("server not listening on port %d after %.0f s" % (port, timeout))


def start_ready(argv, env, port, phrase, timeout):
    """Starts a server that listens before it takes sessions (a database) and waits, up
    to TIMEOUT seconds each, until it listens on PORT and its output says PHRASE."""
    p = Proc(argv, env)
    try:
        wait_listening(port, p, timeout=timeout)
        deadline = time.monotonic() + timeout
        while phrase not in p.output():
            if p.poll() is not None or time.monotonic() > deadline:
                raise BenchError("%s did not become ready:\n%s"
                                 % (prog_name(argv), p.output_tail()))
            time.sleep(0.02)
    except BaseException:
        p.stop()
        p.out.close()
        raise
    return p


class Proc(procs.GroupProc):
    """A background process in its own session, output in a temporary file."""

    def __init__(self, argv, env):
        self.out = tempfile.TemporaryFile(prefix="uls-bench-")
        try:
            super().__init__(argv, procs.spawn(argv, env, self.out))
        except OSError as e:
            self.out.close()
            raise BenchError("cannot start %s: %s" % (argv[0], e))
        _live.add(self)
        self.returncode = None

    def poll(self):
        self.returncode = self.popen.poll()
        return self.returncode

    def output(self):
        self.out.seek(0)
        return self.out.read().decode("utf-8", "replace")

    def output_tail(self, lines=15):
        return "\n".join(self.output().splitlines()[-lines:])

    def stop(self, sig=signal.SIGTERM, grace=3.0):
        """Signals the process group, then SIGKILLs it after grace seconds."""
        self.returncode = self.stop_group(sig, grace, kill_wait=5)
        _live.discard(self)
        return self.returncode

    def wait(self, timeout):
        """Waits for exit; on timeout kills the group and raises BenchError."""
        try:
            self.returncode = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop(signal.SIGKILL, 0)
            raise BenchError("%s timed out after %.0f s:\n%s"
                             % (prog_name(self.argv), timeout, self.output_tail()))
        self.send(signal.SIGKILL)  # stray children
        _live.discard(self)
        return self.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        self.out.close()


def prog_name(argv):
    """The program a command runs, looking through an `ulsock run ... --` wrapper."""
    if "--" in argv and os.path.basename(argv[0]) == "ulsock":
        rest = argv[argv.index("--") + 1:]
        if rest:
            return os.path.basename(rest[0])
    return os.path.basename(argv[0])


@atexit.register
def _kill_leftovers():
    for p in list(_live):
        p.stop(signal.SIGKILL, 0)


def run(argv, env, timeout):
    """Runs a client to completion; returns its output or raises BenchError."""
    with Proc(argv, env) as p:
        rc = p.wait(timeout)
        out = p.output()
    if rc != 0:
        raise BenchError("%s exited with status %s:\n%s"
                         % (prog_name(argv), rc, "\n".join(out.splitlines()[-15:])))
    return out


def need(program):
    path = shutil.which(program)
    if not path:
        raise BenchError("%s not installed (run scripts/install-deps.sh)" % program)
    return path


def parse_float(pattern, text, what):
    matches = re.findall(pattern, text)
    if not matches:
        raise BenchError("no %s in output:\n%s" % (what, "\n".join(text.splitlines()[-15:])))
    return float(matches[-1])


# Benchmarks. Each takes (substrate, params, record) and returns one number; record(argv)
# notes the exact commands for the report. params: seconds, n_get1, n_get50, n_conn.

class Benchmark:
    def __init__(self, name, title, unit, lower_is_better, fn, programs):
        self.name = name
        self.title = title
        self.unit = unit
        self.lower_is_better = lower_is_better
        self.fn = fn
        self.programs = programs

    def run(self, sub, params, record):
        sub.check()
        for prog in self.programs:
            need(prog)
        return self.fn(sub, params, record)


def _server(sub, argv, port, record):
    cmd = sub.wrap(argv)
    record(cmd)
    p = Proc(cmd, sub.env())
    try:
        wait_listening(port, p)
    except BaseException:
        p.stop()
        p.out.close()
        raise
    return p


def _client(sub, argv, record, timeout):
    cmd = sub.wrap(argv)
    record(cmd)
    return run(cmd, sub.env(), timeout)


# sockperf pp sizes its table of send times for 600,000 round trips a second unless told
# a rate (MPS_MAX_PP in its defs.h) and exits with "_seqN > m_maxSequenceNo" once a
# faster substrate outruns it; ulsock does (round trips of 0.4-0.8 us). The rate given
# here is above any seen, so it sizes the table without pacing the test.
SOCKPERF_PP_MPS = "5000000"


def _sockperf(verb, size, extra, pattern, what):
    """A benchmark: `sockperf VERB` against `sockperf sr`, the number PATTERN finds."""
    def fn(sub, params, record):
        port = free_port()
        secs = max(1, int(params["seconds"]))
        with _server(sub, ["sockperf", "sr", "--tcp", "-i", "127.0.0.1", "-p", str(port)],
                     port, record):
            out = _client(sub, ["sockperf", verb, "--tcp", "-i", "127.0.0.1", "-p", str(port),
                                "-t", str(secs), "-m", str(size)] + extra, record, secs + 30)
        return parse_float(pattern, out, what)
    return fn


def sockperf_pp(size):
    return _sockperf("pp", size, ["--mps", SOCKPERF_PP_MPS],
                     r"Summary: Latency is ([0-9.]+) usec", "latency")


def sockperf_tp(size):
    return _sockperf("tp", size, [], r"Summary: Message Rate is ([0-9.]+) \[msg/sec\]",
                     "message rate")


def iperf3_stream(sub, params, record):
    port = free_port()
    secs = max(1, int(params["iperf_seconds"]))
    with _server(sub, ["iperf3", "-s", "-p", str(port), "-1"], port, record):
        out = _client(sub, ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(secs),
                            "-l", "128K", "-J"], record, secs + 30)
    try:
        return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e9
    except (ValueError, KeyError, TypeError) as e:
        raise BenchError("bad iperf3 JSON (%s):\n%s" % (e, out[-1000:]))


# The other user of redis_get's server_user rows: it and root trust each other.
OTHER_USER = "nobody"


def _other_user_prefix():
    """setpriv's prefix that runs a command as OTHER_USER (root only), and that uid."""
    import pwd
    if os.geteuid() != 0:
        e = BenchError("a server of another user needs root")
        e.skip = True
        raise e
    if not shutil.which("setpriv"):
        raise BenchError("setpriv (util-linux) is missing")
    pw = pwd.getpwnam(OTHER_USER)
    return ["setpriv", "--reuid", str(pw.pw_uid), "--regid", str(pw.pw_gid),
            "--clear-groups", "--"], pw.pw_uid


_readable_copies = {}


def readable_ulsock(sub):
    """SUB with a copy of its ulsock command and library that another user can read (a
    build under /root is not; the command finds its library at ../lib next to itself),
    one copy per build, removed at exit; kernel TCP as is."""
    if sub.profile is None:
        return sub
    build_dir = os.path.dirname(os.path.dirname(os.path.abspath(sub.ulsock)))
    if build_dir not in _readable_copies:
        dst = tempfile.mkdtemp(prefix="uls-bench-xuser-")
        atexit.register(shutil.rmtree, dst, True)
        os.chmod(dst, 0o755)
        for part, name in (("bin", "ulsock"), ("lib", "libulsock.so")):
            os.makedirs(os.path.join(dst, part), mode=0o755)
            shutil.copy2(os.path.join(build_dir, part, name), os.path.join(dst, part, name))
        _readable_copies[build_dir] = dst
    return Substrate(sub.profile, _readable_copies[build_dir])


class _Prefixed:
    """sub, its commands run behind PREFIX (env(1) with variables, setpriv)."""

    def __init__(self, sub, prefix):
        self._sub = sub
        self._prefix = list(prefix)

    def wrap(self, argv):
        return self._prefix + self._sub.wrap(argv)

    def env(self):
        return self._sub.env()

    def check(self):
        self._sub.check()


def _with_env(sub, extra):
    """sub with more environment variables, set through env(1) so that the recorded
    command shows them (they mean nothing to kernel TCP)."""
    return _Prefixed(sub, ["env"] + ["%s=%s" % kv for kv in sorted(extra.items())])


def redis_get(clients, threads=0, scale=1, server_user=False):
    """GET requests per second: params["n_get1"] requests with one client, else
    params["n_get50"], times SCALE in the full mode (2 s runs); THREADS, when not 0,
    becomes redis-benchmark's --threads. SERVER_USER: the server runs as OTHER_USER, and
    both ends trust each other's uid (ULSOCK_TRUST_UIDS)."""
    def fn(sub, params, record):
        port = free_port()
        n = params["n_get1"] if clients == 1 else params["n_get50"]
        n *= scale if params["seconds"] >= 2 else 1
        extra = ["--threads", str(threads)] if threads else []
        server_sub = sub
        if server_user:
            prefix, uid = _other_user_prefix()
            trust = {"ULSOCK_TRUST_UIDS": "%d,%d" % (os.geteuid(), uid)}
            server_sub = _Prefixed(_with_env(readable_ulsock(sub), trust), prefix)
            sub = _with_env(sub, trust)
        with tempfile.TemporaryDirectory(prefix="uls-bench-redis-") as d:
            if server_user:
                os.chmod(d, 0o777)
            with _server(server_sub, ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                      "--save", "", "--appendonly", "no", "--dir", d],
                         port, record):
                out = _client(sub, ["redis-benchmark", "-p", str(port), "-t", "get",
                                    "-c", str(clients)] + extra + ["-n", str(n), "-q"],
                              record, 300 if scale > 1 else 120)
        return parse_float(r"GET: ([0-9.]+) requests per second", out, "GET rate")
    return fn


def connrate_of(extra, env=None):
    """uls-connrate, server and client apart; extra: its flags for both (-e: no byte);
    env: more variables for both."""
    def fn(sub, params, record):
        if env:
            sub = _with_env(sub, env)
        prog = os.path.join(params["build_dir"], "bin", "uls-connrate")
        if not os.access(prog, os.X_OK):
            raise BenchError("%s not built (run make build)" % prog)
        port = free_port()
        with _server(sub, [prog, "-s", "-p", str(port)] + extra, port, record):
            out = _client(sub, [prog, "-c", "-p", str(port), "-n", str(params["n_conn"]),
                                "-t", str(params["seconds"])] + extra, record,
                          params["seconds"] + 60)
        return parse_float(r"conn_per_sec=([0-9.]+)", out, "connection rate")
    return fn


connrate = connrate_of([])


BENCHMARKS = [
    Benchmark("pp64", "sockperf ping-pong 64 B, half round trip", "usec", True,
              sockperf_pp(64), ["sockperf"]),
    Benchmark("tp64", "sockperf throughput 64 B", "msg/s", False,
              sockperf_tp(64), ["sockperf"]),
    Benchmark("tp1k", "sockperf throughput 1 KiB", "msg/s", False,
              sockperf_tp(1024), ["sockperf"]),
    Benchmark("iperf3", "iperf3 one stream, 128 KiB writes", "Gbit/s", False,
              iperf3_stream, ["iperf3"]),
    Benchmark("redis1", "redis-benchmark GET, 1 client", "req/s", False,
              redis_get(1), ["redis-server", "redis-benchmark"]),
    Benchmark("redis50", "redis-benchmark GET, 50 clients", "req/s", False,
              redis_get(50), ["redis-server", "redis-benchmark"]),
    # The server of another user (nobody), both ends trusting each other: their sleepers
    # wake through FIFOs with names (docs/protocol.md section 5), not /proc.
    Benchmark("redis1_xuser", "redis-benchmark GET, 1 client, server of another user",
              "req/s", False, redis_get(1, scale=3, server_user=True),
              ["redis-server", "redis-benchmark"]),
    Benchmark("connrate", "connections set up and torn down", "conn/s", False,
              connrate, []),
    # The same with every connection on shared memory: a client keeps connections this
    # short on kernel TCP after its first few otherwise (README, ULSOCK_SHORT_CALLS).
    Benchmark("connrate_shm", "connections set up and torn down, all accelerated", "conn/s",
              False, connrate_of([], {"ULSOCK_SHORT_CALLS": "0"}), []),
    # No byte either way (uls-connrate -e): on kernel TCP, the floor of any layer that
    # keeps a kernel TCP connection per connection (docs/PERFORMANCE.md).
    Benchmark("connrate0", "connections set up and torn down, no byte", "conn/s", False,
              connrate_of(["-e"]), []),
]


# Rows for real programs live in tools/benchrows_*.py, one module per program family, each
# with a BENCHMARKS list of its own; they are appended here in name order.
def _load_program_rows():
    import glob
    import importlib
    here = os.path.dirname(os.path.abspath(__file__))
    for path in sorted(glob.glob(os.path.join(here, "benchrows_*.py"))):
        mod = importlib.import_module(os.path.basename(path)[:-3])
        BENCHMARKS.extend(mod.BENCHMARKS)


_load_program_rows()


def benchmark(name):
    for b in BENCHMARKS:
        if b.name == name:
            return b
    raise KeyError(name)


def median(values):
    v = sorted(values)
    if not v:
        return None
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def fmt_value(x):
    if x is None:
        return "failed"
    if x >= 1e6:
        return "%.2fM" % (x / 1e6)
    if x >= 100:
        return "%.0f" % x
    if x >= 10:
        return "%.1f" % x
    return "%.2f" % x


def shell_line(argv, env_note=""):
    return (env_note + " " if env_note else "") + " ".join(shlex.quote(a) for a in argv)


def install_signal_handlers():
    """SIGTERM and SIGHUP exit through atexit, which kills every live process group."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)
