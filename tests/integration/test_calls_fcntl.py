"""fcntl and ioctl on ulsock TCP streams (helper calls_fcntl)."""

import pytest

from calls_util import MODES, listed_cases, run_case

HELPER = "calls_fcntl"
CASES = {
    "nonblock": "O_NONBLOCK: EAGAIN on empty recv/read/recvmsg and full send; exact bytes arrive",
    "dupfd": "F_DUPFD (>= arg, no CLOEXEC), F_DUPFD_CLOEXEC; data via both; per-fd F_SETFD",
    "flags_shared": "O_NONBLOCK set through a dup applies to the original (shared open file)",
    "fionbio": "FIONBIO toggles O_NONBLOCK as fcntl sees it",
    "fionread": "FIONREAD/SIOCINQ: 0 empty, N after N written, N-k after reading k, 0 at EOF",
    "siocoutq": "SIOCOUTQ/SIOCOUTQNSD within [0, sent], 0 once the peer has read everything",
}


def test_case_list(uls):
    assert sorted(listed_cases(uls, HELPER)) == sorted(CASES)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_fcntl(uls, case, mode):
    run_case(uls, HELPER, case, mode)
