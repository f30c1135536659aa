"""Socket options and names on ulsock TCP streams (helper calls_sockopt)."""

import pytest

from calls_util import case_list_test, case_test, run_case

HELPER = "calls_sockopt"
CASES = {
    "so_error": "SO_ERROR 0 when connected; ECONNREFUSED once after a refused connect",
    "bufsizes": "SO_SNDBUF/SO_RCVBUF positive, read back doubled; 2 MiB each way afterwards",
    "rcvtimeo": "SO_RCVTIMEO reads back; recv/read/recvmsg time out with EAGAIN after ~200 ms",
    "rcvtimeo_ring": "SO_RCVTIMEO on a ring-path connection; then EOF when the peer exits",
    "sndtimeo": "SO_SNDTIMEO: send on a full buffer gives EAGAIN after ~200 ms; exact bytes arrive",
    "linger": "SO_LINGER reads back; {1,0} close resets: ECONNRESET, SO_ERROR then 0, EPIPE",
    "nodelay_keepalive": "TCP_NODELAY, SO_KEEPALIVE, TCP_KEEPIDLE/INTVL/CNT set and read back",
    "sockinfo": "SO_TYPE, SO_DOMAIN, SO_PROTOCOL, SO_ACCEPTCONN, TCP_INFO state ESTABLISHED",
    "sockopt_errors": "ENOPROTOOPT, EINVAL, EFAULT, ENOTSOCK as the kernel gives them",
    "names": "getsockname/getpeername match across the connection and the listener; truncation",
    "names6": "the same over [::1]",
}


test_case_list = case_list_test(HELPER, CASES)
test_sockopt = case_test(HELPER, CASES)


@pytest.mark.parametrize("case", ["rcvtimeo", "rcvtimeo_ring", "sndtimeo"])
def test_timeouts_while_spinning(uls, case):
    """The latency profile spins without a time limit, yet SO_RCVTIMEO/SO_SNDTIMEO still
    end a wait that nothing ends."""
    run_case(uls, HELPER, case, "ulsock", profile="latency")
