"""Processes that a harness starts in their own session, so that a process's pid names
its process group too: one signal then reaches every child it forked, and a hung or
leftover process is always ended with all of them."""

import os
import shutil
import signal
import subprocess


def spawn(argv, env, stdout, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=None):
    """Starts ARGV as the leader of a new session and process group; returns the Popen."""
    return subprocess.Popen(argv, env=env, stdout=stdout, stderr=stderr, stdin=stdin,
                            cwd=cwd, start_new_session=True)


def signal_group(pgid, sig):
    """Sends SIG to process group PGID; False when it is gone or not ours to signal."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


# The library keeps its own descriptors at 900 and up (src/os/ownfd.h).
LIB_FD_MIN = 900


def lib_fds(pid):
    """PID's descriptors by kind: "program" (below LIB_FD_MIN), and of the library's:
    "bells" (its wake-up bells, src/core/bell.h: pipes it holds both ends of, counted once
    each), "wake_pipes" (other processes' bells it opened to wake them, one end each:
    src/transport/shm/wakepipe.c), "spare" (the spare segment, an unnamed file in
    /dev/shm) and "library" (the rest: log, stat record, sock_diag socket)."""
    counts = {"fds": 0, "program": 0, "library": 0, "bells": 0, "wake_pipes": 0, "spare": 0}
    pipes = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        counts["fds"] += 1
        if int(name) < LIB_FD_MIN:
            counts["program"] += 1
            continue
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith("pipe:["):
            pipes[target] = pipes.get(target, 0) + 1
        elif target.startswith("/dev/shm/#"):
            counts["spare"] += 1
        else:
            counts["library"] += 1
    for ends in pipes.values():
        counts["bells" if ends > 1 else "wake_pipes"] += 1
    return counts


# Fields of /proc/PID/stat counted after the command (which is in parentheses).
STAT_PPID, STAT_PGRP = 1, 2


def pids_where(field, value):
    """The live pids whose /proc/PID/stat FIELD (STAT_PPID, STAT_PGRP) equals VALUE."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if len(fields) > field and int(fields[field]) == value:
            pids.append(int(entry))
    return sorted(pids)


class GroupProc:
    """A process started by spawn(): its argv, its Popen, and the ways to end its group.
    The harnesses derive their own Proc from it, with their own output and failures."""

    def __init__(self, argv, popen):
        self.argv = argv
        self.popen = popen
        self.pid = popen.pid

    @property
    def alive(self):
        return self.popen.poll() is None

    def send(self, sig):
        """Signals the whole group (the process and what it forked)."""
        return signal_group(self.pid, sig)

    def reap(self, timeout):
        """Waits up to TIMEOUT seconds for the process; its status, None if it still runs."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def group_pids(self):
        """The live processes of the group (the process and what it forked)."""
        return pids_where(STAT_PGRP, self.pid)

    def stacks(self, timeout=30.0):
        """Every thread's backtrace in the group, by gdb where it is installed: what a hang
        report needs. An empty string without gdb."""
        gdb = shutil.which("gdb")
        if not gdb:
            return ""
        out = []
        for pid in self.group_pids():
            try:
                r = subprocess.run([gdb, "-p", str(pid), "-batch", "-nx", "-q",
                                    "-ex", "thread apply all bt"],
                                   capture_output=True, text=True, timeout=timeout)
                text = r.stdout
            except (subprocess.TimeoutExpired, OSError) as e:
                text = f"gdb: {e}"
            lines = [ln for ln in text.splitlines()
                     if ln.startswith(("Thread ", "#")) or ln.startswith("gdb:")]
            out.append(f"--- stacks of pid {pid}\n" + "\n".join(lines))
        return "\n".join(out)

    def stop_group(self, sig=signal.SIGTERM, grace=3.0, kill_wait=10.0, kill_survivors=True):
        """Signals the group with SIG if the process still runs and waits GRACE seconds for
        it; then SIGKILLs the group and waits up to KILL_WAIT seconds. With KILL_SURVIVORS
        false, a process that exited within GRACE leaves its group alone. Returns the
        exit status (None if the process outlived it all)."""
        if self.alive:
            self.send(sig)
            if self.reap(grace) is not None and not kill_survivors:
                return self.popen.returncode
        self.send(signal.SIGKILL)
        self.reap(kill_wait)
        return self.popen.returncode
