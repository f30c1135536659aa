"""An echo server that hands its connection on mid-stream, for test_fabric.py: run under
ulsock between two hosts, its connection is on the fabric when the hand-off comes, and
must move back to kernel TCP in place (docs/protocol.md 9.10) without a byte lost or
repeated; the client (net_client --mode echo) checks every byte.

    fabric_echo.py ADDR HOW AFTER [PAUSE]
                                    listen on ADDR (port 0), print "READY port=P", serve one
                                    connection, and after AFTER bytes echoed, once its
                                    ulsock log names the connection's path, stop echoing
                                    for PAUSE seconds (default 0: the client's waits then
                                    sleep), then do HOW:
        async   fcntl(O_ASYNC) on the socket, then go on echoing in this process
        exec    exec this program again with --fd N: the new image echoes on
        scm     send the socket over a unix socketpair to a child process, which echoes
                on; close this process's copy
        fork    fork: the child echoes on, the parent closes its copy and waits
    fabric_echo.py --fd N           echo on descriptor N to EOF (exec's new image)
    fabric_echo.py --recv N         receive one descriptor on unix socket N, echo on it

Each echoing process prints "ECHOED n=BYTES" at EOF."""

import array
import fcntl
import os
import socket
import sys
import time


def echo(conn, limit=None):
    """Echoes until EOF, or until LIMIT bytes; returns the count."""
    n = 0
    while limit is None or n < limit:
        want = 65536 if limit is None else min(65536, limit - n)
        data = conn.recv(want)
        if not data:
            break
        conn.sendall(data)
        n += len(data)
    return n


def path_named():
    """'fabric' or 'kernel' once this process's ulsock log names its connection's path,
    else None; 'fabric' where no log is kept (a plain run has nothing to wait for). The
    fabric's handshake runs beside the stream, in the program's own calls, and on a
    crowded machine it may end only after AFTER bytes: a hand-off must find the
    connection where the test means it to be."""
    log = os.environ.get("ULSOCK_LOG_FILE")
    if not log:
        return "fabric"
    try:
        with open(log, errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    if " path=fabric" in text:
        return "fabric"
    return "kernel" if " path=kernel" in text else None


def accept_one(addr):
    """Listens on ADDR (port 0), prints "READY port=P", returns the one connection."""
    lsock = socket.socket()
    lsock.bind((addr, 0))
    lsock.listen(1)
    print(f"READY port={lsock.getsockname()[1]}", flush=True)
    conn, _ = lsock.accept()
    lsock.close()
    return conn


def echo_until_settled(conn):
    """Echoes in pieces until path_named() or EOF; returns the count (EOF: -count-1)."""
    n = 0
    while path_named() is None:
        data = conn.recv(65536)
        if not data:
            return -n - 1
        conn.sendall(data)
        n += len(data)
    return n


def finish(conn, n):
    n += echo(conn)
    print(f"ECHOED n={n}", flush=True)
    conn.close()


def main():
    if sys.argv[1] == "--fd":
        finish(socket.socket(fileno=int(sys.argv[2])), int(sys.argv[3]))
        return
    if sys.argv[1] == "--recv":
        unix = socket.socket(fileno=int(sys.argv[2]))
        fds = array.array("i")
        msg, anc, _, _ = unix.recvmsg(16, socket.CMSG_SPACE(fds.itemsize))
        fds.frombytes(anc[0][2][:fds.itemsize])
        finish(socket.socket(fileno=fds[0]), int(msg.decode()))
        return
    addr, how, after = sys.argv[1], sys.argv[2], int(sys.argv[3])
    pause = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    conn = accept_one(addr)
    n = echo(conn, after)
    more = echo_until_settled(conn)
    if more < 0:
        print(f"ECHOED n={n - more - 1}", flush=True)
        return
    n += more
    time.sleep(pause)
    if how == "async":
        fl = fcntl.fcntl(conn.fileno(), fcntl.F_GETFL)
        fcntl.fcntl(conn.fileno(), fcntl.F_SETFL, fl | os.O_ASYNC)
        finish(conn, n)
    elif how == "exec":
        os.set_inheritable(conn.fileno(), True)
        os.execv(sys.executable, [sys.executable, __file__, "--fd", str(conn.fileno()), str(n)])
    elif how == "fork":
        pid = os.fork()
        if pid == 0:
            finish(conn, n)
            os._exit(0)
        conn.close()
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
    elif how == "scm":
        mine, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            mine.close()
            os.set_inheritable(theirs.fileno(), True)
            os.execv(sys.executable, [sys.executable, __file__, "--recv", str(theirs.fileno())])
        theirs.close()
        mine.sendmsg([str(n).encode()],
                       [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [conn.fileno()]))])
        conn.close()
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
