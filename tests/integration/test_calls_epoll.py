"""epoll with ulsock TCP streams (helper calls_epoll; calls_peer as a plain, kernel-path peer)."""

import pytest

from calls_util import MODES, case_list_test, case_test, require_mode, run_case, start_plain_peer

HELPER = "calls_epoll"
CASES = {
    "create": "epoll_create(0/-1) EINVAL; epoll_create1 flags, EPOLL_CLOEXEC honoured",
    "ctl_errors": "ENOENT, EEXIST, EINVAL (bad op, self, non-epoll), EBADF; epoll_wait EINVAL",
    "lt": "level-triggered EPOLLIN/EPOLLOUT while ready; data.u64 exact; MOD changes data",
    "et": "edge-triggered: no repeat after a partial read; new event after drain + new data",
    "et_out": "edge-triggered EPOLLOUT: once, silent while full, again when drained",
    "oneshot": "EPOLLONESHOT: one event until EPOLL_CTL_MOD re-arms (fires at once if ready)",
    "rdhup": "EPOLLRDHUP on peer SHUT_WR; EPOLLHUP when both shut (unrequested); EPOLLERR on RST",
    "multi_set": "one socket in two sets (LT and ET) with their own data; DEL from one only",
    "nested": "epoll fd in an epoll fd: outer reports inner readable as long as the socket is",
    "nested_deleted": "a socket deleted from a set after a wait armed it: its peer's bytes "
                      "make neither the set nor an outer one readable; added back, it is",
    "nested_poll": "poll and select on an epoll fd (and on one nesting it) sleep until the "
                   "socket's bytes or its peer's close come, and report it readable exactly "
                   "while the socket is",
    "pwait": "epoll_pwait timeout; sigmask gives EINTR for a pending signal; readiness",
    "pwait2": "epoll_pwait2 timespec timeout, zero timeout, NULL timeout (skips without it)",
    "wait_eintr": "epoll_wait returns EINTR on a signal even with SA_RESTART",
    "dup_close": "registration outlives the closed fd while a dup lives; DEL gives EBADF",
    "dup_close_pipe": "the same for a pipe (readiness decided by the kernel); MOD/DEL EBADF",
    "maxevents": "level-triggered with maxevents=1 goes round all ready sockets (no starvation)",
    "readd": "DEL then ADD around requests: a deleted socket is never reported (also after "
             "fork, or a close with a dup open); DEL/MOD of it ENOENT; ADD reports pending data",
}


test_case_list = case_list_test(HELPER, CASES, ["mixed"])
test_epoll = case_test(HELPER, CASES)


@pytest.mark.parametrize("mode", MODES)
def test_epoll_mixed(uls, mode):
    """One set holding an ulsock socket, a pipe, an eventfd, a timerfd, a UDP socket, a TCP
    socket to a plain calls_peer (kernel path) and an in-process TCP connection: every member
    reports with its exact data.u64; a regular file is refused with EPERM. Under ulsock the
    connection to the plain peer must log path=kernel with a reason."""
    require_mode(mode)
    peer, port = start_plain_peer(uls)
    run_case(uls, HELPER, "mixed", mode, args=[port])
    peer.wait(timeout=10)
