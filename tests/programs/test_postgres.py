"""PostgreSQL 15 (postgres, psql, pgbench), unmodified, over ulsock.

The postmaster accepts each TCP connection and forks a backend that serves it, so the
accelerated socket is used by a child process from its first byte. Each test starts a
throwaway cluster (a copy of one made by initdb for the session) with fsync off, runs
psql or pgbench over TCP to 127.0.0.1, checks the results byte for byte or with the
server's own md5(), and stops the server with a fast shutdown, which must succeed.

PostgreSQL refuses to run as root, so when the suite runs as root (as in CI) the server
and, for the fast path, the clients run as the `postgres` system user (setpriv). Two
ulsock processes of different users stay on kernel TCP unless both list the other's uid
in ULSOCK_TRUST_UIDS; test_trusted_root_client checks that case. The cluster, the logs
and a copy of the ulsock command and library live in a directory under /tmp owned by
that user, since pytest's tmp_path (mode 0700, root's) is out of its reach; the logs are
copied into tmp_path at the end of each test.

Cases, each run plain first: both ends plain, both ends ulsock (path=shm in both logs;
the data went through the rings, by the byte counts of the client's close lines), server
plain with ulsock clients, ulsock server with plain clients (path=kernel with a reason).
No timing is asserted.
"""

import glob
import hashlib
import os
import pwd
import random
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import time

import pytest

from modes import (MODES, assert_quiet_log, check_paths, client_accelerated,
                   server_accelerated)
from proglib import (ULSOCK, End, assert_fast_path, assert_other_user, closed_connections,
                     established_to, free_port)

PGBIN = os.environ.get("ULSOCK_PGBIN", "/usr/lib/postgresql/15/bin")
PG_USER = "postgres"

SERVER_SETTINGS = ["listen_addresses=127.0.0.1", "fsync=off", "synchronous_commit=off",
                   "full_page_writes=off", "max_connections=30", "shared_buffers=16MB",
                   # Dynamic shared memory in files of the data directory, not /dev/shm,
                   # which the leak test of the integration suite counts.
                   "dynamic_shared_memory_type=mmap", "log_min_messages=warning"]


def pg_program(name):
    path = os.path.join(PGBIN, name)
    if not os.access(path, os.X_OK):
        pytest.skip("%s is not installed (postgresql-15 from scripts/install-deps.sh)" % path)
    return path


def run_as():
    """(uid, gid, user name) the cluster runs as: the postgres user under root, else
    the current user."""
    if os.geteuid() != 0:
        return os.getuid(), os.getgid(), None
    try:
        pw = pwd.getpwnam(PG_USER)
    except KeyError:
        pytest.skip("running as root and there is no %s user to run the server" % PG_USER)
    if not shutil.which("setpriv"):
        pytest.skip("running as root and setpriv (util-linux) is missing")
    return pw.pw_uid, pw.pw_gid, PG_USER


def make_owned_dir(prefix, uid, gid):
    d = tempfile.mkdtemp(prefix=prefix)
    os.chmod(d, 0o755)
    os.chown(d, uid, gid)
    return d


class UserEnd(End):
    """An End that runs as another user (setpriv) with the ulsock command copied where
    that user can reach it, and extra environment variables."""

    def __init__(self, name, accelerated, log_path, user=None, ulsock=ULSOCK, home=None,
                 extra_env=None):
        super().__init__(name, accelerated, None, log_path)
        self.user = user
        self.ulsock = ulsock
        self.home = home
        self.extra_env = dict(extra_env or {})

    def wrap(self, argv):
        pre = []
        if self.user:
            # From a directory that user can enter (the test's may be under /root).
            pre = ["setpriv", "--reuid", self.user, "--regid", self.user, "--init-groups",
                   "--", "env", "-C", self.home or "/"]
        if self.accelerated:
            return pre + [self.ulsock, "run", "--"] + list(argv)
        return pre + list(argv)

    def env(self):
        env = super().env()
        if self.home:
            env["HOME"] = self.home
        env["PGCLIENTENCODING"] = "UTF8"
        env["PGCONNECT_TIMEOUT"] = "20"
        env.update(self.extra_env)
        return env


@pytest.fixture(scope="session")
def pg_session():
    """A cluster made once by initdb (copied for each test) and the ulsock command and
    library copied into a directory the server's user can read. Returns a dict."""
    pg_program("postgres")
    uid, gid, user = run_as()
    top = make_owned_dir("uls-pgtest-", uid, gid)
    try:
        ul = os.path.join(top, "ulsock")
        os.makedirs(os.path.join(ul, "bin"))
        os.makedirs(os.path.join(ul, "lib"))
        shutil.copy2(ULSOCK, os.path.join(ul, "bin", "ulsock"))
        lib = os.path.join(os.path.dirname(os.path.dirname(ULSOCK)), "lib", "libulsock.so")
        shutil.copy2(lib, os.path.join(ul, "lib", "libulsock.so"))
        template = os.path.join(top, "template")
        pre = (["setpriv", "--reuid", user, "--regid", user, "--init-groups", "--"]
               if user else [])
        r = subprocess.run(pre + [pg_program("initdb"), "-D", template, "-U", "postgres",
                                  "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120,
                           env=dict(os.environ, HOME=top), cwd=top)
        assert r.returncode == 0, "initdb failed:\n%s" % r.stdout.decode()[-3000:]
        yield dict(top=top, uid=uid, gid=gid, user=user, template=template,
                   ulsock=os.path.join(ul, "bin", "ulsock"))
    finally:
        shutil.rmtree(top, ignore_errors=True)


class Cluster:
    """One test's cluster: its directory, its server process and the ends' logs."""

    def __init__(self, session, harness, tmp_path):
        self.s = session
        self.harness = harness
        self.tmp_path = tmp_path
        self.dir = make_owned_dir("uls-pg-", session["uid"], session["gid"])
        self.data = os.path.join(self.dir, "data")
        self.sock = os.path.join(self.dir, "sock")
        subprocess.run(["cp", "-a", session["template"], self.data], check=True)
        os.mkdir(self.sock)
        os.chown(self.sock, session["uid"], session["gid"])
        self.server = None
        self.port = None

    def end(self, name, accelerated, as_server_user=True, trust=None):
        log = os.path.join(self.dir, "%s.ulsock.log" % name)
        extra = {"ULSOCK_TRUST_UIDS": trust} if trust else {}
        user = self.s["user"] if as_server_user else None
        return UserEnd(name, accelerated, log, user=user, ulsock=self.s["ulsock"],
                       home=self.dir, extra_env=extra)

    def ends(self, mode):
        return (self.end("server", server_accelerated(mode)),
                self.end("client", client_accelerated(mode)))

    def start(self, end):
        self.port = free_port()
        argv = [pg_program("postgres"), "-D", self.data, "-k", self.sock,
                "-p", str(self.port)]
        for s in SERVER_SETTINGS:
            argv += ["-c", s]
        # It listens while still starting up, and refuses sessions until it says it is
        # ready ("the database system is starting up": the bench's pgbench met it once).
        self.server = self.harness.start_server(end, argv, self.port, tag="postgres",
                                                ready="ready to accept connections",
                                                ready_timeout=30)

    def stop(self):
        """Fast shutdown (SIGINT to the postmaster); returns its exit status and log."""
        p = self.server
        self.server = None
        try:
            os.kill(p.popen.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        try:
            rc = p.popen.wait(60)
        except subprocess.TimeoutExpired:
            rc = "still running after 60 s"
        text = p.text()
        p.kill()
        return rc, text

    def stop_checked(self):
        # The last client has exited, but its backend may still be ending: a fast
        # shutdown then terminates it, which postgres logs as FATAL. Wait (up to 10 s)
        # for the server's connections to be gone first, as an operator would.
        deadline = time.monotonic() + 10
        while established_to(self.port) and time.monotonic() < deadline:
            time.sleep(0.02)
        rc, text = self.stop()
        assert rc == 0, "postgres exited %s at shutdown:\n%s" % (rc, text[-3000:])
        bad = [line for line in text.splitlines()
               if re.search(r"\b(PANIC|FATAL|ERROR)\b|could not (send|receive)|"
                            r"unexpected EOF|server process .* (terminated|was terminated)",
                            line)]
        assert not bad, "postgres logged problems:\n%s" % "\n".join(bad[-30:])
        assert "database system is shut down" in text, text[-3000:]

    def psql(self, end, args, stdin_data=None, timeout=60):
        argv = [pg_program("psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", "postgres"]
        rc, out = self.harness.run(end, argv + list(args), timeout=timeout,
                                   stdin_data=stdin_data, tag="psql")
        assert rc == 0, "psql %s exited %s:\n%s" % (args, rc, out[-3000:].decode(
            "utf-8", "replace"))
        return out

    def pgbench(self, end, args, timeout=90):
        argv = [pg_program("pgbench"), "-h", "127.0.0.1", "-p", str(self.port),
                "-U", "postgres"] + list(args) + ["postgres"]
        rc, out = self.harness.run(end, argv, timeout=timeout, tag="pgbench")
        text = out.decode("utf-8", "replace")
        assert rc == 0, "pgbench %s exited %s:\n%s" % (args, rc, text[-3000:])
        return text

    def finish(self):
        if self.server is not None:
            self.stop()
        for f in glob.glob(os.path.join(self.dir, "*.log")):
            shutil.copy(f, self.tmp_path)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def cluster(pg_session, harness, tmp_path):
    c = Cluster(pg_session, harness, tmp_path)
    try:
        yield c
    finally:
        c.finish()


def shm_bytes(end):
    """(sent, received) over the rings by the closed accelerated connections of end."""
    conns = closed_connections(end)
    return sum(c["sent"] for c in conns), sum(c["received"] for c in conns)


# Binary COPY (the PGCOPY format): a header, then per row a field count and each field
# as a length and raw bytes, then -1. These bytes travel as they are, not as text.
COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"


def copy_binary(rows):
    out = [COPY_SIGNATURE, struct.pack("!ii", 0, 0)]
    for row in rows:
        out.append(struct.pack("!h", len(row)))
        for field in row:
            out.append(struct.pack("!i", len(field)) + field)
    out.append(struct.pack("!h", -1))
    return b"".join(out)


def parse_copy_binary(data):
    assert data.startswith(COPY_SIGNATURE), "not binary COPY output: %r" % data[:40]
    _flags, ext = struct.unpack_from("!ii", data, len(COPY_SIGNATURE))
    pos = len(COPY_SIGNATURE) + 8 + ext
    rows = []
    while True:
        (n,) = struct.unpack_from("!h", data, pos)
        pos += 2
        if n == -1:
            break
        row = []
        for _ in range(n):
            (length,) = struct.unpack_from("!i", data, pos)
            pos += 4
            row.append(data[pos:pos + length])
            pos += length
        rows.append(row)
    assert pos == len(data), "%d bytes after the end of the COPY data" % (len(data) - pos)
    return rows


BLOBS = {
    1: random.Random(151).randbytes(1 << 20),      # sent as a hex literal in an INSERT
    2: random.Random(152).randbytes(1 << 20),      # sent raw by binary COPY
    3: bytes(range(256)) * 64 + b"\x00\r\n\\'",   # binary COPY too
    4: b"",
}


@pytest.mark.parametrize("mode", MODES)
def test_bytea(cluster, mode):
    """1 MiB bytea values in by INSERT (hex) and binary COPY, checked with the server's
    md5() and read back raw by binary COPY."""
    server_end, client_end = cluster.ends(mode)
    cluster.start(server_end)
    cluster.psql(client_end, ["-c", "CREATE TABLE blobs (id int PRIMARY KEY, b bytea)"])
    insert = ("INSERT INTO blobs VALUES (1, '\\x%s');\n" % BLOBS[1].hex()).encode()
    cluster.psql(client_end, ["-f", "-"], stdin_data=insert)
    rows = [[struct.pack("!i", k), BLOBS[k]] for k in (2, 3, 4)]
    cluster.psql(client_end, ["-c", "COPY blobs FROM STDIN (FORMAT binary)"],
                 stdin_data=copy_binary(rows))

    out = cluster.psql(client_end, ["-F", " ", "-c",
                                    "SELECT id, length(b), md5(b) FROM blobs ORDER BY id"])
    want = "".join("%d %d %s\n" % (k, len(v), hashlib.md5(v).hexdigest())
                   for k, v in sorted(BLOBS.items()))
    assert out.decode() == want

    out = cluster.psql(client_end, ["-c", "COPY (SELECT id, b FROM blobs ORDER BY id) "
                                          "TO STDOUT (FORMAT binary)"])
    got = parse_copy_binary(out)
    assert [struct.unpack("!i", r[0])[0] for r in got] == sorted(BLOBS)
    for r in got:
        k = struct.unpack("!i", r[0])[0]
        assert r[1] == BLOBS[k], "blob %d: %d bytes back, %d in" % (k, len(r[1]),
                                                                    len(BLOBS[k]))
    cluster.stop_checked()
    check_paths(mode, server_end, client_end)
    if mode == "ulsock":
        sent, received = shm_bytes(client_end)
        assert sent > 3 << 20 and received > 2 << 20, (
            "the clients moved only %d bytes out and %d in over the rings" % (sent, received))


def copy_text(nrows, seed):
    """COPY text-format lines that come back exactly as written: escapes in their
    canonical form, UTF-8, no trailing spaces lost."""
    rng = random.Random(seed)
    pieces = ["a", "b", "Z", "0", "9", " ", "-", "é", "€", "\\t", "\\n", "\\\\", "\\r"]
    lines = []
    for i in range(nrows):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 160)))
        num = "\\N" if i % 97 == 0 else str(rng.randrange(-10 ** 12, 10 ** 12))
        lines.append("%d\t%s\t%s\n" % (i, text, num))
    return "".join(lines).encode()


@pytest.mark.parametrize("mode", MODES)
def test_copy_text(cluster, mode):
    """Several MB in by COPY FROM STDIN and out by COPY TO STDOUT, byte-exact."""
    server_end, client_end = cluster.ends(mode)
    cluster.start(server_end)
    data = copy_text(40000, 153)
    assert len(data) > 3 << 20
    cluster.psql(client_end, ["-c", "CREATE TABLE lines (id int PRIMARY KEY, t text, n bigint)"])
    cluster.psql(client_end, ["-c", "COPY lines FROM STDIN"], stdin_data=data)
    out = cluster.psql(client_end, ["-c", "SELECT count(*), sum(octet_length(t)) FROM lines"])
    assert out.split(b"|")[0] == b"40000"
    out = cluster.psql(client_end, ["-c", "COPY (SELECT * FROM lines ORDER BY id) TO STDOUT"])
    assert len(out) == len(data)
    assert hashlib.sha256(out).hexdigest() == hashlib.sha256(data).hexdigest()
    cluster.stop_checked()
    check_paths(mode, server_end, client_end)
    if mode == "ulsock":
        sent, received = shm_bytes(client_end)
        assert sent > len(data) and received > len(data), (sent, received)


def pgbench_counts(text):
    processed = re.search(r"number of transactions actually processed: (\d+)(?:/(\d+))?",
                          text)
    failed = re.search(r"number of failed transactions: (\d+)", text)
    assert processed and failed, "pgbench printed no totals:\n%s" % text[-3000:]
    return int(processed[1]), processed[2] and int(processed[2]), int(failed[1])


@pytest.mark.parametrize("mode", MODES)
def test_pgbench(cluster, mode):
    """pgbench -i, a 2 s select-only run with 4 clients and 2 threads, and a TPC-B-like
    write run of a fixed count whose effects are then checked in the tables."""
    server_end, client_end = cluster.ends(mode)
    cluster.start(server_end)
    cluster.pgbench(client_end, ["-i", "-s", "1", "-q"])
    text = cluster.pgbench(client_end, ["-c", "4", "-j", "2", "-T", "2", "-S"])
    done, _, failed = pgbench_counts(text)
    assert done > 0 and failed == 0, text[-3000:]

    text = cluster.pgbench(client_end, ["-c", "4", "-j", "2", "-t", "50"])
    done, expected, failed = pgbench_counts(text)
    assert (done, expected, failed) == (200, 200, 0), text[-3000:]
    # Every TPC-B-like transaction adds one history row and the same delta to an
    # account, a teller and a branch, all of which start at 0.
    out = cluster.psql(client_end, ["-c",
                                    "SELECT (SELECT count(*) FROM pgbench_history), "
                                    "(SELECT sum(delta) FROM pgbench_history) = ALL (ARRAY["
                                    "(SELECT sum(abalance) FROM pgbench_accounts), "
                                    "(SELECT sum(tbalance) FROM pgbench_tellers), "
                                    "(SELECT sum(bbalance) FROM pgbench_branches)])"])
    assert out == b"200|t\n"
    cluster.stop_checked()
    check_paths(mode, server_end, client_end)


def test_trusted_root_client(cluster, pg_session):
    """A root client and a server of the postgres user, both under ulsock: kernel TCP by
    default (the server logs that uid 0 is another user), the fast path once both list
    the other's uid in ULSOCK_TRUST_UIDS."""
    if pg_session["user"] is None:
        pytest.skip("needs root, to run a client of another user than the server")
    value = random.Random(154).randbytes(256 << 10)
    phases = [
        (cluster.end("server-untrusting", True),
         cluster.end("root-untrusting", True, as_server_user=False), "kernel"),
        (cluster.end("server-trusting", True, trust="0"),
         cluster.end("root-trusting", True, as_server_user=False,
                     trust=str(pg_session["uid"])), "shm"),
    ]
    for key, (server_end, client_end, path) in enumerate(phases):
        cluster.start(server_end)
        cluster.psql(client_end, ["-c", "CREATE TABLE IF NOT EXISTS blobs (id int, b bytea)"])
        cluster.psql(client_end, ["-c", "COPY blobs FROM STDIN (FORMAT binary)"],
                     stdin_data=copy_binary([[struct.pack("!i", key), value]]))
        out = cluster.psql(client_end, ["-c", "SELECT count(*), md5(string_agg(b, ''))"
                                              " FROM blobs WHERE id = %d" % key])
        assert out.decode() == "1|%s\n" % hashlib.md5(value).hexdigest()
        cluster.stop_checked()
        if path == "shm":
            assert_fast_path(server_end, client_end)
        else:
            assert_other_user(server_end, client_end, 0)
        assert_quiet_log(server_end, client_end)
