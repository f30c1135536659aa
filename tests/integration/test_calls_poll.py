"""poll, ppoll, select and pselect with ulsock TCP streams (helper calls_poll)."""

from calls_util import case_list_test, case_test

HELPER = "calls_poll"
CASES = {
    "poll_in": "timeout respected when idle; POLLIN when data arrives; readable at EOF",
    "poll_out": "POLLOUT when fresh, not while full (timeout respected), again once drained",
    "poll_hup": "peer SHUT_WR: POLLIN|POLLRDHUP only; both shut: POLLHUP even if not requested",
    "poll_peer_close": "peer closed: POLLIN|POLLRDHUP|POLLOUT, EOF; a write draws RST: POLLHUP|POLLERR",
    "poll_nval": "a closed fd gives POLLNVAL, a negative one is ignored, a dup still works",
    "poll_many": "8 connections and a pipe: exactly the ready ones are reported, round by round",
    "ppoll": "timespec timeout; sigmask unblocking a pending signal gives EINTR; readiness",
    "select": "timeout zeroes the timeval; wake-up writes back the remaining time; r+w sets",
    "pselect": "timeout; sigmask gives EINTR; readiness",
    "poll_eintr": "poll/ppoll/select return EINTR on a signal even with SA_RESTART",
}


test_case_list = case_list_test(HELPER, CASES)
test_poll = case_test(HELPER, CASES)
