"""MSG_ZEROCOPY and its completions, TCP_INFO byte counters, TCP_CORK, MSG_MORE and
SO_PEEK_OFF on TCP streams (helper calls_zerocopy).

Every case runs plain (kernel TCP, which validates the case) and under `ulsock run`, where
the connection must have taken the fast path and behave as on the kernel.
"""

from calls_util import case_list_test, case_test

HELPER = "calls_zerocopy"
CASES = {
    "zerocopy": "SO_ZEROCOPY (0, EINVAL for 2, 1); 32 MSG_ZEROCOPY sends/sendmsgs each way "
                "arrive exactly; POLLERR until every send id 0..N-1 has completed exactly "
                "once on MSG_ERRQUEUE (IP_RECVERR, SO_EE_ORIGIN_ZEROCOPY); then EAGAIN",
    "zerocopy6": "the same over [::1] (IPV6_RECVERR)",
    "zerocopy_noopt": "MSG_ZEROCOPY without SO_ZEROCOPY is an ordinary send: bytes arrive, "
                      "the error queue stays empty",
    "tcp_info": "after a request and answer each way: tcpi_bytes_received = bytes read, "
                "tcpi_bytes_acked = bytes sent (+1 for the connector's SYN), "
                "tcpi_bytes_sent = bytes sent + retransmitted",
    "cork": "TCP_CORK on (1 MiB in small writes): all but the last 128 KiB reach the peer; "
            "TCP_CORK off: the rest follows; each way",
    "msg_more": "3000 small sends/sendtos/sendmsgs with MSG_MORE and one without: every byte "
                "arrives before any shutdown; each way",
    "peek_off": "SO_PEEK_OFF (-1 by default): peeks advance it, reads pull it back (not below "
                "0), EAGAIN past the queued bytes, -1 turns it off; each way",
}


test_case_list = case_list_test(HELPER, CASES)
test_zerocopy = case_test(HELPER, CASES)
