"""Processes that a harness starts in their own session, so that a process's pid names
its process group too: one signal then reaches every child it forked, and a hung or
leftover process is always ended with all of them."""

import os
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
