"""Benchmark rows for MariaDB 10.11 with sysbench (loaded by tools/benchlib.py).

sysbench's oltp_point_select (one primary-key SELECT per transaction, a 10,000-row
table) for params["seconds"] (2 s in the full mode), with 1 thread and with 8 threads
(8 server threads and 8 client threads on this machine's 2 vCPUs), against a mariadbd
that runs on the same substrate as sysbench: both plain, or both under
`ulsock run --profile P`. The number is sysbench's queries per second; a run that
reports errors gives none.

mariadbd runs with `--innodb-use-native-aio=0`: InnoDB's native AIO sets up io_uring,
which keeps every socket of the process on kernel TCP (README, limitations). The data
directory is made once per bench process (mariadb-install-db, then the table through
sysbench's `prepare`, on kernel TCP) in a directory under /tmp; each run starts the
server on it with grant tables skipped, runs sysbench and stops the server (SIGTERM, a
normal shutdown). Point selects only read, so the runs do not change it.
"""

import atexit
import os
import pwd
import shutil
import tempfile

import benchlib
from benchlib import BenchError
from ulstest.env import clean_env

MARIADBD = "/usr/sbin/mariadbd"
TABLE = ["--tables=1", "--table-size=10000"]

_data = {}


def _user():
    return pwd.getpwuid(os.geteuid()).pw_name


def _server_argv(d, port):
    return [MARIADBD, "--no-defaults", "--datadir=" + d["data"], "--user=" + _user(),
            "--port=%d" % port, "--bind-address=127.0.0.1",
            "--socket=" + os.path.join(d["top"], "mariadb.sock"),
            "--pid-file=" + os.path.join(d["top"], "mariadb.pid"),
            "--skip-grant-tables", "--skip-name-resolve", "--innodb-use-native-aio=0",
            "--innodb-buffer-pool-size=64M", "--max-connections=64"]


def _sysbench_argv(port, verb, extra=()):
    return (["sysbench", "oltp_point_select", "--db-driver=mysql", "--mysql-host=127.0.0.1",
             "--mysql-port=%d" % port, "--mysql-user=root", "--mysql-db=sbtest"] + TABLE +
            list(extra) + [verb])


def _start(argv, port):
    """Starts mariadbd and waits until it says it takes sessions (it listens earlier)."""
    return benchlib.start_ready(argv, clean_env(), port, "ready for connections", 60)


def _stop(p):
    """SIGTERM: a normal shutdown, which may take a while to flush; then the group goes."""
    p.stop(grace=30)
    p.out.close()


def _setup():
    """Makes the data directory once per process; returns the dict that describes it."""
    if _data:
        return _data
    top = tempfile.mkdtemp(prefix="uls-bench-mariadb-")
    atexit.register(shutil.rmtree, top, True)
    data = os.path.join(top, "data")
    benchlib.run(["mariadb-install-db", "--no-defaults", "--datadir=" + data,
                  "--user=" + _user(), "--auth-root-authentication-method=normal",
                  "--skip-test-db"], clean_env(), 180)
    d = dict(top=top, data=data)
    port = benchlib.free_port()
    p = _start(_server_argv(d, port), port)
    try:
        benchlib.run(["mariadb", "--no-defaults", "--protocol=tcp", "-h", "127.0.0.1",
                      "-P", str(port), "-u", "root", "-e", "CREATE DATABASE sbtest"],
                     clean_env(), 60)
        benchlib.run(_sysbench_argv(port, "prepare"), clean_env(), 180)
    finally:
        _stop(p)
    _data.update(d)
    return _data


def point_select(threads):
    def fn(sub, params, record):
        d = _setup()
        secs = max(1, int(params["seconds"]))
        port = benchlib.free_port()
        server = sub.wrap(_server_argv(d, port))
        client = sub.wrap(_sysbench_argv(port, "run", ["--threads=%d" % threads,
                                                       "--time=%d" % secs]))
        record(server)
        record(client)
        p = _start(server, port)
        try:
            out = benchlib.run(client, sub.env(), secs + 60)
        finally:
            _stop(p)
        errors = benchlib.parse_float(r"ignored errors:\s+(\d+)", out, "error count")
        if errors != 0:
            raise BenchError("sysbench reports %d errors" % errors)
        return benchlib.parse_float(r"queries:\s+\d+\s+\(([0-9.]+) per sec\.\)", out,
                                    "queries per second")
    return fn


PROGRAMS = [MARIADBD, "mariadb", "mariadb-install-db", "sysbench"]

BENCHMARKS = [
    benchlib.Benchmark("mariadb1", "MariaDB + sysbench point selects, 1 thread", "q/s",
                       False, point_select(1), PROGRAMS),
    benchlib.Benchmark("mariadb8", "MariaDB + sysbench point selects, 8 threads", "q/s",
                       False, point_select(8), PROGRAMS),
]
