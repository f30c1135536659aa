"""fcntl and ioctl on ulsock TCP streams (helper calls_fcntl)."""

from calls_util import case_list_test, case_test

HELPER = "calls_fcntl"
CASES = {
    "nonblock": "O_NONBLOCK: EAGAIN on empty recv/read/recvmsg and full send; exact bytes arrive",
    "dupfd": "F_DUPFD (>= arg, no CLOEXEC), F_DUPFD_CLOEXEC; data via both; per-fd F_SETFD",
    "flags_shared": "O_NONBLOCK set through a dup applies to the original (shared open file)",
    "fionbio": "FIONBIO toggles O_NONBLOCK as fcntl sees it",
    "fionread": "FIONREAD/SIOCINQ: 0 empty, N after N written, N-k after reading k, 0 at EOF",
    "siocoutq": "SIOCOUTQ/SIOCOUTQNSD within [0, sent], 0 once the peer has read everything",
}


test_case_list = case_list_test(HELPER, CASES)
test_fcntl = case_test(HELPER, CASES)
