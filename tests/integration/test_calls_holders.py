"""Every way a process comes to hold an ulsock TCP socket (helper calls_holders): vfork, clone
with and without CLONE_VM/CLONE_VFORK/CLONE_FILES, posix_spawn, fork, SCM_RIGHTS, pidfd_getfd,
threads that close a descriptor another thread is blocked on; and a Python server whose
subprocess children start by vfork while it holds connections (py_subprocess_peer.py).

The accepting process hands the connection over and closes its copy at once while the peer
already streams; the new holder echoes 4 MiB byte-exact and its close alone ends the
connection. Every case runs plain (the kernel is the oracle) and under `ulsock run`, where
each connection must be path=shm in every process that logs it; the SCM_RIGHTS cases'
connections start on shm and move back to kernel TCP before the pass (`expect moved`).
"""

import sys
from pathlib import Path

import pytest

from calls_util import MODES, case_list_test, case_test, require_mode
from conftest import expect_paths

HELPER = "calls_holders"
CASES = {
    "vfork_exec": "vfork + execve of the holder with the descriptor number; parent closes at once",
    "vfork_dup2": "the vfork child dup2()s the socket onto 3 and closes the original, then execs",
    "vfork_close_range": "the vfork child dup2()s onto 3 and close_range(4, ~0), then execs",
    "clone_vfork": "glibc clone(CLONE_VM|CLONE_VFORK) with a child stack, then execve",
    "clone_vm": "clone(CLONE_VM) without CLONE_VFORK: the parent closes while the child execs",
    "spawn": "posix_spawn of the holder; the spawner closes at once",
    "spawn_dup2": "posix_spawn with adddup2 onto 3 and addclose of the original",
    "spawn_closefrom": "posix_spawn with adddup2 onto 3 and addclosefrom_np(4)",
    "fork_serve": "fork without exec: the child serves, the parent closes at once",
    "clone_fork": "clone() without CLONE_VM (no atfork handlers run): the child serves",
    "clone_files": "clone(CLONE_FILES): the child's close closes it here too (EBADF); the "
                   "number then works as a pipe",
    "scm_close_now": "SCM_RIGHTS to a process that never held it; the sender closes right "
                     "after sendmsg",
    "scm_sender_exits": "the sender exits with the descriptor in flight; the receiver serves",
    "pidfd_getfd": "pidfd_open + pidfd_getfd take a copy (FD_CLOEXEC); the holder closes and "
                   "exits; the taker serves",
    "close_while_recv": "thread B closes while A sleeps in recv: A is not woken, gets the "
                        "peer's later bytes; EOF at the peer only then",
    "shutdown_while_recv": "thread B's shutdown(SHUT_RDWR) wakes A's recv with 0; EOF at the peer",
    "close_while_poll": "thread B closes while A sleeps in poll: no EOF at the peer; its byte "
                        "wakes A with POLLNVAL; the peer then gets ECONNRESET",
}
INTERNAL = ["child_echo"]
SCRIPT = Path(__file__).resolve().parent / "py_subprocess_peer.py"


test_case_list = case_list_test(HELPER, CASES, INTERNAL)
test_holders = case_test(HELPER, CASES)


@pytest.mark.parametrize("mode", MODES)
def test_python_subprocess(uls, mode):
    """A Python server (the interpreter running this suite) holds three connections and,
    between rounds of byte-exact echo on all of them, starts children with subprocess:
    run(['true']) (vfork, descriptors closed in the child), Popen with stdout=PIPE, a child
    given one connection by pass_fds that writes on it and exits, a preexec_fn child (fork
    instead of vfork) and close_fds=False (posix_spawn). Every connection keeps working in
    the parent, in order; under ulsock every one is path=shm, in the child too."""
    require_mode(mode)
    on = mode == "ulsock"
    server, port = uls.server([sys.executable, str(SCRIPT), "server"], name="pyserver",
                              ulsock=on)
    client = uls.run([sys.executable, str(SCRIPT), "client", str(port)], name="pyclient",
                     ulsock=on)
    server.wait()
    assert "OK rounds=" in client.output(), client.describe()
    assert "OK rounds=" in server.output(), server.describe()
    assert "spawned pass_fds child" in server.output(), server.describe()
    expect_paths(client, "shm", count=3, peer_port=port)
    expect_paths(server, "shm", local_port=port)
