"""Descriptors of ulsock TCP sockets: dup, fork, exec, SCM_RIGHTS, sendfile, accept4
(helper calls_fdlife)."""

import pytest

from calls_util import MODES, case_list_test, run_case

HELPER = "calls_fdlife"
CASES = {
    "dup": "writes via original and dup arrive in order; one close keeps it; EOF after the last",
    "dup2": "dup2 to a free number, over an open pipe fd (now a socket), onto itself; EBADF",
    "dup3": "dup3 O_CLOEXEC honoured; same fd or bad flags EINVAL; data via both",
    "close_range": "close_range/closefrom take a connection down like close (number reusable); "
                   "over 900+ they close the program's descriptors, not ulsock's; dup2 onto one",
    "fork": "forked child writes/reads, exits (no EOF at the peer); parent continues in order",
    "fork_exit": "last holder a forked child exiting without close: non-blocking peer sees EOF",
    "exec": "socket inherited across execve of the helper: partly read input and output exact",
    "exec_plain": "the same with LD_PRELOAD removed from the new image's environment",
    "scm_rights": "socket passed over AF_UNIX after a partial read: receiver continues exactly "
                  "(moved back to kernel TCP before the pass)",
    "scm_rights_plain": "the same with a receiver exec'd without LD_PRELOAD",
    "scm_rights_mmsg": "scm_rights with sendmmsg and recvmmsg",
    "scm_rights_mmsg_plain": "scm_rights_plain with sendmmsg and recvmmsg",
    "sendfile": "3 MiB + 123 from a file with an offset pointer, then from the file position",
    "accept4": "SOCK_NONBLOCK|SOCK_CLOEXEC honoured, peer address filled, EINVAL; accept() blocking",
    "spawn_shared": "a posix_spawn child sends on the parent's socket at the same time: no record torn",
    "spawn_plain": "socket handed to a posix_spawn child whose environment drops LD_PRELOAD",
    "exec_threads_plain": "exec without LD_PRELOAD while another thread connects: every "
                          "connection the new image inherits answers on kernel TCP",
    "spawn_threads_plain": "the same with posix_spawn (the spawner waits for the child)",
}
INTERNAL = ["exec_child", "exec_threads_child", "scm_receiver", "scm_receiver_mmsg",
            "spawn_writer"]


test_case_list = case_list_test(HELPER, CASES, INTERNAL)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_fdlife(uls, case, mode):
    # In the *_plain cases one program image runs without the preload on purpose.
    run_case(uls, HELPER, case, mode, plain_images=1 if case.endswith("_plain") else 0)


@pytest.mark.parametrize("profile", ["latency", "efficient"])
def test_fork_exit_profiles(uls, profile):
    """The peer gone without a close is seen whatever the spin budget."""
    run_case(uls, HELPER, "fork_exit", "ulsock", profile=profile)
