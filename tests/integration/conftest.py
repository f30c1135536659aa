"""Shared machinery of the integration suites (test_net_*.py, test_calls_*.py).

The suites start real helper processes (tests/helpers/*.c, never linked against ulsock),
plain or under `ulsock run --profile P --`, and judge them by their exit status, their
output and the `path=` lines ulsock logs for each connection.

Environment:
  ULSOCK_BUILD          build tree (default <repo>/build): bin/ulsock, lib/libulsock.so
  ULSOCK_HELPERS        helper programs (default $ULSOCK_BUILD/tests/helpers)
  ULSOCK_TEST_PLAIN=1   run everything without ulsock and skip every path assertion:
                        checks the tests' own logic against kernel TCP
  ULSOCK_TEST_TIMEOUT   default bound, in seconds, on any one process (default 60)
  ULSOCK_TEST_LOG       the log level of preloaded processes whose test asks for none
                        (default info; debug adds each fabric handshake's steps)

What a test gets:
  uls                   a Runner for this test: uls.start(...), uls.run(...), uls.helper(...)
  netns                 a factory of network namespaces deleted after the test
  free_port()           a TCP port nobody listens on (read from /proc, no socket opened)
  parse_path_lines()    the `path=shm` / `path=kernel reason=...` lines of a log text
  check_paths()         the usual assertion for "client and server, which of them preloaded"
  shm_leftovers()       /dev/shm/ulsock* entries no live process holds

The harness itself never opens a socket (see docs of the test layout): only the helpers do.
"""

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pylib"))
from ulstest import logs, net, procs  # noqa: E402
from ulstest.env import clean_env  # noqa: E402

REPO = Path(os.environ.get("ULSOCK_SOURCE") or Path(__file__).resolve().parents[2])
BUILD = Path(os.environ.get("ULSOCK_BUILD") or REPO / "build").resolve()
HELPERS = Path(os.environ.get("ULSOCK_HELPERS") or BUILD / "tests" / "helpers").resolve()
ULSOCK_BIN = BUILD / "bin" / "ulsock"
ULSOCK_LIB = BUILD / "lib" / "libulsock.so"
PLAIN = os.environ.get("ULSOCK_TEST_PLAIN", "") not in ("", "0")
TIMEOUT = float(os.environ.get("ULSOCK_TEST_TIMEOUT", "60"))
SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "ulsock"
PROFILES = ("latency", "balanced", "efficient")

# Which ends of a client/server pair run under ulsock.  "both" must take the fast path;
# in the mixed cases the preloaded end must fall back to the kernel, bytes unchanged.
SIDES = ("both", "client", "server")


def side_flags(sides):
    """(client preloaded?, server preloaded?) for one of SIDES."""
    return sides in ("both", "client"), sides in ("both", "server")


# ---------------------------------------------------------------------------- log lines


def split_endpoint(ep):
    """'1.2.3.4:80' or '[::1]:80' -> ('1.2.3.4', 80) or ('::1', 80)."""
    m = re.fullmatch(r"\[(?P<h6>[^\]]+)\]:(?P<p6>\d+)|(?P<h4>[^:\[\]]+):(?P<p4>\d+)", ep)
    assert m, f"endpoint {ep!r} is neither 1.2.3.4:80 nor [::1]:80"
    if m["h6"] is not None:
        return m["h6"], int(m["p6"])
    return m["h4"], int(m["p4"])


@dataclass(frozen=True)
class PathLine:
    pid: int
    fd: int
    local: str
    peer: str
    path: str
    reason: str
    line: str

    @property
    def local_port(self):
        return split_endpoint(self.local)[1]

    @property
    def peer_port(self):
        return split_endpoint(self.peer)[1]


def parse_path_lines(text):
    """Every `path=` decision line in TEXT; other lines are ignored."""
    return [PathLine(int(m["pid"]), int(m["fd"]), m["local"], m["peer"], m["path"],
                     (m["reason"] or "").strip(), m.string)
            for m in logs.matches(text, logs.PATH_LINE)]


# --------------------------------------------------------------------- /proc inspection

def free_port(low=20000, high=32000):
    """A TCP port with no socket bound to it right now (IPv4 or IPv6), below the usual
    ephemeral range.  Read from /proc/net/tcp*, so the harness opens no socket."""
    return net.free_port((low, high))


def proc_fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def proc_rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def proc_map_count(pid):
    return len(Path(f"/proc/{pid}/maps").read_text().splitlines())


# A user's offer board (docs/protocol.md, section 3): one small file per user, made at the
# first connection and kept for good, like a lock file; no leftover and no leak.
SHM_BOARD_PREFIX = "ulsock-offers."


def shm_entries(prefix=SHM_PREFIX):
    """Names in /dev/shm starting with PREFIX ('' for all), the offer boards left out."""
    try:
        return {p.name for p in SHM_DIR.iterdir()
                if p.name.startswith(prefix) and not p.name.startswith(SHM_BOARD_PREFIX)}
    except FileNotFoundError:
        return set()


def _shm_held_by_live_processes():
    """/dev/shm/ulsock* names some live process has open or mapped.

    A client's segment that began as an unnamed spare shows in its maps as
    "/dev/shm/#<inode> (deleted)" even once named: those are matched by inode."""
    held = set()
    needle = str(SHM_DIR / SHM_PREFIX)
    unnamed = str(SHM_DIR / "#")
    by_ino = {}
    for name in shm_entries():
        try:
            by_ino[(SHM_DIR / name).stat().st_ino] = name
        except OSError:
            continue
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith(needle):
                    held.add(Path(target.split(" (deleted)")[0]).name)
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    if needle in line:
                        held.add(Path(line.split(None, 5)[-1].strip().split(" (deleted)")[0]).name)
                    elif unnamed in line:
                        fields = line.split(None, 5)
                        name = by_ino.get(int(fields[4])) if len(fields) == 6 else None
                        if name:
                            held.add(name)
        except OSError:
            continue
    return held


def shm_leftovers(before, grace=3.0):
    """/dev/shm/ulsock* entries that are new since BEFORE and that no live process holds.

    Entries still open or mapped by some process (another suite running beside us) are not
    leftovers; one that stays without a holder for GRACE seconds is. An entry that another
    program makes and maps a moment later, or unmaps and removes, is without a holder
    for that moment only: so only an entry found unheld at every look counts."""
    deadline = time.monotonic() + grace
    unheld = None
    while True:
        new = shm_entries() - set(before)
        orphans = new - _shm_held_by_live_processes() if new else set()
        unheld = orphans if unheld is None else unheld & orphans
        if not unheld or time.monotonic() > deadline:
            return sorted(unheld)
        time.sleep(0.1)


# ---------------------------------------------------------------------------- processes

def _tail(path, n=4000):
    try:
        data = Path(path).read_bytes()
    except OSError:
        return ""
    return data[-n:].decode(errors="replace")


class Proc(procs.GroupProc):
    """One started process: its output file, its ulsock log, bounded waits, a sure kill."""

    def __init__(self, name, argv, popen, out, err, log, preloaded):
        super().__init__(argv, popen)
        self.name = name
        self.out = out
        self.err = err
        self.log = log
        self.preloaded = preloaded
        self.rc = None

    def __repr__(self):
        return f"<Proc {self.name} pid={self.pid} rc={self.rc}>"

    def output(self):
        return self.out.read_text(errors="replace") if self.out.exists() else ""

    def stderr(self):
        return self.err.read_text(errors="replace") if self.err.exists() else ""

    def log_text(self):
        return self.log.read_text(errors="replace") if self.log and self.log.exists() else ""

    def paths(self):
        return parse_path_lines(self.log_text())

    def describe(self):
        return (f"--- {self.name} (pid {self.pid}, rc {self.popen.poll()}): {' '.join(self.argv)}\n"
                f"stdout tail:\n{_tail(self.out)}\nstderr tail:\n{_tail(self.err)}\n"
                + (f"ulsock log tail:\n{_tail(self.log)}\n" if self.log else ""))

    def wait_for(self, pattern, timeout=TIMEOUT):
        """Waits until stdout matches PATTERN (a regex); returns the match.  Fails if the
        process exits first or TIMEOUT passes."""
        rx = re.compile(pattern, re.M)
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.output())
            if m:
                return m
            if not self.alive:
                m = rx.search(self.output())
                if m:
                    return m
                pytest.fail(f"{self.name} exited before printing /{pattern}/\n{self.describe()}")
            if time.monotonic() > deadline:
                pytest.fail(f"{self.name}: no /{pattern}/ within {timeout}s\n{self.describe()}")
            time.sleep(0.02)

    def wait(self, timeout=TIMEOUT, expect_rc=0):
        """Waits for exit; kills and fails on TIMEOUT (a hang).  Checks the exit status
        unless EXPECT_RC is None.  Returns the status (negative: killed by that signal)."""
        self.rc = self.reap(timeout)
        if self.rc is None:
            stacks = self.stacks()
            self.stop()
            pytest.fail(f"{self.name} did not finish within {timeout}s (hang?)\n{self.describe()}"
                        f"\n{stacks}")
        if expect_rc is not None and self.rc != expect_rc:
            pytest.fail(f"{self.name} exited with {self.rc}, expected {expect_rc}\n"
                        f"{self.describe()}")
        return self.rc

    def send_line(self, text=""):
        self.popen.stdin.write((text + "\n").encode())
        self.popen.stdin.flush()

    def kill(self, sig=signal.SIGKILL):
        """Signals the process itself (not its group)."""
        if self.alive:
            os.kill(self.pid, sig)

    def stop(self, grace=3.0):
        """Ends the whole process group: SIGTERM, then SIGKILL after GRACE seconds. A group
        whose leader is gone already is SIGKILLed at once (forked children may still hold
        it); when the leader exits on the SIGTERM, the group gets no SIGKILL."""
        self.stop_group(signal.SIGTERM, grace, kill_wait=10.0, kill_survivors=False)
        if self.popen.stdin:
            try:
                self.popen.stdin.close()
            except OSError:
                pass
        self.rc = self.popen.poll()


class Runner:
    """Starts the processes of one test and guarantees they are gone at its end."""

    def __init__(self, directory):
        self.dir = Path(directory)
        self.procs = []
        self.names = set()
        self.shm_before = shm_entries()
        self.preloaded_any = False
        self._world_dir = None

    # -- building commands

    @staticmethod
    def helper(name):
        path = HELPERS / name
        if not os.access(path, os.X_OK):
            pytest.fail(f"helper {path} is missing: build the tree (ninja -C {BUILD}) "
                        "or point ULSOCK_HELPERS at the helpers")
        return str(path)

    def preload(self, ulsock):
        """Whether a process asked to run with ULSOCK really gets the preload."""
        return bool(ulsock) and not PLAIN

    def _unique(self, name):
        base, n = name, 1
        while name in self.names:
            n += 1
            name = f"{base}{n}"
        self.names.add(name)
        return name

    def _files_dir(self, user):
        if user is None:
            return self.dir
        if self._world_dir is None:
            self._world_dir = Path(f"/tmp/ulsock-test-{os.getpid()}-{random.getrandbits(32):08x}")
            self._world_dir.mkdir(mode=0o777)
            self._world_dir.chmod(0o777)
        return self._world_dir

    def command(self, argv, *, name, ulsock=True, profile=None, env=None, wrap=(),
                user=None, log_level="info"):
        """(argv, env, log path, preloaded) for running ARGV.

        ULSOCK: run under `ulsock run` (ignored with ULSOCK_TEST_PLAIN=1).  WRAP: a prefix
        for the whole command line, such as ['ip', 'netns', 'exec', NS].  USER: run as this
        user (through setpriv), with files it can write."""
        preloaded = self.preload(ulsock)
        files = self._files_dir(user)
        log = files / f"{name}.ulsock.log"
        full_env = clean_env(env)
        argv = [str(a) for a in argv]
        if preloaded:
            if not os.access(ULSOCK_BIN, os.X_OK):
                pytest.fail(f"{ULSOCK_BIN} is missing: build the tree, or set "
                            "ULSOCK_TEST_PLAIN=1 to check the tests against kernel TCP")
            prefix = [str(ULSOCK_BIN), "run"]
            if profile:
                prefix += ["--profile", profile]
            argv = prefix + ["--"] + argv
            if log_level == "info":  # a test's own choice stands
                log_level = os.environ.get("ULSOCK_TEST_LOG", log_level)
            full_env.update({"ULSOCK_LOG": log_level, "ULSOCK_LOG_FILE": str(log)})
            full_env.update(env or {})
            log.touch()
            if user is not None:
                log.chmod(0o666)
            self.preloaded_any = True
        if user is not None:
            argv = user_prefix(user) + argv
        return list(wrap) + argv, full_env, (log if preloaded else None), preloaded

    # -- running

    def start(self, argv, *, name, ulsock=True, profile=None, env=None, wrap=(), user=None,
              ready=None, ready_timeout=TIMEOUT, stdin=False, log_level="info"):
        """Starts ARGV in the background, in its own process group.  With READY (a regex),
        waits until its stdout matches.  The process is killed at the end of the test."""
        name = self._unique(name)
        full, env_, log, preloaded = self.command(argv, name=name, ulsock=ulsock,
                                                  profile=profile, env=env, wrap=wrap,
                                                  user=user, log_level=log_level)
        out, err = self.dir / f"{name}.out", self.dir / f"{name}.err"
        with open(out, "wb") as fo, open(err, "wb") as fe:
            popen = procs.spawn(full, env_, fo, stderr=fe, cwd=self.dir,
                                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL)
        proc = Proc(name, full, popen, out, err, log, preloaded)
        self.procs.append(proc)
        if ready:
            proc.ready = proc.wait_for(ready, timeout=ready_timeout)
        return proc

    def run(self, argv, *, name, timeout=TIMEOUT, expect_rc=0, **kw):
        """Runs ARGV to completion (bounded by TIMEOUT) and returns its Proc."""
        proc = self.start(argv, name=name, **kw)
        proc.wait(timeout=timeout, expect_rc=expect_rc)
        return proc

    def server(self, argv, *, name="server", **kw):
        """Starts a helper that prints 'READY port=P'; returns (proc, port)."""
        proc = self.start(argv, name=name, ready=r"READY port=(\d+)", **kw)
        return proc, int(proc.ready.group(1))

    def stat(self, timeout=10):
        """`ulsock stat --json`, parsed (the live connections of this user)."""
        res = subprocess.run([str(ULSOCK_BIN), "stat", "--json"], capture_output=True,
                             timeout=timeout, env=clean_env())
        assert res.returncode == 0, f"ulsock stat failed: {res.stderr.decode()}"
        return json.loads(res.stdout)

    # -- end of test

    def stop_all(self):
        for proc in reversed(self.procs):
            proc.stop()

    def assert_no_shm_leftovers(self, grace=3.0):
        """No /dev/shm/ulsock* entry that appeared during this test outlives its processes.
        Call it once the test's ulsock processes have exited.  A no-op when none of them
        ran preloaded (ULSOCK_TEST_PLAIN=1): what appears then is somebody else's."""
        if not self.preloaded_any:
            return
        left = shm_leftovers(self.shm_before, grace=grace)
        assert not left, f"/dev/shm entries left behind: {left}"

    def describe(self):
        return "\n".join(p.describe() for p in self.procs)

    def cleanup(self):
        if self._world_dir is not None:
            shutil.rmtree(self._world_dir, ignore_errors=True)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    setattr(item, "rep_" + rep.when, rep)
    return rep


@pytest.fixture
def uls(tmp_path, request):
    """The test's Runner.  Teardown kills every process it started; then, if any of them
    ran under ulsock and the test passed, checks that /dev/shm holds nothing of theirs."""
    runner = Runner(tmp_path)
    yield runner
    runner.stop_all()
    call = getattr(request.node, "rep_call", None)
    try:
        if call is not None and call.failed:
            print(runner.describe())
        elif call is not None and call.passed and runner.preloaded_any:
            runner.assert_no_shm_leftovers()
    finally:
        runner.cleanup()


# ------------------------------------------------------------------- path assertions

def expect_paths(proc, path, count=None, reason=None, local_port=None, peer_port=None):
    """Every path line PROC logged says PATH (and REASON, a regex, matches the reason of
    each kernel line); COUNT lines in all if given.  No-op for a process that ran plain,
    except that a plain process must not have logged at all."""
    lines = proc.paths()
    if not proc.preloaded:
        assert not lines, f"{proc.name} ran plain but logged path lines: {lines[:3]}"
        return lines
    ctx = f"{proc.name}'s ulsock log:\n{_tail(proc.log)}"
    if count is not None:
        assert len(lines) == count, f"{proc.name}: {len(lines)} path lines, expected {count}\n{ctx}"
    wrong = [ln.line for ln in lines if ln.path != path]
    assert not wrong, f"{proc.name}: expected path={path}, got: {wrong[:5]}\n{ctx}"
    if path == "kernel":
        assert all(ln.reason for ln in lines), f"{proc.name}: path=kernel without a reason\n{ctx}"
        if reason:
            bad = [ln.line for ln in lines if not re.search(reason, ln.reason, re.I)]
            assert not bad, f"{proc.name}: reason does not match /{reason}/: {bad[:5]}"
    else:
        assert all(not ln.reason for ln in lines), f"{proc.name}: path=shm with a reason\n{ctx}"
    if local_port is not None:
        bad = [ln.line for ln in lines if ln.local_port != local_port]
        assert not bad, f"{proc.name}: local port is not {local_port}: {bad[:5]}"
    if peer_port is not None:
        bad = [ln.line for ln in lines if ln.peer_port != peer_port]
        assert not bad, f"{proc.name}: peer port is not {peer_port}: {bad[:5]}"
    return lines


def check_paths(client, server, conns, port=None, server_conns=None, kernel_reason=None):
    """The standard verdict for a client/server pair that made CONNS connections: both
    preloaded -> path=shm on both sides; one preloaded -> path=kernel (with a reason) on that
    side, nothing logged on the plain side.  PORT: the server's port, checked in the lines.
    KERNEL_REASON: force path=kernel on every preloaded side, reason matching this regex."""
    both = client.preloaded and server.preloaded
    path = "shm" if both and kernel_reason is None else "kernel"
    expect_paths(client, path, count=conns, reason=kernel_reason, peer_port=port)
    expect_paths(server, path, count=conns if server_conns is None else server_conns,
                 reason=kernel_reason, local_port=port)


# ---------------------------------------------------------------------- other users

def user_prefix(user):
    """The command prefix that runs a program as USER (a name or a uid) via setpriv."""
    import pwd
    pw = pwd.getpwnam(user) if isinstance(user, str) else pwd.getpwuid(user)
    return ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups"]


def require_user(user, *paths):
    """Skips unless we are root, setpriv exists and USER can execute/read PATHS."""
    if os.geteuid() != 0:
        pytest.skip("running as another user needs root")
    if not shutil.which("setpriv"):
        pytest.skip("setpriv is not installed")
    try:
        prefix = user_prefix(user)
    except KeyError:
        pytest.skip(f"no user {user}")
    for p in paths:
        res = subprocess.run(prefix + ["test", "-r", str(p)], capture_output=True, timeout=10)
        if res.returncode != 0:
            pytest.skip(f"user {user} cannot read {p}")


# ------------------------------------------------------------------ network namespaces

class Netns:
    def __init__(self, name):
        self.name = name

    @property
    def prefix(self):
        """Command prefix that runs a program inside this namespace."""
        return ["ip", "netns", "exec", self.name]

    def ip(self, *args):
        _ip("-n", self.name, *args)


def _ip(*args):
    res = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    if res.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {res.stderr.strip()}")


@pytest.fixture
def netns():
    """A factory: netns() creates a fresh network namespace (loopback up) and returns a
    Netns; netns.veth(a, addr_a, b, addr_b) joins two of them (or one with itself) by a
    veth pair carrying the given 'A.B.C.D/N' addresses.  Everything is deleted after the
    test.  Skips when namespaces cannot be created (not root, no ip(8), no privilege)."""
    created = []
    counter = [0]

    def make():
        if os.geteuid() != 0 or not shutil.which("ip"):
            pytest.skip("network namespaces need root and ip(8)")
        name = f"ulst{os.getpid()}n{len(created)}"
        try:
            _ip("netns", "add", name)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            pytest.skip(f"cannot create a network namespace: {e}")
        ns = Netns(name)
        created.append(ns)
        ns.ip("link", "set", "lo", "up")
        return ns

    def veth(a, addr_a, b, addr_b):
        counter[0] += 1
        stem = f"uv{os.getpid() % 100000}x{counter[0]}"  # interface names: 15 chars at most
        va, vb = stem + "a", stem + "b"
        try:
            if a is b:
                a.ip("link", "add", va, "type", "veth", "peer", "name", vb)
            else:
                a.ip("link", "add", va, "type", "veth", "peer", "name", vb, "netns", b.name)
        except RuntimeError as e:
            pytest.skip(f"cannot create a veth pair: {e}")
        for ns, dev, addr in ((a, va, addr_a), (b, vb, addr_b)):
            if addr:
                ns.ip("addr", "add", addr, "dev", dev)
            ns.ip("link", "set", dev, "up")
        return va, vb

    make.veth = veth
    yield make
    for ns in created:
        subprocess.run(["ip", "netns", "del", ns.name], capture_output=True, timeout=20)


# ------------------------------------------------------------- the net_* helper pair

def kv(text, prefix):
    """The key=value pairs of the last line of TEXT starting with PREFIX, as a dict."""
    lines = [ln for ln in text.splitlines() if ln.startswith(prefix)]
    assert lines, f"no line starting with {prefix!r} in:\n{text[-2000:]}"
    return dict(tok.split("=", 1) for tok in lines[-1].split()[1:] if "=" in tok)


def start_net_server(uls, *args, name="server", ulsock=True, **kw):
    """Starts tests/helpers/net_server on a free port; returns (proc, port)."""
    return uls.server([uls.helper("net_server"), "--port", "0", *args], name=name,
                      ulsock=ulsock, **kw)


def run_net_client(uls, port, *args, name="client", ulsock=True, timeout=TIMEOUT, **kw):
    """Runs tests/helpers/net_client against PORT to completion (exit 0 expected)."""
    return uls.run([uls.helper("net_client"), "--port", str(port), *args], name=name,
                   ulsock=ulsock, timeout=timeout, **kw)


def server_conns(server):
    """The CONN lines of a net_server, as dicts (idx, pid, worker, rx, tx, result)."""
    out = []
    for line in server.output().splitlines():
        if line.startswith("CONN "):
            d = dict(tok.split("=", 1) for tok in line.split()[1:6])
            d["result"] = line.split("result=", 1)[1]
            out.append(d)
    return out
