"""UDP and AF_UNIX sockets behave normally under ulsock (helper calls_other)."""

import re

import pytest

from calls_util import MODES, case_list_test, run_case

HELPER = "calls_other"
CASES = {
    "udp": "datagrams across processes: boundaries, source address, truncation, FIONREAD, connect",
    "udp6": "the same over [::1]",
    "unix_pair": "AF_UNIX stream socketpair across fork: 2 MiB each way, FIONREAD, EOF",
    "unix_listen": "abstract AF_UNIX listener: accept/connect, names, data, half-close",
    "unix_dgram": "AF_UNIX SOCK_DGRAM and SOCK_SEQPACKET keep boundaries; MSG_TRUNC",
}


test_case_list = case_list_test(HELPER, CASES)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_other(uls, case, mode):
    proc, _ = run_case(uls, HELPER, case, mode)
    # No TCP here: ulsock must not have logged a connection for any of these sockets.
    assert not re.search(r"path=(shm|kernel)", proc.log_text()), proc.describe()
