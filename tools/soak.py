#!/usr/bin/env python3
"""ulsock soak (`make soak`): reliability figures at scale, with both ends of every
connection under `ulsock run` on this host, so that every connection runs on the
shared-memory rings. Four parts (--only, default all), each run by the project's helper
programs (tests/helpers/net_server.c, net_client.c and net_peer.c, plain programs that
ulsock wraps, and shm_intruder.c):

  data    --conns connections (default 64) between one net_server and one net_client, all
          at once, each a duplex stream: both directions at the same time, write and read
          sizes drawn at random from 1 byte to --max-io (log-uniform, so that tiny and
          ring-sized operations both occur), blocking and poll()-driven sockets on either
          side in all four combinations. Each receiver checks every byte against the
          deterministic stream at its offset, so a byte lost, duplicated, reordered or
          corrupted fails its connection. --bytes (default 10 GiB) is the total over all
          connections and both directions. It passes when every connection verified at
          both ends, every connection logged path=shm at both ends (ULSOCK_LOG=info) and
          none left the fast path, and no /dev/shm segment outlived the processes.

  cycles  --cycles (default 100,000) connect / 1-byte echo / close cycles, made one at a
          time by one net_client against one long-lived net_server (one client process
          for all of them: a process per connection would measure process start-up).
          The client pauses, with every connection closed, after --warmup connections
          (they let both processes make what they keep for good: the log file, the stat
          record, the spare segment, thread stacks, malloc arenas) and again after the
          cycles; each time, once the descriptors of both processes have settled, the
          tool samples their descriptors (/proc/PID/fd), RSS (/proc/PID/status VmRSS) and
          mappings, and /dev/shm. It passes when neither process gained a descriptor
          (the library's wake-up bells, reused and bounded by the threads alive at
          once, may number 16 at most instead, and its spare segment one), neither's
          RSS grew by more than --rss-tolerance-mib (default 8), the /dev/shm entries
          the two hold did not grow and no new ulsock entry is left that no process
          holds, and every connection logged path=shm at both ends. /dev/shm entries
          that other live processes hold (another test beside this one) are reported,
          not counted against the run, and in every part a segment left behind counts
          only when its header names one of the part's processes.

  kill    --kill-trials (default 1,000) connections of two net_peer processes, one
          trial after another; in each, one side is sent SIGKILL at a random moment and
          the other, the survivor, must notice. The trials cycle through every phase
          (the survivor asleep in a read of an idle connection, blocked in a send on a
          full ring, reading a stream, sending one, or both at once), every victim (the
          client or the server) and every way the survivor waits (blocking calls, poll,
          epoll), with the victim's way, tiny, mixed or ring-sized I/O and the delay
          before the kill drawn at random (--seed). It passes when every survivor saw EOF
          or ECONNRESET (reading) and EPIPE or ECONNRESET (sending), never a hang (10 s),
          never a wrong byte, and after EOF every byte the victim's sends had returned;
          when every survivor logged path=shm; and when every segment was removed. The
          time from the kill to the survivor's observation is reported (median, p99, max)
          and, except with --short, judged: --notice-bound-ms (default 100) at most.

  users   user A (this one, root) holds a connection on shared memory between two
          net_peer processes; another user (--user, default nobody) tries --map-attempts
          times in all (default 1,000) to open or map its segment: by name, guessed
          names, other paths to it, O_PATH, file handles, links, mode and ACL changes,
          /proc/PID/fd, map_files, root, mem, pidfd_getfd, process_vm_readv, ptrace, the
          library's attach path with the identity sock_diag shows (shm_intruder), and as
          a ulsock server that trusts A, accepting connections from a client of A. Each
          way is first tried as A, where it must work (a way that cannot work proves
          nothing), and it passes when none worked as the other user. It needs root.

Throughput, connections per second and, with --short, the kill part's notice times are
reported, never judged. --short is the CI-sized version (64 MiB, 2,000 cycles, 50 kill
trials, 50 attempts to map). Every process is bounded by a timeout and stopped with its
process group whatever happens; traffic goes to 127.0.0.1 only. --json FILE writes
every figure and the exact commands. Exit status 0 when every check passed, 1 when one
failed or a part could not run (the reason is printed), 2 on a usage error.
"""

import argparse
import atexit
import collections
import datetime
import json
import math
import os
import platform
import pwd
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402 (its host description)
import projenv  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "pylib"))
from ulstest import logs, procs  # noqa: E402
from ulstest.env import clean_env  # noqa: E402

ADDR = "127.0.0.1"
SHM_DIR = "/dev/shm"
SHM_PREFIX = "ulsock."
# net_client's duplex header, which the server counts among the bytes it received
# (NET_DUPLEX_LEN in tests/helpers/net_util.h).
DUPLEX_HEADER = 56
# The library keeps its own descriptors at 900 and up (src/os/ownfd.c); the figures
# split them from the program's. Among them, the wake-up bells (pipes, src/core/bell.h)
# are reused: their number follows the threads and epoll sets alive at once, never the
# connections made, so a thread-per-connection server may gain one when two connection
# threads first overlap. They are bounded instead of compared (as in
# tests/integration/test_net_leaks.py), and so are the peers' bells a process opened to
# wake them (src/transport/shm/wakepipe.c: 64 at most, one per peer process and bell).
# The spare segment (src/transport/shm/segment.h), an unnamed file in /dev/shm, is made at
# the client's next sleep after a connect used the last one: whether it exists at a pause
# depends on timing, so it is bounded too (one at most).
BELLS_MAX = 16
WAKE_PIPES_MAX = 64
SPARES_MAX = 1
GIB = 1 << 30
MIB = 1 << 20

FULL = dict(bytes=10 * GIB, cycles=100000, warmup=1000, kill_trials=1000, map_attempts=1000)
SHORT = dict(bytes=64 * MIB, cycles=2000, warmup=200, kill_trials=50, map_attempts=50)
PARTS = ("data", "cycles", "kill", "users")

# Helpers started and not yet stopped; whatever ends the tool stops them.
_live = set()


class SoakError(Exception):
    """A part cannot go on (a process died, a line never came); the message says why."""


def log(msg=""):
    print(msg, flush=True)


def parse_size(text):
    """'10G', '64M', '256K' or a plain number of bytes (binary units)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.I)
    if not m:
        raise argparse.ArgumentTypeError("%r is not a size such as 10G, 64M, 256K or 1000"
                                         % text)
    return int(m[1]) << {"": 0, "K": 10, "M": 20, "G": 30}[m[2].upper()]


def fmt_bytes(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return "%.2f %s" % (n / (1 << shift), unit)
    return "%d B" % n


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"),
                    help="build directory holding bin/ulsock and tests/helpers "
                         "(default %(default)s)")
    ap.add_argument("--only", default=",".join(PARTS),
                    help="comma-separated parts to run: %s (default all)" % ", ".join(PARTS))
    ap.add_argument("--short", action="store_true",
                    help="the CI-sized run: %s of data, %d cycles, %d kill trials, %d "
                         "attempts to map" % (fmt_bytes(SHORT["bytes"]), SHORT["cycles"],
                                              SHORT["kill_trials"], SHORT["map_attempts"]))
    ap.add_argument("--bytes", type=parse_size,
                    help="data: total bytes over all connections and both directions "
                         "(default 10G, 64M with --short)")
    ap.add_argument("--conns", type=int, default=64,
                    help="data: connections, all at once (default %(default)s)")
    ap.add_argument("--max-io", type=parse_size, default=256 << 10,
                    help="data: largest write or read (default 256K; at most 16M)")
    ap.add_argument("--cycles", type=int,
                    help="cycles: connections measured (default 100000, 2000 with --short)")
    ap.add_argument("--warmup", type=int,
                    help="cycles: connections before the first sample (default 1000, 200 "
                         "with --short)")
    ap.add_argument("--rss-tolerance-mib", type=float, default=8.0,
                    help="cycles: the RSS growth allowed each process (default %(default)s)")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="cycles: seconds to wait before each sample (default %(default)s)")
    ap.add_argument("--kill-trials", type=int,
                    help="kill: trials, each a connection whose one end is killed (default "
                         "1000, 50 with --short)")
    ap.add_argument("--notice-bound-ms", type=float, default=100.0,
                    help="kill: the longest time from the kill to the survivor's "
                         "observation (default %(default)s; not judged with --short)")
    ap.add_argument("--map-attempts", type=int,
                    help="users: attempts in all by the other user to open or map the "
                         "segment (default 1000, 50 with --short)")
    ap.add_argument("--user", default="nobody",
                    help="users: the other user (default %(default)s)")
    ap.add_argument("--profile", default="balanced", choices=("latency", "balanced", "efficient"),
                    help="the ulsock profile of both ends (default %(default)s)")
    ap.add_argument("--seed", type=int,
                    help="data and kill: the seed of the streams, I/O sizes and trials "
                         "(default: a random one, printed, so that a failing run can be "
                         "repeated)")
    ap.add_argument("--workdir", metavar="DIR",
                    help="keep the helpers' output and ulsock logs here (default: a "
                         "temporary directory, removed after a run that passed)")
    ap.add_argument("--json", metavar="FILE", help="write every figure and command here")
    args = ap.parse_args()

    args.parts = [p.strip() for p in args.only.split(",") if p.strip()]
    bad = [p for p in args.parts if p not in PARTS]
    if bad or not args.parts:
        ap.error("--only: unknown part %s; choose from %s" % (", ".join(bad) or "(none)",
                                                                ", ".join(PARTS)))
    sizes = SHORT if args.short else FULL
    for name in sizes:
        if getattr(args, name) is None:
            setattr(args, name, sizes[name])
    if args.conns < 1:
        ap.error("--conns must be at least 1")
    if args.bytes < 2 * args.conns:
        ap.error("--bytes must give each connection at least one byte each way")
    if not 1 <= args.max_io <= 16 * MIB:
        ap.error("--max-io must be 1 byte to 16M")
    if args.cycles < 1 or args.warmup < 1:
        ap.error("--cycles and --warmup must be at least 1")
    if args.kill_trials < 1 or args.map_attempts < len(INTRUDER_WAYS) + 1:
        ap.error("--kill-trials must be at least 1, --map-attempts at least %d (one for "
                 "each way)" % (len(INTRUDER_WAYS) + 1))
    if args.seed is None:
        args.seed = random.randrange(1, 1 << 31)
    args.build = os.path.abspath(args.build)
    return args


# ------------------------------------------------------------------------ processes

class Helper(procs.GroupProc):
    """A helper program under `ulsock run --profile P --`, in its own process group, with
    its output (stdout and stderr) in NAME.out and its ulsock log (level info) in
    NAME.ulsock.log of the work directory, with ULSOCK_SHORT_CALLS=0. PRELOAD false: the
    program alone. USER: run as this user (a passwd entry) through setpriv; its ulsock log
    then goes to stderr, into NAME.out, which this process opened (the work directory is
    not that user's). ENV: more variables."""

    def __init__(self, ctx, name, argv, stdin=False, preload=True, user=None, env=None):
        self.name = name
        self.out_path = os.path.join(ctx.workdir, name + ".out")
        self.log_path = os.path.join(ctx.workdir, name + ".ulsock.log")
        extra = dict(env or {})
        full = [str(a) for a in argv]
        if preload:
            extra["ULSOCK_LOG"] = "info"
            # Every part tests the shared-memory path: connections of one byte, as the
            # cycles part makes, would otherwise soon stay on kernel TCP (README,
            # ULSOCK_SHORT_CALLS).
            extra.setdefault("ULSOCK_SHORT_CALLS", "0")
            if user is None:
                extra["ULSOCK_LOG_FILE"] = self.log_path
            else:
                self.log_path = self.out_path
            full = [ctx.ulsock, "run", "--profile", ctx.profile, "--"] + full
        if user is not None:
            full = ["setpriv", "--reuid=%d" % user.pw_uid, "--regid=%d" % user.pw_gid,
                    "--clear-groups"] + full
        self.command = " ".join("%s=%s" % (k, shlex.quote(v)) for k, v in extra.items())
        self.command += " " + shlex.join(full)
        with open(self.out_path, "wb") as out:
            try:
                popen = procs.spawn(full, clean_env(extra), out,
                                    stdin=subprocess.PIPE if stdin else subprocess.DEVNULL)
            except OSError as e:
                raise SoakError("cannot start %s: %s" % (full[0], e))
        super().__init__(full, popen)
        _live.add(self)

    def output(self):
        try:
            with open(self.out_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def tail(self, lines=12):
        return "\n".join("    | " + ln for ln in self.output().splitlines()[-lines:])

    def wait_for(self, pattern, timeout):
        """The match of PATTERN (a regex, per line) in the output, once it is there.
        Raises SoakError when the process exits without it or TIMEOUT passes."""
        rx = re.compile(pattern, re.M)
        deadline = time.monotonic() + timeout
        while True:
            alive = self.alive
            m = rx.search(self.output())
            if m:
                return m
            if not alive:
                raise SoakError("%s exited with status %s before printing /%s/:\n%s"
                                % (self.name, self.popen.returncode, pattern, self.tail()))
            if time.monotonic() > deadline:
                raise SoakError("%s: no /%s/ within %.0f s:\n%s"
                                % (self.name, pattern, timeout, self.tail()))
            time.sleep(0.01)

    def resume(self):
        """Answers a pause of net_client (--pause-at): one line on its stdin."""
        self.popen.stdin.write(b"\n")
        self.popen.stdin.flush()

    def wait(self, timeout):
        """The exit status; raises SoakError, with the process group killed, when the
        process still runs after TIMEOUT seconds."""
        rc = self.reap(timeout)
        if rc is None:
            self.stop()
            raise SoakError("%s still ran after %.0f s (a hang?); killed:\n%s"
                            % (self.name, timeout, self.tail()))
        self.stop()
        return rc

    def stop(self):
        self.stop_group(signal.SIGTERM, grace=3.0, kill_wait=10.0)
        if self.popen.stdin:
            try:
                self.popen.stdin.close()
            except OSError:
                pass
        _live.discard(self)


@atexit.register
def _stop_leftovers():
    for h in list(_live):
        h.stop()


# -------------------------------------------------------------------- /proc and /dev/shm

def fd_counts(pid):
    """PID's descriptors: all of them, the program's, and the library's (900 and up) in
    four: its bells, the other processes' bells it opened, its spare segment, and the
    others (ulstest.procs.lib_fds)."""
    return {("fds_" + k if k != "fds" else k): v for k, v in procs.lib_fds(pid).items()}


def fd_kinds(pid):
    """What PID's descriptors are, counted by kind ("socket", "pipe", a
    path with its numbers as N), so that a descriptor gained can be told at a glance."""
    kinds = {}
    for name in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, name))
        except OSError:
            continue
        kind = re.sub(r"^(socket|pipe):\[\d+\]$", r"\1", target)
        kind = re.sub(r"\d+", "N", kind) if kind.startswith("/") else kind
        kind = ("library " if int(name) >= procs.LIB_FD_MIN else "program ") + kind
        kinds[kind] = kinds.get(kind, 0) + 1
    return dict(sorted(kinds.items()))


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def map_count(pid):
    with open("/proc/%d/maps" % pid) as f:
        return sum(1 for _ in f)


def shm_entries():
    """{name: inode} of every entry in /dev/shm."""
    out = {}
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return out
    for name in names:
        try:
            out[name] = os.lstat(os.path.join(SHM_DIR, name)).st_ino
        except OSError:
            pass
    return out


def shm_inodes_held(pid):
    """The inodes of the /dev/shm files PID has open or mapped. By inode, not by name: a
    segment that began as an unnamed spare keeps its first name, "/dev/shm/#INODE
    (deleted)", in the maps even once it is linked as ulsock.UID.INODE."""
    held = set()
    prefix = SHM_DIR + "/"
    try:
        for fd in os.listdir("/proc/%s/fd" % pid):
            try:
                if os.readlink("/proc/%s/fd/%s" % (pid, fd)).startswith(prefix):
                    held.add(os.stat("/proc/%s/fd/%s" % (pid, fd)).st_ino)
            except OSError:
                continue
        with open("/proc/%s/maps" % pid) as f:
            for line in f:
                fields = line.split(None, 5)
                if len(fields) == 6 and fields[5].startswith(prefix):
                    held.add(int(fields[4]))
    except OSError:
        pass
    return held


def shm_held_by_anyone():
    held = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            held |= shm_inodes_held(pid)
    return held


def shm_orphans(before, grace=3.0):
    """ulsock entries of /dev/shm that are new since BEFORE (a shm_entries() result) and
    that no live process holds, once GRACE seconds have not cleared them: segments left
    behind. Entries that some live process holds are its own business."""
    deadline = time.monotonic() + grace
    while True:
        now = shm_entries()
        new = {n: ino for n, ino in now.items()
               if n.startswith(SHM_PREFIX) and before.get(n) != ino}
        if new:
            held = shm_held_by_anyone()
            new = {n: ino for n, ino in new.items() if ino not in held}
        if not new or time.monotonic() > deadline:
            return sorted(new)
        time.sleep(0.1)


# Where a segment names its processes (docs/protocol.md, section 2): the creator's pid in
# the identity, and each side's pid in its line 1 (side[CLIENT] at 128, side[SERVER] at
# 320, pid 72 into each).
SEG_PID_OFFSETS = (76, 128 + 72, 320 + 72)


def segment_pids(name):
    """The pids a segment's header names (0 for none), or () when it cannot be read."""
    try:
        with open(os.path.join(SHM_DIR, name), "rb") as f:
            head = f.read(512)
    except OSError:
        return ()
    if len(head) < 512:
        return ()
    return tuple(int.from_bytes(head[o:o + 4], sys.byteorder) for o in SEG_PID_OFFSETS)


def shm_orphans_of(before, pids):
    """shm_orphans(BEFORE) limited to the segments whose header names one of PIDS: those
    of the processes a part started, not those another test on this machine may leave
    meanwhile."""
    return [n for n in shm_orphans(before) if set(segment_pids(n)) & set(pids)]


def path_counts(log_path):
    """What one process's ulsock log says of its connections: how many took each path,
    the reasons of those on the kernel, and how many left the fast path later."""
    counts = {"shm": 0, "kernel": 0, "fabric": 0, "left_fast_path": 0, "kernel_reasons": {}}
    try:
        f = open(log_path, errors="replace")
    except OSError:
        return counts
    with f:
        for line in f:
            line = line.strip()
            m = logs.PATH_LINE.match(line)
            if m:
                counts[m["path"]] += 1
                if m["path"] == "kernel":
                    r = counts["kernel_reasons"]
                    r[m["reason"]] = r.get(m["reason"], 0) + 1
            elif logs.LEFT_LINE.match(line):
                counts["left_fast_path"] += 1
    return counts


# ----------------------------------------------------------------------------- results

class Part:
    """The record of one part: its checks, figures, commands and, when it could not run
    to the end, the reason."""

    def __init__(self, name):
        self.name = name
        self.checks = []
        self.figures = {}
        self.commands = []
        self.error = None

    def check(self, what, ok, detail=""):
        self.checks.append({"what": what, "ok": bool(ok), "detail": detail})
        log("  %-4s %s%s" % ("ok" if ok else "FAIL", what, ": " + detail if detail else ""))
        return ok

    @property
    def passed(self):
        return self.error is None and bool(self.checks) and all(c["ok"] for c in self.checks)

    def to_json(self):
        return {"passed": self.passed, "error": self.error, "checks": self.checks,
                "figures": self.figures, "commands": self.commands}


def check_paths(part, conns, *helpers):
    """Every connection took path=shm at both ends and stayed there."""
    for h in helpers:
        c = path_counts(h.log_path)
        part.figures[h.name.split("-")[-1] + "_paths"] = c
        detail = "%d path=shm of %d, %d kernel, %d fabric, %d left the fast path" % (
            c["shm"], conns, c["kernel"], c["fabric"], c["left_fast_path"])
        if c["kernel_reasons"]:
            detail += " (kernel: %s)" % "; ".join("%s x%d" % kv for kv in
                                                  c["kernel_reasons"].items())
        part.check("%s: every connection on shared memory" % h.name,
                   c["shm"] == conns and c["kernel"] == c["fabric"] == 0
                   and c["left_fast_path"] == 0, detail)


def client_summary(text):
    """net_client's last line: OK|FAIL conns=N failed=F tx=B rx=B ... ms=T, as a dict."""
    lines = [ln for ln in text.splitlines() if re.match(r"(OK|FAIL) conns=", ln)]
    if not lines:
        return None
    res = {"verdict": lines[-1].split()[0]}
    for tok in lines[-1].split()[1:]:
        k, _, v = tok.partition("=")
        res[k] = float(v) if k == "ms" else int(v)
    return res


def client_errors(text, n=5):
    return [ln for ln in text.splitlines() if ln.startswith("ERR ")][:n]


# -------------------------------------------------------------------------------- data

def run_data(ctx, args, part):
    per_conn = args.bytes // (2 * args.conns)
    expect = args.conns * per_conn
    # The helpers' alarm: generous, so that only a hang ends a run on a busy machine.
    limit = int(120 + 2 * expect / (8 * MIB))
    part.figures.update(conns=args.conns, bytes_per_conn_each_way=per_conn,
                        bytes_planned=2 * expect, min_io=1, max_io=args.max_io,
                        seed=args.seed, io="mix", mode="duplex", timeout_s=limit)
    log("== data: %d connections at once, duplex, %s each way per connection (%s in all), "
        "writes and reads of 1 B to %s, blocking and non-blocking mixed, seed %d"
        % (args.conns, fmt_bytes(per_conn), fmt_bytes(2 * expect), fmt_bytes(args.max_io),
           args.seed))
    shm_before = shm_entries()
    server = Helper(ctx, "data-server", [
        ctx.net_server, "--addr", ADDR, "--port", "0", "--mode", "duplex", "--io", "mix",
        "--max-io", args.max_io, "--max-conns", args.conns, "--timeout", limit])
    part.commands.append(server.command)
    port = int(server.wait_for(r"^READY port=(\d+)", 60)[1])
    client = Helper(ctx, "data-client", [
        ctx.net_client, "--addr", ADDR, "--port", port, "--mode", "duplex", "--io", "mix",
        "--conns", args.conns, "--concurrency", args.conns, "--bytes", per_conn,
        "--min-io", 1, "--max-io", args.max_io, "--seed", args.seed, "--timeout", limit])
    part.commands.append(client.command)
    log("  server pid %d on port %d, client pid %d: running (at most %d s)"
        % (server.pid, port, client.pid, limit))
    t0 = time.monotonic()
    client_rc = client.wait(limit + 30)
    wall = time.monotonic() - t0

    out = client.output()
    s = client_summary(out)
    errs = client_errors(out)
    part.figures.update(client_exit=client_rc, wall_s=round(wall, 3))
    if s is None:
        raise SoakError("net_client printed no summary line (exit %s):\n%s"
                        % (client_rc, client.tail()))
    part.figures["client"] = s
    part.check("client: every connection verified, none failed",
               client_rc == 0 and s["verdict"] == "OK" and s["failed"] == 0,
               "exit %s, %s conns=%d failed=%d%s" % (client_rc, s["verdict"], s["conns"],
                                                      s["failed"],
                                                      "; " + " | ".join(errs) if errs else ""))
    part.check("client: sent every byte and verified every byte it received",
               s["tx"] == expect and s["rx"] == expect,
               "tx=%d rx=%d, expected %d each" % (s["tx"], s["rx"], expect))

    server_rc = server.wait(60)
    part.figures["server_exit"] = server_rc
    rows = server_conns(server.output())
    bad = [r for r in rows if r["result"] != "ok" or r["rx"] != per_conn + DUPLEX_HEADER
           or r["tx"] != per_conn]
    server_rx = sum(r["rx"] - DUPLEX_HEADER for r in rows)
    part.figures.update(server_conns=len(rows), server_rx_verified=server_rx,
                        server_tx=sum(r["tx"] for r in rows))
    part.check("server: every connection verified what it received and sent its stream",
               server_rc == 0 and len(rows) == args.conns and not bad,
               "exit %s, %d of %d connections ok, %d bytes verified%s"
               % (server_rc, len(rows) - len(bad), args.conns, server_rx,
                  "; first bad: %s" % bad[0]["line"] if bad else ""))
    check_paths(part, args.conns, client, server)
    left = shm_orphans_of(shm_before, [client.pid, server.pid])
    part.figures["shm_left_behind"] = left
    part.check("/dev/shm: no segment outlived the processes", not left,
               ", ".join(left[:5]) if left else "")

    moved = s["tx"] + s["rx"]
    secs = s["ms"] / 1000.0
    part.figures.update(bytes_moved=moved, client_ms=s["ms"],
                        throughput_bytes_per_s=round(moved / secs) if secs > 0 else None)
    if secs > 0:
        log("  moved %s in %.2f s (the client's clock; %.2f s wall): %.2f GiB/s, "
            "%.2f GiB/s each way" % (fmt_bytes(moved), secs, wall, moved / secs / GIB,
                                     moved / secs / GIB / 2))


def server_conns(text):
    """net_server's CONN lines: idx, rx, tx and result of each finished connection."""
    rows = []
    for line in text.splitlines():
        m = re.match(r"CONN idx=(\d+) .*rx=(\d+) tx=(\d+) result=(.*)$", line)
        if m:
            rows.append({"idx": int(m[1]), "rx": int(m[2]), "tx": int(m[3]),
                         "result": m[4], "line": line})
    return rows


# ------------------------------------------------------------------------------ cycles

def settled_fds(pids, settle):
    """Waits SETTLE seconds, then until no descriptor count of PIDS has changed for half
    a second (at most 10 s more): the server may still be closing the last connection
    when the client pauses."""
    time.sleep(settle)
    deadline = time.monotonic() + 10.0
    last = [fd_counts(p)["fds"] for p in pids]
    since = time.monotonic()
    while time.monotonic() - since < 0.5 and time.monotonic() < deadline:
        time.sleep(0.05)
        now = [fd_counts(p)["fds"] for p in pids]
        if now != last:
            last, since = now, time.monotonic()


def sample(procs_by_role, settle):
    """Descriptors, RSS and mappings of each process, and /dev/shm, at a quiet moment."""
    held = set()
    snap = {}
    try:
        settled_fds([p.pid for p in procs_by_role.values()], settle)
        entries = shm_entries()
        for role, p in procs_by_role.items():
            snap[role] = dict(fd_counts(p.pid), rss_kib=rss_kib(p.pid), maps=map_count(p.pid),
                              fd_kinds=fd_kinds(p.pid))
            held |= shm_inodes_held(p.pid)
    except OSError as e:
        dead = [p for p in procs_by_role.values() if not p.alive]
        raise SoakError("cannot sample %s: %s%s" % (
            ", ".join(procs_by_role), e,
            "".join("\n%s exited with status %s:\n%s" % (p.name, p.popen.returncode, p.tail())
                    for p in dead)))
    snap["shm_entries"] = len(entries)
    snap["shm_ulsock_entries"] = sum(1 for n in entries if n.startswith(SHM_PREFIX))
    snap["shm_held_by_soak"] = sum(1 for ino in entries.values() if ino in held)
    return snap, entries


def run_cycles(ctx, args, part):
    total = args.warmup + args.cycles + 1
    # One more connection after the second sample lets the server (--max-conns) end on
    # its own, so that it is still alive while it is sampled.
    limit = int(300 + total / 50)
    tol_kib = int(args.rss_tolerance_mib * 1024)
    part.figures.update(cycles=args.cycles, warmup=args.warmup, connections=total,
                        bytes_per_conn=1, io="mix", mode="echo", timeout_s=limit,
                        rss_tolerance_kib=tol_kib)
    log("== cycles: %d connect / 1-byte echo / close cycles, one at a time, one client "
        "process; samples after %d warm-up connections and after the cycles"
        % (args.cycles, args.warmup))
    shm_before = shm_entries()
    server = Helper(ctx, "cycles-server", [
        ctx.net_server, "--addr", ADDR, "--port", "0", "--mode", "echo",
        "--max-conns", total, "--quiet", "--timeout", limit])
    part.commands.append(server.command)
    m = server.wait_for(r"^READY port=(\d+) pid=(\d+)", 60)
    port = int(m[1])
    client = Helper(ctx, "cycles-client", [
        ctx.net_client, "--addr", ADDR, "--port", port, "--mode", "echo", "--io", "mix",
        "--bytes", 1, "--min-io", 1, "--max-io", 1, "--conns", total,
        "--pause-at", args.warmup, "--pause-at", args.warmup + args.cycles,
        "--timeout", limit], stdin=True)
    part.commands.append(client.command)
    roles = {"server": server, "client": client}
    log("  server pid %d on port %d, client pid %d: running (at most %d s)"
        % (server.pid, port, client.pid, limit))

    client.wait_for(r"^PAUSE done=%d$" % args.warmup, limit)
    before, entries_before = sample(roles, args.settle)
    client.resume()
    t0 = time.monotonic()
    client.wait_for(r"^PAUSE done=%d$" % (args.warmup + args.cycles), limit)
    elapsed = time.monotonic() - t0
    after, _ = sample(roles, args.settle)
    orphans = shm_orphans_of(entries_before, [client.pid, server.pid])
    client.resume()
    client_rc = client.wait(60)
    server_rc = server.wait(60)
    rate = args.cycles / elapsed if elapsed > 0 else None
    part.figures.update(before=before, after=after, cycles_s=round(elapsed, 3),
                        conns_per_s=round(rate, 1) if rate else None,
                        client_exit=client_rc, server_exit=server_rc)

    out = client.output()
    s = client_summary(out)
    if s is None:
        raise SoakError("net_client printed no summary line (exit %s):\n%s"
                        % (client_rc, client.tail()))
    part.figures["client"] = s
    errs = client_errors(out)
    part.check("client: every connection echoed its byte and closed cleanly",
               client_rc == 0 and s["verdict"] == "OK" and s["failed"] == 0
               and s["tx"] == s["rx"] == total,
               "exit %s, %s conns=%d failed=%d tx=%d rx=%d%s"
               % (client_rc, s["verdict"], s["conns"], s["failed"], s["tx"], s["rx"],
                  "; " + " | ".join(errs) if errs else ""))
    part.check("server: every connection went well", server_rc == 0,
               "exit %s%s" % (server_rc, "" if server_rc == 0 else ":\n" + server.tail()))
    for role in ("server", "client"):
        b, a = before[role], after[role]
        part.check("%s: no descriptor gained (bells %d at most, peers' bells %d, spares %d)"
                   % (role, BELLS_MAX, WAKE_PIPES_MAX, SPARES_MAX),
                   a["fds_program"] <= b["fds_program"] and a["fds_library"] <= b["fds_library"]
                   and a["fds_bells"] <= BELLS_MAX and a["fds_wake_pipes"] <= WAKE_PIPES_MAX
                   and a["fds_spare"] <= SPARES_MAX,
                   "%d -> %d in all: program %d -> %d, library %d -> %d, bells %d -> %d, "
                   "peers' bells %d -> %d, spare segment %d -> %d"
                   % (b["fds"], a["fds"], b["fds_program"], a["fds_program"],
                      b["fds_library"], a["fds_library"], b["fds_bells"], a["fds_bells"],
                      b["fds_wake_pipes"], a["fds_wake_pipes"], b["fds_spare"], a["fds_spare"]))
        part.check("%s: RSS grew by %d KiB at most" % (role, tol_kib),
                   a["rss_kib"] - b["rss_kib"] <= tol_kib,
                   "%d -> %d KiB (%+d); mappings %d -> %d"
                   % (b["rss_kib"], a["rss_kib"], a["rss_kib"] - b["rss_kib"],
                      b["maps"], a["maps"]))
    part.check("/dev/shm: the soak's processes hold no more entries than before",
               after["shm_held_by_soak"] <= before["shm_held_by_soak"],
               "held %d -> %d; all entries %d -> %d, ulsock.* %d -> %d"
               % (before["shm_held_by_soak"], after["shm_held_by_soak"],
                  before["shm_entries"], after["shm_entries"],
                  before["shm_ulsock_entries"], after["shm_ulsock_entries"]))
    part.figures["shm_orphans_after_cycles"] = orphans
    part.check("/dev/shm: no new ulsock entry that no process holds", not orphans,
               ", ".join(orphans[:5]))
    check_paths(part, total, client, server)
    left = shm_orphans_of(shm_before, [client.pid, server.pid])
    part.figures["shm_left_behind"] = left
    part.check("/dev/shm: no segment outlived the processes", not left, ", ".join(left[:5]))
    if rate:
        log("  %d cycles in %.2f s: %.0f connections/s" % (args.cycles, elapsed, rate))


# -------------------------------------------------------------------------------- kill

# Each phase: the victim's act, the survivor's act (tests/helpers/net_peer.c), the line by
# which the survivor says that it waits (the random delay before the kill starts there;
# None: once both ends are connected) and the longest random delay, in ms. The delays
# straddle the 20 ms after which a call blocked on its futex sleeps on TCP instead
# (docs/protocol.md, section 5).
KILL_PHASES = {
    "idle": ("stall", "recv", "BLOCKING", 60),
    "full": ("stall", "send", "FULL", 60),
    "stream-in": ("flood", "recv", None, 150),
    "stream-out": ("recv", "send", None, 150),
    "duplex": ("duplex", "duplex", None, 150),
}
KILL_WAITS = ("block", "poll", "epoll")
# net_peer's write and read sizes (--min-io, --max-io): tiny; log-uniform from 1 byte to
# the ring's size (1 MiB, the default); ring-sized.
KILL_IO = {"small": (1, 64), "mixed": (1, MIB), "ring": (256 << 10, MIB)}
# How a survivor's reading and its sending may end when the peer dies.
RX_ENDS = ("eof", "ECONNRESET")
TX_ENDS = ("EPIPE", "ECONNRESET")
# A survivor still running this long after the kill hangs.
KILL_HANG_S = 10


def kill_plans(args):
    """The trials, drawn from --seed: each block of 30 covers every phase, victim and way
    the survivor waits once, in a random order; the rest is drawn for each trial."""
    rng = random.Random(args.seed)
    combos = [(p, v, w) for p in KILL_PHASES for v in ("client", "server") for w in KILL_WAITS]
    plans = []
    for i in range(args.kill_trials):
        if i % len(combos) == 0:
            rng.shuffle(combos)
        phase, victim, wait = combos[i % len(combos)]
        prime = int(2 ** rng.uniform(0, 20)) if phase == "idle" and rng.random() < 0.75 else 0
        plans.append(dict(trial=i + 1, phase=phase, victim=victim, survivor_wait=wait,
                          victim_wait=rng.choice(KILL_WAITS), io=rng.choice(sorted(KILL_IO)),
                          prime=prime, seed=rng.randrange(1, 1 << 31),
                          delay_ms=round(rng.uniform(0, KILL_PHASES[phase][3]), 1)))
    return plans


def result_line(text):
    """net_peer's last RESULT line, as (the line, its key=value pairs)."""
    lines = [ln for ln in text.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        return None, {}
    return lines[-1], dict(t.split("=", 1) for t in lines[-1].split()[1:] if "=" in t)


def last_total(text):
    """The last byte count a victim reported sent ("SENT total=N", "STALLED total=N"):
    its send calls had returned that many bytes before it died."""
    found = re.findall(r"^(?:SENT|STALLED) total=(\d+)$", text, re.M)
    return int(found[-1]) if found else 0


def kill_trial(ctx, part, plan, limit, rec):
    """One trial of PLAN; fills REC with what it saw (and PART's commands). Raises
    SoakError when the survivor did not pass, or a helper did not get as far as the
    kill."""
    v_act, s_act, marker, _ = KILL_PHASES[plan["phase"]]
    lo, hi = KILL_IO[plan["io"]]
    surv_role = "server" if plan["victim"] == "client" else "client"
    spec = {plan["victim"]: (v_act, plan["victim_wait"]),
            surv_role: (s_act, plan["survivor_wait"])}
    helpers = {}

    def start(role, port):
        act, wait = spec[role]
        helpers[role] = Helper(ctx, "kill-%04d-%s" % (plan["trial"], role), [
            ctx.net_peer, "--listen" if role == "server" else "--connect", "--addr", ADDR,
            "--port", port, "--act", act, "--wait", wait, "--min-io", lo, "--max-io", hi,
            "--prime", plan["prime"], "--seed", plan["seed"], "--timeout", limit])
        rec["commands"].append(helpers[role].command)
        rec["pids"].append(helpers[role].pid)
        part.commands.append(helpers[role].command)
        return helpers[role]

    try:
        server = start("server", 0)
        client = start("client", int(server.wait_for(r"^READY port=(\d+)", 30)[1]))
        victim, survivor = helpers[plan["victim"]], helpers[surv_role]
        ino = int(client.wait_for(r"^CONNECTED ino=(\d+)$", 30)[1])
        server.wait_for(r"^CONNECTED ", 30)
        if v_act == "stall":
            victim.wait_for(r"^STALLED ", 30)
        if marker:
            survivor.wait_for(r"^%s$" % marker, 30)
        time.sleep(plan["delay_ms"] / 1000.0)
        if not victim.alive:
            raise SoakError("the victim (%s) exited with status %s before the kill:\n%s"
                            % (plan["victim"], victim.popen.returncode, victim.tail()))
        t_kill = time.monotonic() * 1000.0
        try:
            os.kill(victim.pid, signal.SIGKILL)
        except ProcessLookupError:
            raise SoakError("the victim (%s) exited just before the kill:\n%s"
                            % (plan["victim"], victim.tail()))
        rc = survivor.reap(KILL_HANG_S)
        if rc is None:
            stacks = survivor.stacks()
            raise SoakError("the survivor still ran %d s after the kill (a hang):\n%s%s"
                            % (KILL_HANG_S, survivor.tail(), "\n" + stacks if stacks else ""))
        victim.reap(10)
    finally:
        for h in helpers.values():
            h.stop()

    line, res = result_line(survivor.output())
    if line is None:
        raise SoakError("the survivor exited with status %s without a RESULT line:\n%s"
                        % (rc, survivor.tail()))
    outcome = res.get("outcome", "?")
    rx = int(res.get("rx", res.get("bytes", 0)))
    rx_end = res.get("rx_end", outcome) if s_act != "send" else None
    tx_end = res.get("tx_end", outcome) if s_act != "recv" else None
    if s_act == "duplex":
        kind = "duplex: read %s, send %s, %s first" % (rx_end, tx_end, res.get("first"))
    else:
        kind = "%s: %s" % (s_act, outcome)
    sent = last_total(victim.output())
    notice = float(res.get("t_ms", "nan")) - t_kill
    rec.update(kind=kind, notice_ms=round(notice, 3), rx=rx if rx_end else None,
               victim_sent=sent, segment_ino=ino)
    problems = []
    if rc != 0 or (rx_end and rx_end not in RX_ENDS) or (tx_end and tx_end not in TX_ENDS):
        problems.append("the survivor exited with status %s: %s" % (rc, line))
    if victim.popen.returncode != -signal.SIGKILL:
        problems.append("the victim's status is %s, not SIGKILL" % victim.popen.returncode)
    if not notice >= 0:
        problems.append("the survivor's connection ended %.1f ms before the kill" % -notice)
    if rx_end == "eof" and rx < sent:
        problems.append("EOF after %d bytes, but the victim's sends had returned %d: bytes "
                        "lost" % (rx, sent))
    for role, h in helpers.items():
        c = path_counts(h.log_path)
        want = c["shm"] == 1 if h is survivor else c["shm"] <= 1
        if not want or c["kernel"] or c["fabric"] or c["left_fast_path"]:
            problems.append("the %s's log: %d path=shm, %d kernel %s, %d fabric, %d left the "
                            "fast path" % (role, c["shm"], c["kernel"], c["kernel_reasons"],
                                           c["fabric"], c["left_fast_path"]))
    seg = os.path.join(SHM_DIR, "%s%d.%d" % (SHM_PREFIX, os.getuid(), ino))
    deadline = time.monotonic() + 1.0
    while os.path.exists(seg) and time.monotonic() < deadline:
        time.sleep(0.02)
    if os.path.exists(seg):
        problems.append("%s outlived both processes" % seg)
    if problems:
        raise SoakError("; ".join(problems) + "\n  survivor (%s):\n%s\n  victim (%s):\n%s"
                        % (surv_role, survivor.tail(), plan["victim"], victim.tail()))
    for h in helpers.values():
        for path in {h.out_path, h.log_path}:
            try:
                os.unlink(path)
            except OSError:
                pass


def percentile(sorted_values, q):
    """The nearest-rank Q-th percentile of SORTED_VALUES."""
    return sorted_values[max(0, math.ceil(q / 100.0 * len(sorted_values)) - 1)]


def run_kill(ctx, args, part):
    plans = kill_plans(args)
    judge = not args.short
    limit = 60
    part.figures.update(trials_planned=len(plans), seed=args.seed, hang_s=KILL_HANG_S,
                        notice_bound_ms=args.notice_bound_ms, notice_judged=judge)
    log("== kill: %d trials, a connection each whose one end gets SIGKILL at a random "
        "moment: %d phases x victim client or server x the survivor waiting in blocking "
        "calls, poll or epoll; seed %d" % (len(plans), len(KILL_PHASES), args.seed))
    shm_before = shm_entries()
    records, failed, pids = [], None, []
    t0 = time.monotonic()
    for plan in plans:
        rec = dict(plan, commands=[], pids=[])
        try:
            kill_trial(ctx, part, plan, limit, rec)
        except SoakError as e:
            failed = (rec, str(e))
            break
        finally:
            pids += rec.pop("pids")
        del rec["commands"]
        records.append(rec)
        if len(records) % 100 == 0:
            log("  %d trials passed (%.0f s)" % (len(records), time.monotonic() - t0))
    wall = time.monotonic() - t0
    part.figures.update(trials=len(records), wall_s=round(wall, 1), trial_records=records)

    kinds = collections.Counter(r["kind"] for r in records)
    part.figures["outcomes"] = dict(sorted(kinds.items()))
    if failed:
        rec, why = failed
        part.figures["failed_trial"] = dict(rec, error=why)
        marker = KILL_PHASES[rec["phase"]][2]
        detail = ("trial %d (phase %s, victim the %s waiting by %s, survivor waiting by %s, "
                  "I/O %s, prime %d, kill %.1f ms after %s): %s\n  reproduce: %s\n  then "
                  "SIGKILL the %s"
                  % (rec["trial"], rec["phase"], rec["victim"], rec["victim_wait"],
                     rec["survivor_wait"], rec["io"], rec["prime"], rec["delay_ms"],
                     "the survivor's %s line" % marker if marker else "both CONNECTED lines",
                     why, "\n             ".join(rec["commands"]), rec["victim"]))
    else:
        detail = "%d trials: %s" % (len(records), ", ".join("%s %d" % kv for kv in
                                                            sorted(kinds.items())))
    part.check("every survivor saw EOF, ECONNRESET or EPIPE, no hang, no wrong or lost byte, "
               "path=shm, its segment removed", not failed and len(records) == len(plans),
               detail)

    notices = sorted(r["notice_ms"] for r in records)
    if notices:
        worst = max(records, key=lambda r: r["notice_ms"])
        stats = dict(median=round(statistics.median(notices), 3),
                     p99=round(percentile(notices, 99), 3), max=notices[-1],
                     over_bound=sum(1 for n in notices if n > args.notice_bound_ms))
        by_phase = {}
        for r in records:
            by_phase.setdefault(r["phase"], []).append(r["notice_ms"])
        stats["max_by_phase"] = {p: max(v) for p, v in sorted(by_phase.items())}
        part.figures["notice_ms"] = stats
        text = ("median %.2f ms, p99 %.2f ms, max %.2f ms (trial %d: %s, victim %s); %d over "
                "%.0f ms" % (stats["median"], stats["p99"], stats["max"], worst["trial"],
                             worst["phase"], worst["victim"], stats["over_bound"],
                             args.notice_bound_ms))
        if judge:
            part.check("every survivor noticed within %.0f ms of the kill"
                       % args.notice_bound_ms, stats["over_bound"] == 0, text)
        else:
            log("  time from the kill to the survivor's observation (not judged with "
                "--short): " + text)
    left = shm_orphans_of(shm_before, pids)
    part.figures["shm_left_behind"] = left
    part.check("/dev/shm: no segment outlived the trials (each survivor's close removes it)",
               not left, ", ".join(left[:5]))
    log("  %d trials in %.1f s" % (len(records), wall))


# ------------------------------------------------------------------------------- users

# The ways tests/helpers/shm_intruder.c tries, in its order; the tool adds attach-accept:
# a ulsock server of the other user, trusting A, accepting connections from A's client.
INTRUDER_WAYS = ("open", "shm_open", "open-guessed", "open-alias", "o_path", "handle",
                 "hardlink", "chmod", "acl", "proc-fd", "pidfd_getfd", "map_files",
                 "proc-root", "proc-mem", "process_vm_readv", "attach-forged", "ptrace")
# The ways that must work as user A (root) before their failures as the other user count:
# those that only need the file's permissions. The others need what root may lack in a
# container (ptrace access, CAP_SYS_ADMIN, CAP_DAC_READ_SEARCH, ACLs on /dev/shm): where
# they do not work as A, they are reported as not proven here.
CONTROL_REQUIRED = ("open", "shm_open", "open-guessed", "open-alias", "o_path", "hardlink",
                    "chmod", "attach-forged")


def tcp_local_port(ino):
    """The local port of the IPv4 TCP socket with inode INO (/proc/net/tcp), or None."""
    with open("/proc/net/tcp") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 9 and fields[9] == str(ino):
                return int(fields[1].split(":")[1], 16)
    return None


def intruder_targets(pids):
    """shm_intruder's --target arguments: each pid with its descriptor numbers and the
    ranges where it maps /dev/shm files, which root sees and the other user does not."""
    out = []
    for pid in pids:
        fds = sorted(int(n) for n in os.listdir("/proc/%d/fd" % pid))
        with open("/proc/%d/maps" % pid) as f:
            fields = [ln.split(None, 5) for ln in f]
        maps = [fl[0] for fl in fields if len(fl) == 6 and fl[5].startswith(SHM_DIR + "/")]
        out += ["--target", "%d:%s:%s" % (pid, ",".join(map(str, fds)), ",".join(maps))]
    return out


def intruder_report(text):
    """shm_intruder's WAY lines: {way: {attempts, successes, errors: {ERRNO: n}}}."""
    ways = {}
    for m in re.finditer(r"^WAY (\S+) attempts=(\d+) successes=(\d+) errors=(\S*)$", text,
                         re.M):
        errors = dict(e.rsplit(":", 1) for e in m[4].split(",") if e)
        ways[m[1]] = {"attempts": int(m[2]), "successes": int(m[3]),
                      "errors": {k: int(v) for k, v in errors.items()}}
    return ways


def fmt_errors(errors):
    return ", ".join("%s %d" % kv for kv in sorted(errors.items(), key=lambda kv: -kv[1]))


def other_user(args):
    """The passwd entry of --user, once it is known that this process can run programs as
    that user and that user can run the build's; raises SoakError if not."""
    if os.geteuid() != 0:
        raise SoakError("running as another user needs root (this is uid %d): run the part "
                        "as root, or leave it out (--only)" % os.geteuid())
    if not shutil.which("setpriv"):
        raise SoakError("setpriv (util-linux) is not installed")
    try:
        pw = pwd.getpwnam(args.user)
    except KeyError:
        raise SoakError("no user %r (--user)" % args.user)
    if pw.pw_uid == os.getuid():
        raise SoakError("--user %s is this user" % args.user)
    return pw


def run_users(ctx, args, part):
    pw = other_user(args)
    lib = os.path.join(args.build, "lib", "libulsock.so")
    for path in (ctx.ulsock, lib, ctx.net_server, ctx.shm_intruder):
        res = subprocess.run(["setpriv", "--reuid=%d" % pw.pw_uid, "--regid=%d" % pw.pw_gid,
                              "--clear-groups", "test", "-r", path], timeout=10)
        if res.returncode != 0:
            raise SoakError("user %s cannot read %s (a build directory under a private "
                            "one?)" % (args.user, path))
    accept_n = max(1, args.map_attempts // (len(INTRUDER_WAYS) + 1))
    limit = 120
    part.figures.update(user_a=os.getuid(), user_b=pw.pw_uid, user_b_name=args.user,
                        attempts_planned=args.map_attempts)
    log("== users: a connection of uid %d on shared memory; %s (uid %d) tries %d times to "
        "open or map its segment, %d ways"
        % (os.getuid(), args.user, pw.pw_uid, args.map_attempts, len(INTRUDER_WAYS) + 1))
    shm_before = shm_entries()

    # User A's connection: the client primes 64 KiB into the ring and goes quiet.
    a_server = Helper(ctx, "users-a-server", [
        ctx.net_peer, "--listen", "--addr", ADDR, "--port", 0, "--act", "recv", "--prime",
        65536, "--timeout", limit])
    part.commands.append(a_server.command)
    port = int(a_server.wait_for(r"^READY port=(\d+)", 30)[1])
    a_client = Helper(ctx, "users-a-client", [
        ctx.net_peer, "--connect", "--addr", ADDR, "--port", port, "--act", "stall",
        "--prime", 65536, "--timeout", limit])
    part.commands.append(a_client.command)
    ino = int(a_client.wait_for(r"^CONNECTED ino=(\d+)$", 30)[1])
    a_client.wait_for(r"^STALLED ", 30)
    a_server.wait_for(r"^BLOCKING$", 30)
    seg = os.path.join(SHM_DIR, "%s%d.%d" % (SHM_PREFIX, os.getuid(), ino))
    try:
        st = os.stat(seg)
    except OSError as e:
        raise SoakError("user A's connection has no segment %s: %s" % (seg, e))
    c = path_counts(a_server.log_path)
    part.figures.update(segment=seg, segment_mode="%04o" % (st.st_mode & 0o7777),
                        segment_uid=st.st_uid, a_server_paths=c)
    part.check("user A's connection on shared memory", c["shm"] == 1 and c["kernel"] == 0,
               "%s, mode %04o, uid %d; the server logged %d path=shm, %d kernel"
               % (seg, st.st_mode & 0o7777, st.st_uid, c["shm"], c["kernel"]))
    cport = tcp_local_port(ino)
    if cport is None:
        raise SoakError("no TCP socket with inode %d in /proc/net/tcp" % ino)
    common = ["--segment", seg, "--conn", "%s:%d" % (ADDR, cport), "%s:%d" % (ADDR, port)]
    common += intruder_targets([a_server.pid, a_client.pid])

    # Every way once as A, where it must work; then the other user's attempts.
    control = Helper(ctx, "users-control", [ctx.shm_intruder, "--control"] + common,
                     preload=False)
    part.commands.append(control.command)
    control.wait(60)
    ways_a = intruder_report(control.output())
    intruder = Helper(ctx, "users-intruder", [
        ctx.shm_intruder, "--attempts", args.map_attempts - accept_n] + common,
        preload=False, user=pw, env={"ULSOCK_TRUST_UIDS": str(os.getuid())})
    part.commands.append(intruder.command)
    intruder_rc = intruder.wait(limit)
    ways_b = intruder_report(intruder.output())
    guesses = re.search(r"^GUESSES (\d+)$", intruder.output(), re.M)
    part.figures["guessed_names"] = int(guesses[1]) if guesses else None

    # attach-accept: the other user's ulsock server, trusting A, gets ACCEPT_N connections
    # from a ulsock client of A; its accept() tries to open each one's segment.
    b_server = Helper(ctx, "users-b-server", [
        ctx.net_server, "--addr", ADDR, "--port", 0, "--mode", "echo", "--max-conns",
        accept_n, "--quiet", "--timeout", limit], user=pw,
        env={"ULSOCK_TRUST_UIDS": str(os.getuid())})
    part.commands.append(b_server.command)
    b_port = int(b_server.wait_for(r"^READY port=(\d+)", 30)[1])
    a_client2 = Helper(ctx, "users-a-client2", [
        ctx.net_client, "--addr", ADDR, "--port", b_port, "--mode", "echo", "--bytes", 1,
        "--min-io", 1, "--max-io", 1, "--conns", accept_n, "--concurrency", 1,
        "--timeout", limit])
    part.commands.append(a_client2.command)
    a_client2_rc = a_client2.wait(limit + 30)
    b_server_rc = b_server.wait(60)
    bp = path_counts(b_server.log_path)
    ways_b["attach-accept"] = {"attempts": bp["shm"] + bp["kernel"] + bp["fabric"],
                               "successes": bp["shm"] + bp["fabric"],
                               "errors": bp["kernel_reasons"]}
    a2p = path_counts(a_client2.log_path)
    part.figures.update(control=ways_a, ways=ways_b, attach_accept_client_paths=a2p,
                        intruder_exit=intruder_rc)
    part.check("%s's server: each connection of A's client stayed on kernel TCP and echoed"
               % args.user, a_client2_rc == 0 and b_server_rc == 0
               and a2p["kernel"] == bp["kernel"] == accept_n,
               "client exit %s, server exit %s; path=kernel: client %d, server %d of %d (%s)"
               % (a_client2_rc, b_server_rc, a2p["kernel"], bp["kernel"], accept_n,
                  fmt_errors(bp["kernel_reasons"])))

    # The end of A's connection: the client killed, the server sees EOF and closes.
    os.kill(a_client.pid, signal.SIGKILL)
    a_server_rc = a_server.wait(30)
    a_client.stop()
    line, res = result_line(a_server.output())
    part.check("user A's connection ended cleanly after all (EOF at the server)",
               a_server_rc == 0 and res.get("outcome") == "eof",
               "exit %s: %s" % (a_server_rc, line))

    proven = [w for w in INTRUDER_WAYS if ways_a.get(w, {}).get("successes", 0) > 0]
    unproven = [w for w in INTRUDER_WAYS if w not in proven]
    part.check("as user A every way works (where it needs no capability root may lack)",
               all(w in proven for w in CONTROL_REQUIRED),
               "%d of %d work%s" % (len(proven), len(INTRUDER_WAYS), "; not here: " + ", ".join(
                   "%s (%s)" % (w, fmt_errors(ways_a.get(w, {}).get("errors", {})) or "not run")
                   for w in unproven) if unproven else ""))
    total = sum(w["attempts"] for w in ways_b.values())
    wins = {n: w["successes"] for n, w in ways_b.items() if w["successes"]}
    part.figures.update(attempts=total, successes=sum(wins.values()))
    for name in INTRUDER_WAYS + ("attach-accept",):
        w = ways_b.get(name, {"attempts": 0, "successes": 0, "errors": {}})
        log("    %-17s %4d attempts, %d succeeded: %s%s"
            % (name, w["attempts"], w["successes"], fmt_errors(w["errors"]),
               " (over %s names)" % part.figures["guessed_names"]
               if name == "open-guessed" else ""))
    part.check("as %s no way opened or mapped the segment" % args.user,
               not wins and intruder_rc == 0,
               "%d attempts, %s" % (total, "successes: %s" % wins if wins
                                    else "none succeeded"))
    part.check("%d attempts in all, every way tried" % args.map_attempts,
               total == args.map_attempts and all(ways_b.get(w, {}).get("attempts")
                                                  for w in INTRUDER_WAYS + ("attach-accept",)),
               "%d made" % total)
    left = shm_orphans_of(shm_before, [a_server.pid, a_client.pid, a_client2.pid,
                                       b_server.pid])
    strays = [n for n in os.listdir(SHM_DIR) if n.startswith("ulsock-intruder.")]
    part.figures["shm_left_behind"] = left + strays
    part.check("/dev/shm: no segment left, nothing of %s's" % args.user,
               not left and not strays, ", ".join((left + strays)[:5]))


# -------------------------------------------------------------------------------- main

class Context:
    """Where the programs are and where their files go."""

    def __init__(self, args):
        self.build = args.build
        self.profile = args.profile
        self.ulsock = os.path.join(args.build, "bin", "ulsock")
        helpers = os.path.join(args.build, "tests", "helpers")
        self.net_server = os.path.join(helpers, "net_server")
        self.net_client = os.path.join(helpers, "net_client")
        self.net_peer = os.path.join(helpers, "net_peer")
        self.shm_intruder = os.path.join(helpers, "shm_intruder")
        self.workdir = None

    def missing(self):
        return [p for p in (self.ulsock, self.net_server, self.net_client, self.net_peer,
                            self.shm_intruder)
                if not os.access(p, os.X_OK)]


def revision():
    try:
        res = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def host_info():
    """tools/bench.py's host description, plus the load when the soak began."""
    info = bench.host_info()
    try:
        with open("/proc/loadavg") as f:
            info["loadavg_at_start"] = " ".join(f.read().split()[:3])
    except OSError:
        pass
    return info


def run_part(name, ctx, args):
    part = Part(name)
    runs = {"data": run_data, "cycles": run_cycles, "kill": run_kill, "users": run_users}
    try:
        runs[name](ctx, args, part)
    except SoakError as e:
        part.error = str(e)
        log("  FAIL %s could not run to the end: %s" % (name, e))
    finally:
        for h in list(_live):
            h.stop()
    log("  %s: %s" % (name, "PASS" if part.passed else "FAIL"))
    return part


def main():
    args = parse_args()

    def on_signal(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    ctx = Context(args)
    missing = ctx.missing()
    if missing:
        log("soak: %s missing: build the tree first (make, or ninja -C %s)"
            % (", ".join(missing), args.build))
        return 1
    ctx.workdir = args.workdir or tempfile.mkdtemp(prefix="ulsock-soak-")
    os.makedirs(ctx.workdir, exist_ok=True)
    started = datetime.datetime.now().isoformat(timespec="seconds")
    host = host_info()
    rev = revision()
    log("soak: %s run, build %s, revision %s, profile %s, files in %s"
        % ("short" if args.short else "full", args.build, rev or "unknown", args.profile,
           ctx.workdir))
    parts = {}
    try:
        for name in args.parts:
            parts[name] = run_part(name, ctx, args)
    except (KeyboardInterrupt, SystemExit) as e:
        log("soak: interrupted; the helpers were stopped, their output and ulsock logs are "
            "in %s" % ctx.workdir)
        return 130 if isinstance(e, KeyboardInterrupt) else e.code
    passed = all(p.passed for p in parts.values())

    if args.json:
        data = {"tool": "tools/soak.py", "argv": sys.argv[1:], "date": started,
                "revision": rev, "host": host, "build": args.build,
                "short": args.short, "profile": args.profile, "workdir": ctx.workdir,
                "passed": passed, "parts": {n: p.to_json() for n, p in parts.items()}}
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
    if passed and not args.workdir:
        shutil.rmtree(ctx.workdir, ignore_errors=True)
    elif not passed:
        log("soak: the helpers' output and ulsock logs are in %s" % ctx.workdir)
    log("soak: %s (%s)" % ("PASS" if passed else "FAIL",
                           ", ".join("%s %s" % (n, "passed" if p.passed else "failed")
                                     for n, p in parts.items())))
    return 0 if passed else 1


if __name__ == "__main__":
    projenv.use()
    sys.exit(main())
