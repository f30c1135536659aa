"""MariaDB 10.11 (mariadbd, the mariadb client, mariadb-slap), unmodified, over ulsock.

mariadbd serves each connection on a thread of its own (one thread per connection, its
default) and answers over TCP to 127.0.0.1. Each test starts a throwaway server from a
data directory that mariadb-install-db made once for the session, with grant tables
skipped (any client may connect as root) and the InnoDB settings that keep it small.

InnoDB does its file I/O through io_uring where the kernel has it (Debian's build links
liburing): a process that sets up io_uring makes ulsock move its sockets back to kernel
TCP and accelerate no new ones, since the kernel could work on a socket through the ring
behind ulsock's back (README, limitations). `--innodb-use-native-aio=0` makes InnoDB
use its own I/O threads instead, and then the fast path holds. Every case but
test_io_uring_server runs with that setting; test_io_uring_server checks the fallback
and its reason, with data still exact.

Layouts: both plain, both under ulsock (path=shm in both logs), one end plain each way
(the ulsock end logs path=kernel with a reason). No timing is asserted.
"""

import hashlib
import os
import pwd
import random
import re
import shutil
import subprocess
import tempfile

import pytest

from modes import assert_pair_paths, assert_quiet_log
from proglib import free_port, require

# (server, client): which run under ulsock.
LAYOUTS = {
    "plain": (False, False),
    "both_ulsock": (True, True),
    "server_ulsock": (True, False),
    "client_ulsock": (False, True),
}

MARIADBD = "/usr/sbin/mariadbd"
URING_REASON = "the process uses io_uring"

_rng = random.Random(20261207)
# Values stored and read back: sizes around the client's 16 KiB network buffer and the
# protocol's packets (16 MiB - 1 splits a packet; max_allowed_packet is 64 MiB here).
BLOBS = {
    1: b"",
    2: b"\x00",
    3: b"'; DROP TABLE blobs; --\r\n\x00\\",
    4: bytes(range(256)) * 64,
    5: _rng.randbytes(16384 + 3),
    6: _rng.randbytes(1 << 20),
    7: _rng.randbytes(5 << 20),
}


@pytest.fixture(scope="session")
def mariadb_template():
    """A data directory made once by mariadb-install-db; each test copies it."""
    if not os.access(MARIADBD, os.X_OK):
        pytest.skip("%s is not installed (mariadb-server from scripts/install-deps.sh)"
                    % MARIADBD)
    require("mariadb-install-db")
    top = tempfile.mkdtemp(prefix="uls-mariadb-")
    try:
        data = os.path.join(top, "data")
        r = subprocess.run(["mariadb-install-db", "--no-defaults", "--datadir=" + data,
                            "--user=%s" % _user(), "--auth-root-authentication-method=normal",
                            "--skip-test-db"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=180)
        assert r.returncode == 0, "mariadb-install-db failed:\n%s" % r.stdout.decode()[-3000:]
        yield data
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _user():
    return pwd.getpwuid(os.geteuid()).pw_name


class Server:
    """One test's mariadbd: its data directory (a copy of the template) and process."""

    def __init__(self, harness, template, tmp_path, end, native_aio=False):
        require("mariadb")
        self.harness = harness
        self.data = str(tmp_path / "data")
        shutil.copytree(template, self.data, symlinks=True)
        self.port = free_port()
        argv = [MARIADBD, "--no-defaults", "--datadir=" + self.data, "--user=" + _user(),
                "--port=%d" % self.port, "--bind-address=127.0.0.1",
                "--socket=" + str(tmp_path / "mariadb.sock"),
                "--pid-file=" + str(tmp_path / "mariadb.pid"),
                "--skip-grant-tables", "--skip-name-resolve",
                "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M",
                "--innodb-flush-log-at-trx-commit=0", "--max-allowed-packet=64M",
                "--innodb-use-native-aio=%d" % (1 if native_aio else 0)]
        # It listens before it takes sessions: wait for its own word.
        self.proc = harness.start_server(end, argv, self.port, tag="mariadbd",
                                         ready="ready for connections")

    def client(self, end, sql=None, args=(), stdin_data=None, timeout=120, ok=True):
        """Runs the mariadb client as end; returns its output (bytes)."""
        argv = ["mariadb", "--no-defaults", "--protocol=tcp", "-h", "127.0.0.1",
                "-P", str(self.port), "-u", "root", "--batch", "--skip-column-names",
                "--max-allowed-packet=64M"] + list(args)
        if sql is not None:
            argv += ["-e", sql]
        rc, out = self.harness.run(end, argv, timeout=timeout, stdin_data=stdin_data,
                                   tag="mariadb")
        if ok:
            assert rc == 0, "mariadb exited %s:\n%r" % (rc, out[-2000:])
        return out

    def status(self, end):
        """SHOW GLOBAL STATUS as {name: value}."""
        out = self.client(end, "SHOW GLOBAL STATUS").decode()
        return dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)

    def stop(self, end):
        """SHUTDOWN through a client; the server must exit 0."""
        self.client(end, "SHUTDOWN")
        rc = self.proc.wait(60)
        assert rc == 0, "mariadbd exited %s:\n%s" % (rc, self.proc.text()[-3000:])


def ends(make_end, layout):
    s, c = LAYOUTS[layout]
    return make_end("server", s), make_end("client", c)


def store_and_check(srv, client_end):
    """The blobs go in as hex literals in one script; the server's MD5 and LENGTH of each
    agree with ours, and each comes back byte for byte (--raw)."""
    script = ["CREATE DATABASE t;",
              "CREATE TABLE t.blobs (id INT PRIMARY KEY, v LONGBLOB) ENGINE=InnoDB;"]
    for i, v in BLOBS.items():
        script.append("INSERT INTO t.blobs VALUES (%d, %s);" % (i, "x'%s'" % v.hex()
                                                                if v else "''"))
    srv.client(client_end, stdin_data="\n".join(script).encode())
    out = srv.client(client_end, "SELECT id, LENGTH(v), MD5(v) FROM t.blobs ORDER BY id")
    got = [line.split("\t") for line in out.decode().splitlines()]
    want = [[str(i), str(len(v)), hashlib.md5(v).hexdigest()] for i, v in BLOBS.items()]
    assert got == want, "the server holds other values:\n%s" % out.decode()[-2000:]
    for i, v in BLOBS.items():
        raw = srv.client(client_end, "SELECT v FROM t.blobs WHERE id = %d" % i,
                         args=["--raw"])
        assert raw == v + b"\n", "blob %d: %d bytes back for %d" % (i, len(raw) - 1, len(v))


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_blobs(harness, make_end, mariadb_template, tmp_path, layout):
    """Values of 0 B to 5 MiB, binary, stored and read back exactly; the server counted
    no aborted connection; a clean SHUTDOWN."""
    server_end, client_end = ends(make_end, layout)
    srv = Server(harness, mariadb_template, tmp_path, server_end)
    store_and_check(srv, client_end)
    st = srv.status(client_end)
    assert st.get("Aborted_clients") == "0" and st.get("Aborted_connects") == "0", st
    srv.stop(client_end)
    assert_pair_paths(server_end, client_end)
    assert_quiet_log(server_end, client_end)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_slap(harness, make_end, mariadb_template, tmp_path, layout):
    """mariadb-slap: 8 concurrent connections, a mixed load of generated inserts and
    selects, two rounds; it exits 0 and the server saw every query and no abort."""
    server_end, client_end = ends(make_end, layout)
    srv = Server(harness, mariadb_template, tmp_path, server_end)
    before = srv.status(client_end)
    require("mariadb-slap")
    rc, out = harness.run(client_end, [
        "mariadb-slap", "--no-defaults", "--protocol=tcp", "-h", "127.0.0.1",
        "-P", str(srv.port), "-u", "root", "--concurrency=8", "--iterations=2",
        "--number-of-queries=4000", "--auto-generate-sql",
        "--auto-generate-sql-load-type=mixed", "--auto-generate-sql-add-autoincrement"],
        timeout=240, tag="mariadb-slap")
    text = out.decode("utf-8", "replace")
    assert rc == 0, "mariadb-slap exited %s:\n%s" % (rc, text[-3000:])
    m = re.search(r"Number of clients running queries: (\d+)", text)
    assert m and m[1] == "8", text[-3000:]
    after = srv.status(client_end)
    # Two rounds of 4,000 queries spread over the clients, besides slap's own set-up.
    assert int(after["Questions"]) - int(before["Questions"]) >= 8000, (before, after)
    assert after["Aborted_clients"] == "0" and after["Aborted_connects"] == "0", after
    srv.stop(client_end)
    assert_pair_paths(server_end, client_end)
    assert_quiet_log(server_end, client_end)


def test_io_uring_server(harness, make_end, mariadb_template, tmp_path):
    """With InnoDB's native AIO (io_uring where the kernel has it), the server's
    connections stay on kernel TCP and say why; a ulsock client falls back in place, and
    every byte is still exact."""
    server_end, client_end = ends(make_end, "both_ulsock")
    srv = Server(harness, mariadb_template, tmp_path, server_end, native_aio=True)
    store_and_check(srv, client_end)
    srv.stop(client_end)
    conns = server_end.connections()
    assert conns, "the server logged no path decision:\n%s" % server_end.log_text()
    if URING_REASON not in server_end.log_text():
        # No io_uring here (kernel.io_uring_disabled, or an old kernel): InnoDB used
        # libaio on its files, and the sockets kept the fast path.
        assert all(c["path"] == "shm" for c in conns), conns
        pytest.skip("mariadbd did not set up io_uring on this machine")
    assert all(c["path"] == "kernel" and c["reason"] == URING_REASON for c in conns), conns
    assert all(c["path"] == "kernel" for c in client_end.connections()), \
        client_end.connections()
