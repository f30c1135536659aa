"""Data-transfer calls on ulsock TCP streams (helpers calls_io and calls_fortify).

Every case runs plain and under `ulsock run`; under ulsock the connection must be path=shm.
"""

from pathlib import Path

import pytest

from calls_util import MODES, case_list_test, case_test, require_mode, run_case

HELPER = "calls_io"
CASES = {
    "rw": "read/write with mismatched chunk sizes both ways; EOF is sticky; read(0) is 0",
    "readv_writev": "writev with empty and uneven segments takes it all; readv scatters exactly",
    "send_recv": "an 8 MiB blocking send returns 8 MiB; byte-at-a-time sends arrive in order",
    "sendto_recvfrom": "sendto ignores a destination on a connected stream; recvfrom sets addrlen 0",
    "sendmsg_recvmsg": "multi-segment sendmsg; recvmsg reports namelen 0, controllen 0, flags 0",
    "mmsg": "sendmmsg sets each msg_len; recvmmsg (MSG_WAITFORONE, MSG_WAITALL) fills in order",
    "splits": "8 MiB each way at once, random sizes 1 B..1 MiB over all send/recv calls, exact",
    "splits6": "the same over [::1]",
    "peek": "MSG_PEEK does not consume (EAGAIN when empty with DONTWAIT, 0 at EOF)",
    "waitall": "MSG_WAITALL waits across 10 sends; returns short only at EOF",
    "dontwait": "MSG_DONTWAIT: EAGAIN when empty/full on a blocking socket; accepted bytes arrive",
    "msg_trunc": "recv(MSG_TRUNC) on TCP discards the bytes and returns the count",
    "sigpipe": "after the peer closed: EPIPE; SIGPIPE only without MSG_NOSIGNAL and not SIG_IGN",
    "eintr_recv": "blocked recv: EINTR without SA_RESTART, restarted with it, EINTR with SO_RCVTIMEO",
    "signal_interrupt": "eintr_send with signal() and siginterrupt() in place of sigaction",
    "sigset_semantics": "sigset (SIG_HOLD, masks, return values), sigignore and the old "
                        "action sigaction reports, as in glibc",
    "eintr_send": "send blocked on a full buffer: EINTR without SA_RESTART; never EINTR with it",
    "solo_signals": "single-threaded, SIGALRM every 200 us: 16 MiB each way, every byte checked",
    "solo_handler_close": "a handler closes the socket of a blocked recv: no crash, no hang",
    "solo_handler_send": "a handler sends on the socket of a blocked recv: it goes through",
    "paced_stream": "100,000 small messages in 5 bursts to a receiver that empties the ring "
                    "(paced receives), then a request and reply; every byte checked",
}


test_case_list = case_list_test(HELPER, CASES)
test_io = case_test(HELPER, CASES)


@pytest.mark.parametrize("pace_ns", ["0", "100000"])
def test_paced_stream_pace(uls, pace_ns):
    """paced_stream with pacing off and at its longest (100 us a look)."""
    run_case(uls, HELPER, "paced_stream", "ulsock", env={"ULSOCK_RX_PACE_NS": pace_ns})


@pytest.mark.parametrize("mode", MODES)
def test_fortify(uls, mode):
    """read/recv/recvfrom/poll/ppoll through glibc's __*_chk entry points."""
    require_mode(mode)
    binary = Path(uls.helper("calls_fortify")).read_bytes()
    if b"__recv_chk" not in binary:
        pytest.skip("calls_fortify built without optimization: no fortified calls")
    for sym in (b"__read_chk", b"__recv_chk", b"__recvfrom_chk", b"__poll_chk", b"__ppoll_chk"):
        assert sym in binary, f"calls_fortify does not call {sym.decode()}"
    run_case(uls, "calls_fortify", "fortify", mode)
