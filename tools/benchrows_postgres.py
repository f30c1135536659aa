"""Benchmark rows for PostgreSQL 15 (loaded by tools/benchlib.py).

pgbench select-only (-S), 4 clients on 2 threads, for params["seconds"] (2 s in the full
mode), against a postmaster that runs on the same substrate as the client: both plain,
or both under `ulsock run --profile P`. The number is pgbench's TPS without the initial
connection time. pgbench_xuser is the same with pgbench running as root (the server
stays its user's), both trusting the other's uid.

PostgreSQL refuses to run as root, so under root the server and pgbench run as the
`postgres` system user (setpriv), both ends the same uid as the fast path needs. One
cluster is made per bench process (initdb and pgbench -i at scale 1, on kernel TCP),
in a directory under /tmp owned by that user, with a copy of the ulsock command and
library that the user can read; each run starts the server on it, runs pgbench and
stops the server with a fast shutdown. -S only reads, so the runs do not change it.
"""

import atexit
import os
import pwd
import shutil
import signal
import subprocess
import tempfile

import benchlib
from benchlib import BenchError
from ulstest.env import clean_env

PGBIN = os.environ.get("ULSOCK_PGBIN", "/usr/lib/postgresql/15/bin")
USER = "postgres"
SETTINGS = ["listen_addresses=127.0.0.1", "fsync=off", "synchronous_commit=off",
            "full_page_writes=off", "max_connections=20", "shared_buffers=64MB",
            "dynamic_shared_memory_type=mmap", "log_min_messages=warning"]

_cluster = {}


def _as_user():
    """setpriv prefix and (uid, gid) for the cluster's processes."""
    if os.geteuid() != 0:
        return [], (os.getuid(), os.getgid())
    try:
        pw = pwd.getpwnam(USER)
    except KeyError:
        raise BenchError("running as root and there is no %s user for the server" % USER)
    if not shutil.which("setpriv"):
        raise BenchError("running as root and setpriv (util-linux) is missing")
    return (["setpriv", "--reuid", USER, "--regid", USER, "--init-groups", "--"],
            (pw.pw_uid, pw.pw_gid))


def _env(home):
    return clean_env({"HOME": home})


def _start(argv, home, port):
    """Starts the postmaster and waits until it says it is ready: it listens while it is
    still starting up, and refuses sessions then ("the database system is starting up",
    bench.smoke once on a loaded machine)."""
    return benchlib.start_ready(argv, _env(home), port, "ready to accept connections", 30)


def _stop(p):
    """Fast shutdown: SIGINT to the postmaster alone (a signal to the whole group would
    reach its children too), then whatever is left of the group is killed."""
    try:
        os.kill(p.popen.pid, signal.SIGINT)
        p.popen.wait(60)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    rc = p.stop()
    p.out.close()
    return rc


def _server_argv(data, sock, port):
    argv = [os.path.join(PGBIN, "postgres"), "-D", data, "-k", sock, "-p", str(port)]
    for s in SETTINGS:
        argv += ["-c", s]
    return argv


def _pgbench_argv(port, args):
    return [os.path.join(PGBIN, "pgbench"), "-h", "127.0.0.1", "-p", str(port),
            "-U", "postgres"] + list(args) + ["postgres"]


def _setup(build_dir):
    """Makes the cluster once per process; returns the dict that describes it."""
    if _cluster:
        return _cluster
    pre, (uid, gid) = _as_user()
    top = tempfile.mkdtemp(prefix="uls-bench-pg-")
    atexit.register(shutil.rmtree, top, True)
    os.chmod(top, 0o755)
    os.chown(top, uid, gid)
    data, sock = os.path.join(top, "data"), os.path.join(top, "sock")
    os.mkdir(sock)
    os.chown(sock, uid, gid)
    r = subprocess.run(pre + [os.path.join(PGBIN, "initdb"), "-D", data, "-U", "postgres",
                              "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120,
                       env=_env(top), cwd=top)
    if r.returncode != 0:
        raise BenchError("initdb failed:\n%s" % r.stdout.decode()[-2000:])
    port = benchlib.free_port()
    p = _start(pre + _server_argv(data, sock, port), top, port)
    try:
        benchlib.run(pre + _pgbench_argv(port, ["-i", "-s", "1", "-q"]), _env(top), 120)
    finally:
        _stop(p)
    _cluster.update(pre=pre, top=top, data=data, sock=sock)
    return _cluster


def pgbench_select(sub, params, record, xuser=False):
    """XUSER: pgbench runs as root, the server as its user, both trusting the other's
    uid (ULSOCK_TRUST_UIDS), as a database server and its clients usually are."""
    c = _setup(params["build_dir"])
    # The same substrate, with a copy of its ulsock the server's user can read.
    s = benchlib.readable_ulsock(sub)
    secs = max(1, int(params["seconds"]))
    port = benchlib.free_port()
    server_pre = client_pre = c["pre"]
    if xuser:
        if not c["pre"]:
            e = BenchError("a server of another user needs root")
            e.skip = True
            raise e
        trust = ["env", "ULSOCK_TRUST_UIDS=0,%d" % pwd.getpwnam(USER).pw_uid]
        server_pre, client_pre = c["pre"] + trust, trust
    server = server_pre + s.wrap(_server_argv(c["data"], c["sock"], port))
    client = client_pre + s.wrap(_pgbench_argv(port, ["-c", "4", "-j", "2", "-T", str(secs),
                                                      "-S"]))
    record(server)
    record(client)
    p = _start(server, c["top"], port)
    try:
        out = benchlib.run(client, _env(c["top"]), secs + 60)
    finally:
        _stop(p)
    failed = benchlib.parse_float(r"number of failed transactions: (\d+)", out,
                                  "failed transaction count")
    if failed != 0:
        raise BenchError("pgbench reports %d failed transactions" % failed)
    return benchlib.parse_float(r"tps = ([0-9.]+) \(without initial connection time\)",
                                out, "TPS")


BENCHMARKS = [
    benchlib.Benchmark("pgbench_s", "pgbench select-only, 4 clients, 2 threads", "TPS",
                       False, pgbench_select,
                       [os.path.join(PGBIN, p) for p in ("postgres", "pgbench", "initdb")]),
    # pgbench as root, the server as postgres, trusting each other (docs/protocol.md
    # section 5: their sleepers wake through FIFOs with names).
    benchlib.Benchmark("pgbench_xuser", "pgbench select-only, 4 clients, 2 threads, "
                       "client of another user", "TPS", False,
                       lambda sub, params, record: pgbench_select(sub, params, record, True),
                       [os.path.join(PGBIN, p) for p in ("postgres", "pgbench", "initdb")]),
]
