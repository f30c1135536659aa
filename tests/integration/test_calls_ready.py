"""Readiness beyond "bytes are queued" on ulsock TCP streams (helper calls_ready): O_ASYNC
signals, SO_RCVLOWAT/SO_SNDLOWAT, what a send meets after the peer closed, and epoll_wait
over thousands of ready descriptors.

Every case runs plain (the kernel is the oracle) and under `ulsock run`, where the
connections must start path=shm (O_ASYNC then moves them back to kernel TCP in place), except
async_connect's, which must stay path=kernel with a reason.
"""

from calls_util import case_list_test, case_test

HELPER = "calls_ready"
CASES = {
    "async_setown": "O_ASYNC + F_SETOWN: a receiver that only sleeps in sigtimedwait(SIGIO) and "
                    "reads to EAGAIN on each signal gets a 64-message stream whole, then EOF",
    "async_fioasync": "the same armed with ioctl FIOSETOWN/FIOASYNC/FIONBIO; F_GETFL shows O_ASYNC",
    "async_setsig": "F_SETSIG to a real-time signal: every signal has si_fd, si_code POLL_IN, "
                    "si_band POLLIN|POLLRDNORM",
    "async_setown_ex": "F_SETOWN_EX F_OWNER_TID: the signals reach that thread only (another "
                       "thread with the signal unblocked counts none)",
    "async_fresh": "O_ASYNC armed right after accept, before any read; the receiver sleeps in "
                   "sigsuspend with a SIGIO handler: the first bytes raise the first signal",
    "async_small": "async_setown with 400 messages of 1-64 bytes, each sent alone",
    "async_connect": "O_ASYNC + F_SETOWN armed on the connecting side before connect() "
                     "(under ulsock that connection stays on kernel TCP, with the reason)",
    "async_exact": "a signal per arrival: the receiver reads exactly FIONREAD's count after "
                   "each signal, never to EAGAIN; the FIN brings the last signal",
    "async_unread": "O_ASYNC armed while the client's first bytes (sent before the accept) are "
                    "unread and more followed: every byte in order, a signal for each arrival",
    "rcvlowat": "SO_RCVLOWAT 10 with 5 bytes queued: poll, select, epoll LT/ET not readable for "
                "200 ms; 5 more: readable everywhere, recv returns 10",
    "rcvlowat_recv": "SO_RCVLOWAT 10: blocking recv never returns the first 5 alone; DONTWAIT "
                     "returns 5; SO_RCVTIMEO ends the wait with 5; EOF with 3 is readable",
    "rcvlowat_big": "SO_RCVLOWAT 1.5 MiB, above the ring's size: the peer's 1.5 MiB make poll, "
                    "select and epoll report readable, every byte in order",
    "rcvlowat_short_read": "SO_RCVLOWAT 512 KiB, recv(4096) asleep before 128 KiB arrive: returns "
                           "4096 bytes in order (Linux at its 1 s SO_RCVTIMEO, ulsock at once)",
    "lowat_opts": "SO_RCVLOWAT default 1, 0 stores 1; SO_SNDLOWAT reads 1, set fails ENOPROTOOPT",
    "send_after_close": "peer closed (FIN): first send accepted whole; after the RST POLLERR|"
                        "POLLHUP, recv 0, send EPIPE (SIGPIPE unless MSG_NOSIGNAL)",
    "reset_then_send": "peer closed with our bytes unread (RST at once): send ECONNRESET without "
                       "SIGPIPE, then EPIPE with SIGPIPE; recv 0",
    "reset_then_recv": "the same reset taken by recv: ECONNRESET once, then 0; send EPIPE",
    "epoll_3000": "3000 ready connections: one epoll_wait(4096) returns all 3000; LT passes of "
                  "1000, 700, 64 return exactly maxevents; no member starved in 3 x total events",
    "epoll_3000_mixed": "the same with 1500 connections and 1500 pipes in one set",
}


test_case_list = case_list_test(HELPER, CASES)
test_ready = case_test(HELPER, CASES)
