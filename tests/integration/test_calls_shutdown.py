"""shutdown(2) and close(2) on ulsock TCP streams (helper calls_shutdown)."""

from calls_util import case_list_test, case_test

HELPER = "calls_shutdown"
CASES = {
    "shut_wr": "SHUT_WR: peer reads all then EOF (twice), POLLRDHUP; can still answer; EPIPE",
    "shut_rd": "SHUT_RD: recv returns 0 at once, POLLIN|POLLRDHUP; sending still works",
    "shut_rdwr": "SHUT_RDWR right after 3 MiB: peer gets it all then EOF; POLLHUP; EPIPE",
    "shut_rd_then_data": "SHUT_RD keeps queued and later data readable; an empty recv returns 0 at once",
    "shut_rdwr_then_data": "SHUT_RDWR, then the peer sends: the kernel's reset, ECONNRESET once, then 0",
    "shut_rdwr_then_data_client": "the same shut by the client before its first byte (its switch): "
                                  "the server's answer is reset, ECONNRESET once, then 0",
    "close_flush": "close() with full buffers: the peer still reads every accepted byte, then EOF",
    "shutdown_wakes_recv": "SHUT_RDWR wakes a thread blocked in recv: it returns 0",
    "shutdown_wakes_send": "SHUT_RDWR wakes a blocked send (EPIPE or short); peer gets exactly that",
    "close_blocked": "close() under a blocked recv: the thread ends (byte, 0 or EBADF), peer sees EOF",
    "shutdown_errors": "EINVAL for bad how, ENOTCONN, ENOTSOCK, EBADF; connection unharmed",
}


test_case_list = case_list_test(HELPER, CASES)
test_shutdown = case_test(HELPER, CASES)
