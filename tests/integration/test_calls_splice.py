"""splice, tee, vmsplice, sendfile and copy_file_range on TCP sockets (helper calls_splice).

Every case runs plain (kernel TCP, which validates the case) and under `ulsock run`, where
every connection must have taken the fast path and every byte must arrive as on the kernel.
"""

from calls_util import case_list_test, case_test

HELPER = "calls_splice"
CASES = {
    "relay": "client -> relay -> server, the relay splicing socket -> pipe -> socket both "
             "ways in two blocking threads: 4 MiB each way, every byte checked, EOF passed on",
    "relay_nonblock": "the same relay single-threaded on O_NONBLOCK sockets with "
                      "SPLICE_F_NONBLOCK: EAGAIN from an empty socket, poll, partial splices",
    "relay6": "the non-blocking relay over [::1]",
    "socket_to_pipe": "splice socket -> pipe alone, blocking and non-blocking: EINVAL with an "
                      "offset on the socket, EAGAIN when empty, 2 MiB each way, 0 at EOF",
    "pipe_to_socket": "splice pipe -> socket alone: EINVAL with an offset on the socket, "
                      "2 MiB each way in random pieces",
    "file_offset": "file -> pipe -> socket with an offset pointer (the file position stays) "
                   "and without; socket -> pipe -> file at an offset, read back with pread",
    "tee_vmsplice": "vmsplice user memory into a pipe, tee it, splice both pipes into the "
                    "socket (every piece twice); back: splice, tee, vmsplice out, read",
    "sendfile_counts": "sendfile file -> socket both ways: exact counts, a count past the end "
                       "returns the rest, 0 at the end, the file position with and without "
                       "an offset pointer",
    "sendfile_partial": "sendfile into a full O_NONBLOCK socket: a partial count, then EAGAIN "
                        "with the offset unmoved; 16 MiB arrive once the peer reads",
    "socket_source": "sendfile from a socket (EINVAL; ESPIPE with an offset) and "
                     "copy_file_range with a socket on either side (EINVAL) consume nothing",
}


test_case_list = case_list_test(HELPER, CASES)
test_splice = case_test(HELPER, CASES)
