"""caddy, a Go web server, with curl and wrk as clients: a program ulsock cannot accelerate.

caddy is dynamically linked, but Go's runtime makes its socket system calls itself and
never through libc, so a preloaded ulsock sees none of them. Under `ulsock run` it must
leave caddy alone: the library loads (its debug log says so, and /proc/PID/maps shows
it), caddy serves and shuts down as it does without it, and the library decides no
connection. A client under ulsock then has a peer that is not running ulsock: it falls
back to kernel TCP, byte-exact, and says why. Every case runs with both ends plain,
each end under ulsock in turn, and both under ulsock. No timing is asserted.
"""

import collections
import re
import signal
import time

import pytest

from proglib import SHORT_KEPT, assert_kernel_path, free_port, require
from weblib import (FILES, EnvEnd, check_download_series, curl, get_args, make_files,
                    preloaded, stat_rows, wrk_result, wrk_start)

MODES = ["plain", "server", "client", "both"]
SERVE = dict(FILES, **{"kib.bin": 1024})
CONNECTIONS = 16  # wrk's


def ends(make_end, mode):
    return (make_end("server", mode in ("server", "both")),
            make_end("client", mode in ("client", "both")))


class Caddy:
    """`caddy file-server` on a free loopback port, its state directories in tmp_path.
    The file server runs with its admin endpoint disabled."""

    def __init__(self, harness, end, tmp_path):
        require("caddy")
        home = tmp_path / "home"
        home.mkdir()
        extra = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / "config"),
                 "XDG_DATA_HOME": str(home / "data"), "XDG_CACHE_HOME": str(home / "cache")}
        if end.accelerated:
            # The debug level logs the library's start, proof that it was loaded.
            extra["ULSOCK_LOG"] = "debug"
        self.end = EnvEnd(end, extra)
        self.port = free_port()
        self.www = tmp_path / "www"
        self.sums = make_files(self.www, SERVE)
        self.proc = harness.start_server(self.end, [
            "caddy", "file-server", "--listen", "127.0.0.1:%d" % self.port,
            "--root", str(self.www)], self.port, tag="caddy")
        self.base = "http://127.0.0.1:%d" % self.port

    def check_untouched(self):
        """caddy runs with the library loaded exactly when it runs under ulsock, and the
        library decided no connection of its own (Go never called connect or accept
        through libc)."""
        pid = self.proc.popen.pid
        assert self.proc.popen.poll() is None, "caddy exited:\n%s" % self.proc.text()[-3000:]
        assert preloaded(pid) == self.end.accelerated, "libulsock.so mapped in caddy: %s" % (
            not self.end.accelerated)
        if self.end.accelerated:
            log = self.end.log_text()
            assert re.search(r"^ulsock\[%d\]: loaded" % pid, log, re.M), log
            assert self.end.connections() == [], log
            assert "closed:" not in log, log

    def stop(self):
        """SIGTERM: caddy shuts down gracefully with status 0, as it does without
        ulsock."""
        self.proc.send(signal.SIGTERM)
        rc = self.proc.wait(30)
        text = self.proc.text()
        assert rc == 0, "caddy exited %s:\n%s" % (rc, text[-3000:])
        assert "shutdown complete" in text, text[-3000:]
        assert '"level":"error"' not in text, text[-3000:]


def check_client(mode, client_end):
    """A client under ulsock fell back to kernel TCP on every connection, saying that
    caddy does not run ulsock; after 4 such connections a process no longer offers caddy
    the fast path, and says why (README, ULSOCK_SHORT_CALLS)."""
    if mode not in ("client", "both"):
        return
    assert_kernel_path(client_end)
    seen = collections.Counter()
    for c in client_end.connections():
        if c["reason"] == SHORT_KEPT:
            assert seen[c["pid"]] >= 4, c
        else:
            assert "not running ulsock" in c["reason"], c
            seen[c["pid"]] += 1


@pytest.mark.parametrize("mode", MODES)
def test_downloads(harness, make_end, tmp_path, mode):
    """Every file, byte-exact, over one kept-alive connection and over one connection
    per request; a missing file is a 404."""
    server_end, client_end = ends(make_end, mode)
    caddy = Caddy(harness, server_end, tmp_path)
    check_download_series(harness, client_end, caddy.base, list(SERVE), tmp_path, caddy.sums)
    missing = curl(harness, client_end, get_args(caddy.base, ["missing.bin"], tmp_path))
    assert [r[0] for r in missing] == [404], missing
    caddy.check_untouched()
    check_client(mode, client_end)
    caddy.stop()


@pytest.mark.parametrize("mode", MODES)
def test_wrk(harness, make_end, tmp_path, mode):
    """wrk -t2 -c16 -d2s against a 1 KiB file: requests completed, no socket errors, no
    error statuses. While it runs, `ulsock stat` lists the client's connections on
    kernel TCP and none of caddy's."""
    server_end, client_end = ends(make_end, mode)
    caddy = Caddy(harness, server_end, tmp_path)
    wrk = wrk_start(harness, client_end, caddy.base + "/kib.bin", connections=CONNECTIONS)
    if client_end.accelerated:
        deadline = time.monotonic() + 10
        while True:
            rows = [r for r in stat_rows(caddy.port) if r["path"] != "pending"]
            if rows:
                break
            assert wrk.popen.poll() is None and time.monotonic() < deadline, \
                "ulsock stat listed no connection to port %d during the run" % caddy.port
            time.sleep(0.05)
        assert all(r["role"] == "client" and r["path"] == "kernel" and r["reason"]
                   for r in rows), rows
    else:
        time.sleep(0.5)
        assert wrk.popen.poll() is None, "wrk ended before ulsock stat could look"
        rows = stat_rows(caddy.port)
        assert rows == [], rows
    wrk_result(wrk, SERVE["kib.bin"])
    caddy.check_untouched()
    check_client(mode, client_end)
    caddy.stop()
