"""Helpers for the real-program tests (sockperf, iperf3, redis); fixtures and hooks
that use them are in conftest.py.

Each test runs an unmodified server and client, each end either plain (kernel TCP) or
wrapped with `ulsock run`, and checks two things: the program's own results are right,
and the ulsock log (ULSOCK_LOG=info, ULSOCK_LOG_FILE per end) shows the path the
contract in docs/INTERFACES-dev.md promises: `path=shm` when both ends run ulsock,
`path=kernel reason=...` when only one does.

The harness itself never runs under ulsock. Every process it starts has a timeout and
is killed with its whole process group when the test ends, whatever happened. What it
shares with the integration suites and the tools (processes, ports, the environment,
ulsock's log lines) is in tests/pylib/ulstest.
"""

import collections
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "pylib"))
from ulstest import logs, net, procs  # noqa: E402
from ulstest.env import clean_env  # noqa: E402
from ulstest.logs import CLOSE_LINE, PATH_LINE  # noqa: E402
# The tests import these from here.
from ulstest.net import established_to  # noqa: E402, F401

SOURCE = os.environ.get("ULSOCK_SOURCE") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("ULSOCK_BUILD") or os.path.join(SOURCE, "build")
ULSOCK = os.path.join(BUILD, "bin", "ulsock")


def free_port():
    """A TCP port with no socket on it right now, from 10000 to 19999: below the kernel's
    ephemeral range, where every connect() of a suite running beside this one takes its
    source port (a port the kernel handed out and took back was taken by such a client
    before haproxy could bind it, in CI), and apart from the integration suites' 20000 to
    31999."""
    return net.free_port((10000, 20000))


SERVER_TIMEOUT = 15  # seconds for a server to start listening


def last_kv(text, word):
    """The key=value pairs of TEXT's last line that starts with WORD and a space."""
    lines = [ln for ln in text.splitlines() if ln.startswith(word + " ")]
    assert lines, "no %s line in:\n%s" % (word, text[-3000:])
    return dict(tok.split("=", 1) for tok in lines[-1].split()[1:] if "=" in tok)


def require(program):
    """Skips the test when a real program it needs is not installed."""
    path = shutil.which(program)
    if path is None:
        pytest.skip("%s is not installed (scripts/install-deps.sh installs it)" % program)
    return path


def port_of(addr):
    """'1.2.3.4:80' or '[::1]:80' -> 80."""
    return int(addr.rsplit(":", 1)[1])


# A client keeps a connection on kernel TCP when its last ones to that address and port
# were short (README, ULSOCK_SHORT_CALLS).
SHORT_KEPT = ("last connections to this destination were short or not accelerated "
              "(ULSOCK_SHORT_CALLS)")
# Its server then does not look for a segment (ulstest.logs.NO_OFFER), or looks and finds
# none when an offer to another port of the board's slot is pending (NO_SEGMENT).
NO_OFFER = logs.NO_OFFER
NO_SEGMENT_REASONS = (logs.NO_SEGMENT, logs.NO_OFFER)


def short_kept(client_end):
    """The client's connections kept on kernel TCP for being short: a Counter of their
    local ports (which the server sees as the peer's)."""
    return collections.Counter(port_of(c["local"]) for c in client_end.connections()
                               if c["path"] == "kernel" and c["reason"] == SHORT_KEPT)


class End:
    """How one end runs: plain, or under `ulsock run` with its own log file."""

    def __init__(self, name, accelerated, profile, log_path):
        self.name = name
        self.accelerated = accelerated
        self.profile = profile
        self.log_path = log_path
        self.log_level = "info"

    def __repr__(self):
        return "%s(%s)" % (self.name, "ulsock" if self.accelerated else "plain")

    def wrap(self, argv):
        if not self.accelerated:
            return list(argv)
        pre = [ULSOCK, "run"]
        if self.profile:
            pre += ["--profile", self.profile]
        return pre + ["--"] + list(argv)

    def env(self):
        env = clean_env()
        if self.accelerated:
            env["ULSOCK_LOG"] = self.log_level
            env["ULSOCK_LOG_FILE"] = str(self.log_path)
        return env

    def log_text(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def connections(self):
        """The path decisions this end logged, as dicts."""
        return [dict(pid=int(m[1]), fd=int(m[2]), local=m[3], peer=m[4], path=m[5],
                     reason=m[6] or "") for m in logs.matches(self.log_text(), PATH_LINE)]


def closed_connections(end):
    """Byte counts of the accelerated connections end closed, as dicts."""
    return [dict(pid=int(m[1]), fd=int(m[2]), local=m[3], peer=m[4], sent=int(m[5]),
                 received=int(m[6])) for m in logs.matches(end.log_text(), CLOSE_LINE)]


class Proc(procs.GroupProc):
    """A process in its own session; output goes to a file in the test's tmp dir."""

    def __init__(self, argv, env, out_path, stdin_data=None):
        self.out_path = out_path
        stdin = subprocess.DEVNULL
        if stdin_data is not None:
            # A file, not a pipe: a client that never reads cannot block the harness.
            in_path = str(out_path) + ".in"
            with open(in_path, "wb") as f:
                f.write(stdin_data)
            stdin = open(in_path, "rb")
        self._out = open(out_path, "wb")
        try:
            super().__init__(argv, procs.spawn(argv, env, self._out, stdin=stdin))
        finally:
            if stdin is not subprocess.DEVNULL:
                stdin.close()

    def output(self):
        if not self._out.closed:
            self._out.flush()
        with open(self.out_path, "rb") as f:
            return f.read()

    def text(self):
        return self.output().decode("utf-8", "replace")

    def wait(self, timeout):
        """Waits for exit; on timeout kills the group and fails the test."""
        rc = self.reap(timeout)
        if rc is None:
            self.kill()
            pytest.fail("%s did not finish in %d s; output:\n%s"
                        % (" ".join(self.argv), timeout, self.text()[-3000:]))
        return rc

    def stop(self, sig=signal.SIGTERM, grace=5):
        """Signals the group, escalates to SIGKILL; returns the exit status."""
        rc = self.stop_group(sig, grace, kill_wait=10)
        self._out.close()
        return rc

    def kill(self):
        self.send(signal.SIGKILL)
        self.reap(10)
        self._out.close()


class Harness:
    """Starts servers and runs clients for one test; kills everything at teardown."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.procs = []
        self.count = 0

    def _out(self, tag):
        self.count += 1
        return self.tmp / ("%02d-%s.out" % (self.count, tag))

    def start_server(self, end, argv, port, tag="server", ready=None, ready_timeout=60):
        """Starts argv as end and waits until port listens (read from /proc, so no probe
        connection disturbs one-shot servers such as iperf3 -1); with READY, also until
        its output says that phrase (a database listens before it takes sessions)."""
        p = Proc(end.wrap(argv), end.env(), self._out(tag))
        self.procs.append(p)
        state = net.wait_listening([port], lambda: not p.alive, SERVER_TIMEOUT)
        if state == "exited":
            pytest.fail("server %s exited with %s before listening:\n%s"
                        % (argv[0], p.popen.returncode, p.text()[-3000:]))
        if state == "timeout":
            pytest.fail("server %s not listening on %d after %d s:\n%s"
                        % (argv[0], port, SERVER_TIMEOUT, p.text()[-3000:]))
        deadline = time.monotonic() + ready_timeout
        while ready is not None and ready not in p.text():
            assert p.alive and time.monotonic() < deadline, \
                "%s did not become ready:\n%s" % (argv[0], p.text()[-3000:])
            time.sleep(0.02)
        return p

    def run(self, end, argv, timeout=60, stdin_data=None, tag="client"):
        """Runs argv as end to completion; returns (exit status, output bytes)."""
        p = Proc(end.wrap(argv), end.env(), self._out(tag), stdin_data)
        self.procs.append(p)
        rc = p.wait(timeout)
        out = p.output()
        p.kill()  # reaps stray children of the client's group, closes the file
        return rc, out

    def close(self):
        for p in reversed(self.procs):
            p.stop(signal.SIGKILL, 0)


def both_ulsock(make_end, profile=None):
    return make_end("server", True, profile), make_end("client", True, profile)


def one_plain(make_end, accelerated_side):
    """accelerated_side is 'server' or 'client': that end runs ulsock, the other not."""
    return (make_end("server", accelerated_side == "server"),
            make_end("client", accelerated_side == "client"))


def assert_fast_path(*ends):
    """Every accelerated end logged at least one connection, and all of them on shm:
    two ulsock processes on this host always qualify for the fast path."""
    for end in ends:
        conns = end.connections()
        assert conns, "%s logged no path decision; log:\n%s" % (end, end.log_text())
        kernel = [c for c in conns if c["path"] != "shm"]
        assert not kernel, "%s: connections between two ulsock processes fell back to " \
            "the kernel: %s" % (end, kernel)


def assert_kernel_path(end):
    """The accelerated end of a pair with one plain end logged kernel, with a reason."""
    conns = end.connections()
    assert conns, "%s logged no path decision; log:\n%s" % (end, end.log_text())
    for c in conns:
        assert c["path"] == "kernel", "%s: %s used shm with a plain peer" % (end, c)
        assert c["reason"].strip(), "%s: kernel path without a reason: %s" % (end, c)


def assert_other_user(server_end, client_end, uid):
    """Both ends ran ulsock as different users, neither trusting the other: both fell
    back to kernel TCP, and the server's reasons name the client's uid."""
    assert_kernel_path(server_end)
    assert_kernel_path(client_end)
    for c in server_end.connections():
        assert "peer uid %d is another user" % uid in c["reason"], c
