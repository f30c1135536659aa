"""Paths glibc takes to a TCP socket's bytes past the ordinary socket calls, and calls whose
kernel answer ulsock must give itself (helper calls_glibc; docs/calls.md).

Every case runs plain (kernel TCP, which validates the case) and under `ulsock run`, where
every connection starts on the fast path (`calls: expect shm`) and the bytes must arrive
exactly as on the kernel. Some cases move their connection back to kernel TCP on purpose
(stdio on descriptors 0-2, fdopen, TCP_ZEROCOPY_RECEIVE, io_submit, urgent data): the log
then shows a `left the fast path` line after the connection's path=shm lines.

The cases stdio_lowest_fd, revert_idle_peer, tcp_inq_eof, revert_after_shutdown and
recvmsg_eagain check what were the differences D18 and D20 to D23 of docs/calls.md
section 9 (revert_idle_peer: the part ulsock can do, the idle peer's bytes all read).
"""

import re

import pytest

from calls_util import MODES, case_list_test, run_case
from conftest import parse_path_lines

HELPER = "calls_glibc"
CASES = {
    "dprintf": "dprintf, vdprintf, __dprintf_chk, __vdprintf_chk each way, in order with "
               "write, and one of 200000 bytes; dprintf to a pipe",
    "write_alias": "__connect, __write, __send, __read, __poll, __select, __fcntl "
                   "(O_NONBLOCK: EAGAIN), __dup2, __close (EOF)",
    "stdout_socket": "socket made stdout, then stderr, with dup2: printf, puts, fwrite, "
                     "fputc, fprintf(stderr) arrive in order",
    "stdin_socket": "socket made stdin with dup3: fgets, getc, scanf, fread take what the "
                    "peer sent after it, then EOF",
    "stdio_lowest_fd": "close(0) then dup(socket) lands on stdin, close(1) then "
                       "fcntl(F_DUPFD) on stdout: fgets and printf work on the socket",
    "stdio_exec": "socket handed to a new image as descriptors 0 and 1 (posix_spawn file "
                  "actions): the image talks over stdio alone",
    "sockatmark": "sockatmark as SIOCATMARK: 0 before the bytes ahead of the urgent one are "
                  "read, 1 at the mark, 0 past it; fresh and settled connections, each way",
    "fork_underscore": "_Fork child keeps the socket and uses it after the parent closed its "
                       "copy: its bytes and the reply cross, EOF at its close",
    "raw_fork": "the same with syscall(SYS_fork)",
    "raw_clone": "the same with syscall(SYS_clone, SIGCHLD, 0, ...), a fork by flags",
    "popen_child": "popen's shell holds the socket while the parent closes its copy, then "
                   "writes on it (through an exec'd writer): bytes, then EOF",
    "system_child": "system leaves a background job holding the socket; it writes after "
                    "the parent closed its copy",
    "fexecve": "socket across fexecve, preload kept: partly read input and output exact",
    "fexecve_plain": "the same with LD_PRELOAD removed from the new image's environment",
    "execveat_plain": "the same through execveat, LD_PRELOAD removed",
    "raw_execve_plain": "the same through syscall(SYS_execve), LD_PRELOAD removed",
    "raw_execveat_plain": "the same through syscall(SYS_execveat), LD_PRELOAD removed",
    "timeo_after_exec": "SO_RCVTIMEO and SO_SNDTIMEO set before execve read back and bound "
                        "the new image's receive (EAGAIN) and full send (EAGAIN)",
    "tcp_inq": "TCP_INQ: recvmsg carries TCP_CM_INQ with the bytes left, MSG_CTRUNC without "
               "room, none once off; each way",
    "tcp_inq_eof": "TCP_INQ after the peer's FIN: the bytes left plus 1 (4, then 1, and 1 "
                   "at EOF), as the kernel counts the FIN",
    "recvmsg_eagain": "a recvmsg failing with EAGAIN leaves msg_namelen and msg_controllen "
                      "as they were: the msghdr used again gets its TCP_CM_INQ",
    "zerocopy_receive": "TCP_ZEROCOPY_RECEIVE with a copy buffer takes 11 queued bytes; bytes "
                        "flow exactly after",
    "sendfile_to_pipe": "sendfile(pipe, socket): ESPIPE with an offset, 10 queued bytes, then "
                        "200000 bytes in pieces",
    "fastopen_connected": "send, sendto, sendmsg with MSG_FASTOPEN on connected sockets: "
                          "EISCONN (EOPNOTSUPP without client fast open), nothing sent",
    "fastopen_off": "the same in a network namespace of its own with client fast open off "
                    "(net.ipv4.tcp_fastopen 0): EOPNOTSUPP, nothing sent",
    "errqueue_recv": "recv and recvfrom(MSG_ERRQUEUE) take a MSG_ZEROCOPY completion: 0 bytes, "
                     "POLLERR cleared; EAGAIN when empty",
    "raw_epoll_pwait2": "syscall(SYS_epoll_pwait2): nothing while empty, the socket with the "
                        "program's data once a byte arrives",
    "io_submit": "syscall(SYS_io_submit): IOCB_CMD_PREAD of queued bytes, IOCB_CMD_PWRITE, "
                 "ESPIPE at an offset; bytes exact after",
    "revert_after_switch": "a client's byte sent before its switch, then fdopen (the server "
                           "answering from a send of 3 MiB) or MSG_OOB before the server "
                           "read it: every byte in order; 3 rounds each",
    "revert_idle_peer": "fdopen, after reading all the peer sent, while the peer makes no "
                        "call on the connection: the answer arrives, then EOF",
    "revert_after_shutdown": "fdopen after the peer's shutdown(SHUT_WR) on the rings: the "
                             "stream reads the last line, then EOF; the answer arrives",
    "nonblock_other": "O_NONBLOCK set by another process: receive and full send are EAGAIN "
                      "here; cleared there: both wait, bytes exact",
    "timestamping_tx": "SO_TIMESTAMPING TX flags read back, bytes exact each way, a "
                       "non-blocking error-queue read never waits",
}
INTERNAL = ["stdio_child", "fd_writer", "exec_reader", "timeo_reader"]


test_case_list = case_list_test(HELPER, CASES, INTERNAL)


def check_handover(proc, out):
    """stdio_exec: the connection took the fast path (server, and the client that spawned
    the new image), and the new image, finding the socket on descriptor 0, moved it back
    to kernel TCP before its first path decision; the server saw it leave the rings."""
    m = re.search(r"^calls: handover (\S+)$", out, re.M)
    assert m, f"no 'calls: handover' line\n{proc.describe()}"
    addr, log = m.group(1), proc.log_text()
    lines = parse_path_lines(log)
    server = [ln for ln in lines if ln.local == addr]
    client = [ln for ln in lines if ln.peer == addr]
    ctx = f"\n{proc.describe()}"
    assert server and all(ln.path == "shm" for ln in server), f"server side: {server}" + ctx
    assert any(ln.path == "shm" for ln in client), "the spawning client was not on shm" + ctx
    assert any(ln.fd == 0 and ln.path == "kernel" and ln.reason == "moved back to kernel TCP"
               for ln in client), "the new image did not move descriptor 0 back" + ctx
    assert re.search(rf"^ulsock\[\d+\]: fd=\d+ {re.escape(addr)} -> \S+ left the fast path",
                     log, re.M), "the server did not see the connection leave the rings" + ctx


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_glibc(uls, case, mode):
    # In the *_plain cases one program image runs without the preload on purpose.
    proc, out = run_case(uls, HELPER, case, mode,
                         plain_images=1 if case.endswith("_plain") else 0)
    if case == "stdio_exec" and proc.preloaded:
        check_handover(proc, out)
