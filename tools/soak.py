#!/usr/bin/env python3
"""ulsock soak (`make soak`): reliability figures at scale, with both ends of every
connection under `ulsock run` on this host, so that every connection runs on the
shared-memory rings. Two parts (--only, default both), each run by the project's helper
programs (tests/helpers/net_server.c and net_client.c, plain programs that ulsock wraps):

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
          not counted against the run.

Throughput and connections per second are reported, never judged. --short is the CI-sized
version (64 MiB, 2,000 cycles). Every process is bounded by a timeout and stopped with
its process group whatever happens; traffic goes to 127.0.0.1 only. --json FILE writes
every figure and the exact commands. Exit status 0 when every check passed, 1 when one
failed or a part could not run (the reason is printed), 2 on a usage error.
"""

import argparse
import atexit
import datetime
import json
import os
import platform
import random
import re
import shlex
import shutil
import signal
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
# split them from the program's. Among them, the wake-up bells (eventfds, src/core/bell.h)
# are reused: their number follows the threads alive at once, never the connections made,
# so a thread-per-connection server may gain one when two connection threads first
# overlap. They are bounded instead of compared (as in tests/integration/test_net_leaks.py).
# The spare segment (src/transport/shm/segment.h), an unnamed file in /dev/shm, is made at
# the client's next sleep after a connect used the last one: whether it exists at a pause
# depends on timing, so it is bounded too (one at most).
LIB_FD_MIN = 900
BELLS_MAX = 16
SPARES_MAX = 1
GIB = 1 << 30
MIB = 1 << 20

FULL = dict(bytes=10 * GIB, cycles=100000, warmup=1000)
SHORT = dict(bytes=64 * MIB, cycles=2000, warmup=200)
PARTS = ("data", "cycles")

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
                    help="comma-separated parts to run: data, cycles (default both)")
    ap.add_argument("--short", action="store_true",
                    help="the CI-sized run: %s of data, %d cycles"
                         % (fmt_bytes(SHORT["bytes"]), SHORT["cycles"]))
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
    ap.add_argument("--profile", default="balanced", choices=("latency", "balanced", "efficient"),
                    help="the ulsock profile of both ends (default %(default)s)")
    ap.add_argument("--seed", type=int,
                    help="data: the streams' and I/O sizes' seed (default: a random one, "
                         "printed, so that a failing run can be repeated)")
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
    for name in ("bytes", "cycles", "warmup"):
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
    if args.seed is None:
        args.seed = random.randrange(1, 1 << 31)
    args.build = os.path.abspath(args.build)
    return args


# ------------------------------------------------------------------------ processes

class Helper(procs.GroupProc):
    """A helper program under `ulsock run --profile P --`, in its own process group, with
    its output (stdout and stderr) in NAME.out and its ulsock log (level info) in
    NAME.ulsock.log of the work directory."""

    def __init__(self, ctx, name, argv, stdin=False):
        self.name = name
        self.out_path = os.path.join(ctx.workdir, name + ".out")
        self.log_path = os.path.join(ctx.workdir, name + ".ulsock.log")
        extra = {"ULSOCK_LOG": "info", "ULSOCK_LOG_FILE": self.log_path}
        full = [ctx.ulsock, "run", "--profile", ctx.profile, "--"] + [str(a) for a in argv]
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
    three: its bells, its spare segment, and the others."""
    counts = {"fds": 0, "fds_program": 0, "fds_library": 0, "fds_bells": 0, "fds_spare": 0}
    for name in os.listdir("/proc/%d/fd" % pid):
        counts["fds"] += 1
        if int(name) < LIB_FD_MIN:
            counts["fds_program"] += 1
            continue
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, name))
        except OSError:
            continue
        if target == "anon_inode:[eventfd]":
            counts["fds_bells"] += 1
        elif target.startswith(SHM_DIR + "/#"):
            counts["fds_spare"] += 1
        else:
            counts["fds_library"] += 1
    return counts


def fd_kinds(pid):
    """What PID's descriptors are, counted by kind ("socket", "anon_inode:[eventfd]", a
    path with its numbers as N), so that a descriptor gained can be told at a glance."""
    kinds = {}
    for name in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, name))
        except OSError:
            continue
        kind = re.sub(r"^(socket|pipe):\[\d+\]$", r"\1", target)
        kind = re.sub(r"\d+", "N", kind) if kind.startswith("/") else kind
        kind = ("library " if int(name) >= LIB_FD_MIN else "program ") + kind
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
    left = shm_orphans(shm_before)
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
    orphans = shm_orphans(entries_before)
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
        part.check("%s: no descriptor gained (bells %d at most, spares %d)"
                   % (role, BELLS_MAX, SPARES_MAX),
                   a["fds_program"] <= b["fds_program"] and a["fds_library"] <= b["fds_library"]
                   and a["fds_bells"] <= BELLS_MAX and a["fds_spare"] <= SPARES_MAX,
                   "%d -> %d in all: program %d -> %d, library %d -> %d, bells %d -> %d, "
                   "spare segment %d -> %d"
                   % (b["fds"], a["fds"], b["fds_program"], a["fds_program"],
                      b["fds_library"], a["fds_library"], b["fds_bells"], a["fds_bells"],
                      b["fds_spare"], a["fds_spare"]))
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
    left = shm_orphans(shm_before)
    part.figures["shm_left_behind"] = left
    part.check("/dev/shm: no segment outlived the processes", not left, ", ".join(left[:5]))
    if rate:
        log("  %d cycles in %.2f s: %.0f connections/s" % (args.cycles, elapsed, rate))


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
        self.workdir = None

    def missing(self):
        return [p for p in (self.ulsock, self.net_server, self.net_client)
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
    try:
        (run_data if name == "data" else run_cycles)(ctx, args, part)
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
