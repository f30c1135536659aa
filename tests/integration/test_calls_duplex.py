"""Two threads on one ulsock TCP socket at once, a writer and a reader, each waiting its own
way (helper calls_duplex): 64 MiB through an echo server, every byte checked on its way back.
This is how runtimes drive sockets that have timeouts; a wait without progress for 5 s fails
the case and reports how far each thread got.

Every case runs plain (kernel TCP) and under `ulsock run` with each profile: the waits that
spin and the waits that sleep at once must both see the other thread's progress.
"""

import pytest

from calls_util import case_list_test, run_case
from conftest import PROFILES

HELPER = "calls_duplex"
CASES = {
    "duplex_poll": "non-blocking; the writer polls POLLOUT, the reader POLLIN, before each call",
    "duplex_epoll": "non-blocking; each thread its own level-triggered epoll set on the socket",
    "duplex_select": "non-blocking; the writer selects for writing, the reader for reading",
    "duplex_timeo": "blocking calls bounded by SO_RCVTIMEO and SO_SNDTIMEO (5 s)",
    "duplex_blocking": "blocking calls without timeouts (the control)",
    "duplex_mixed": "blocking socket: the writer polls and sends MSG_DONTWAIT, the reader "
                    "blocks in recv",
}
RUNS = [("plain", None)] + [("ulsock", p) for p in PROFILES]


test_case_list = case_list_test(HELPER, CASES)


@pytest.mark.parametrize("mode,profile", RUNS, ids=[p or m for m, p in RUNS])
@pytest.mark.parametrize("case", sorted(CASES))
def test_duplex(uls, case, mode, profile):
    run_case(uls, HELPER, case, mode, profile=profile)
