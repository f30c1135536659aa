"""Helpers for the real-program tests (sockperf, iperf3, redis); fixtures and hooks
that use them are in conftest.py.

Each test runs an unmodified server and client, each end either plain (kernel TCP) or
wrapped with `ulsock run`, and checks two things: the program's own results are right,
and the ulsock log (ULSOCK_LOG=info, ULSOCK_LOG_FILE per end) shows the path the
contract in docs/INTERFACES-dev.md promises: `path=shm` when both ends run ulsock,
`path=kernel reason=...` when only one does.

The harness itself never runs under ulsock. Every process it starts has a timeout and
is killed with its whole process group when the test ends, whatever happened.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest

SOURCE = os.environ.get("ULSOCK_SOURCE") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("ULSOCK_BUILD") or os.path.join(SOURCE, "build")
ULSOCK = os.path.join(BUILD, "bin", "ulsock")

# ulsock[PID]: fd=N LOCAL -> PEER path=shm
# ulsock[PID]: fd=N LOCAL -> PEER path=kernel reason=WORDS
LOG_LINE = re.compile(r"^ulsock\[(\d+)\]: fd=(\d+) (\S+) -> (\S+) path=(shm|kernel)"
                      r"(?: reason=(.*))?$")

SERVER_TIMEOUT = 15  # seconds for a server to start listening


def require(program):
    """Skips the test when a real program it needs is not installed."""
    path = shutil.which(program)
    if path is None:
        pytest.skip("%s is not installed (scripts/install-deps.sh installs it)" % program)
    return path


def free_port():
    """A loopback port nobody listens on now. The harness is not under ulsock, so
    this socket is the kernel's."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening_ports():
    ports = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 3 and fields[3] == "0A":
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    return ports


def port_of(addr):
    """'1.2.3.4:80' or '[::1]:80' -> 80."""
    return int(addr.rsplit(":", 1)[1])


class End:
    """How one end runs: plain, or under `ulsock run` with its own log file."""

    def __init__(self, name, accelerated, profile, log_path):
        self.name = name
        self.accelerated = accelerated
        self.profile = profile
        self.log_path = log_path

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
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("ULSOCK_") and k != "LD_PRELOAD"}
        if self.accelerated:
            env["ULSOCK_LOG"] = "info"
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
        out = []
        for line in self.log_text().splitlines():
            m = LOG_LINE.match(line.strip())
            if m:
                out.append(dict(pid=int(m[1]), fd=int(m[2]), local=m[3], peer=m[4],
                                path=m[5], reason=m[6] or ""))
        return out


# ulsock[PID]: fd=N LOCAL -> PEER closed: sent X bytes, received Y bytes in this process
CLOSE_LINE = re.compile(r"^ulsock\[(\d+)\]: fd=(\d+) (\S+) -> (\S+) closed: sent (\d+) bytes, "
                        r"received (\d+) bytes in this process$")


def closed_connections(end):
    """Byte counts of the accelerated connections end closed, as dicts."""
    out = []
    for line in end.log_text().splitlines():
        m = CLOSE_LINE.match(line.strip())
        if m:
            out.append(dict(pid=int(m[1]), fd=int(m[2]), local=m[3], peer=m[4],
                            sent=int(m[5]), received=int(m[6])))
    return out


class Proc:
    """A process in its own session; output goes to a file in the test's tmp dir."""

    def __init__(self, argv, env, out_path, stdin_data=None):
        self.argv = argv
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
            self.popen = subprocess.Popen(argv, env=env, stdout=self._out,
                                          stderr=subprocess.STDOUT, stdin=stdin,
                                          start_new_session=True)
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
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail("%s did not finish in %d s; output:\n%s"
                        % (" ".join(self.argv), timeout, self.text()[-3000:]))

    def send(self, sig):
        try:
            os.killpg(self.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, sig=signal.SIGTERM, grace=5):
        """Signals the group, escalates to SIGKILL; returns the exit status."""
        if self.popen.poll() is None:
            self.send(sig)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        return self.popen.returncode

    def kill(self):
        self.send(signal.SIGKILL)
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:
            pass
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

    def start_server(self, end, argv, port, tag="server"):
        """Starts argv as end and waits until port listens (read from /proc, so no probe
        connection disturbs one-shot servers such as iperf3 -1)."""
        p = Proc(end.wrap(argv), end.env(), self._out(tag))
        self.procs.append(p)
        deadline = time.monotonic() + SERVER_TIMEOUT
        while port not in listening_ports():
            if p.popen.poll() is not None:
                pytest.fail("server %s exited with %s before listening:\n%s"
                            % (argv[0], p.popen.returncode, p.text()[-3000:]))
            if time.monotonic() > deadline:
                pytest.fail("server %s not listening on %d after %d s:\n%s"
                            % (argv[0], port, SERVER_TIMEOUT, p.text()[-3000:]))
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
