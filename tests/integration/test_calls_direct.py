"""Calls that reach a TCP socket's bytes without the ordinary libc socket calls: syscall(2)
with socket call numbers, preadv2/pwritev2 and the positioned calls, io_uring, POSIX AIO
(helper calls_direct).

Every case runs plain (kernel TCP, which validates the case) and under `ulsock run`: the
bytes must arrive exactly as on the kernel. A connection made after the process set up
io_uring must stay on kernel TCP (the helper prints `calls: expect kernel` for it); every
other connection starts on the fast path.
"""

from calls_util import case_list_test, case_test

HELPER = "calls_direct"
CASES = {
    "syscall_io": "2 MiB each way through syscall(SYS_write/sendto/writev/sendmsg) and "
                  "syscall(SYS_read/recvfrom/readv/recvmsg); raw shutdown; EOF is 0",
    "syscall_wait": "syscall(SYS_poll/ppoll/select/epoll_wait/epoll_pwait): not readable "
                    "when empty, readable once a byte is sent; raw poll says POLLOUT",
    "syscall_close": "syscall(SYS_shutdown, SHUT_WR) and syscall(SYS_close): the peer reads "
                     "every byte, then EOF, while the closer is still alive",
    "preadv2": "preadv2/preadv64v2 and pwritev2/pwritev64v2 with offset -1 act as "
               "readv/writev (1 MiB each way); RWF_NOWAIT on an empty socket is EAGAIN",
    "pread_espipe": "pread/pwrite/preadv/pwritev/preadv2/pwritev2 with an offset: ESPIPE "
                    "(EINVAL if negative), unknown RWF_ flag EOPNOTSUPP, lseek ESPIPE; "
                    "no byte taken or sent",
    "io_uring_before": "a connection in use, then io_uring set up by raw syscalls: "
                       "IORING_OP_SEND/WRITE and RECV/READ move 2 MiB each way exactly",
    "io_uring_after": "io_uring set up first, then a connection used only through the ring: "
                      "kernel TCP for the client, 2 MiB each way exactly",
    "aio": "aio_write/aio_read with aio_suspend, aio_error, aio_return: 1 MiB each way, "
           "aio_read 0 at EOF",
    "lio_listio": "lio_listio(LIO_WAIT) of two writes per round arrive in order; "
                  "lio_listio(LIO_NOWAIT) reads with LIO_NOP; each way",
}


test_case_list = case_list_test(HELPER, CASES)
test_direct = case_test(HELPER, CASES)
