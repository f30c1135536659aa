"""TCP urgent data: MSG_OOB, SO_OOBINLINE, SIOCATMARK, exceptfds/POLLPRI/EPOLLPRI, SIGURG
(helper calls_urgent).

Every case runs plain (kernel TCP, which validates the case) and under `ulsock run`, where
the connection must have taken the fast path and urgent data must behave as on the kernel.
"""

from calls_util import case_list_test, case_test

HELPER = "calls_urgent"
CASES = {
    "oob_one": "one urgent byte amid 8000 normal ones, each way: POLLPRI, SIOCATMARK 0 then "
               "1, MSG_OOB|MSG_PEEK, reads stop at the mark, recv(MSG_OOB), then EINVAL",
    "oob_several": "send(MSG_OOB) of 3 bytes: 2 normal, the last urgent",
    "oob_skip": "the reader never takes the urgent byte: the stream skips it, then "
                "recv(MSG_OOB) is EINVAL",
    "oob_inline": "SO_OOBINLINE (0 by default): the urgent byte stays in the stream, reads "
                  "stop at the mark, recv(MSG_OOB) is EINVAL",
    "oob_events": "select exceptfds, poll POLLPRI and epoll EPOLLPRI report urgent data and "
                  "only it, and stop once it is read; each way",
    "oob_none": "recv(MSG_OOB) with no urgent data is EINVAL (idle, with data queued, at "
                "EOF), never a wait; SIOCATMARK 0",
    "oob_sigurg": "SIGURG reaches the F_SETOWN owner when urgent data arrives, and nobody "
                  "when the socket has no owner",
}


test_case_list = case_list_test(HELPER, CASES)
test_urgent = case_test(HELPER, CASES)
