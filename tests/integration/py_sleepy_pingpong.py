"""A ping-pong whose two ends sleep in poll, epoll or select before every read (test data
for test_wakeup.py; run as a program, never imported by the harness).

    py_sleepy_pingpong.py server WAIT N [HOLD]
                                            listens on 127.0.0.1, prints READY port=P,
                                            accepts one connection and echoes N messages
    py_sleepy_pingpong.py client WAIT N P   connects to port P and sends N messages of
                                            64 bytes, each different, checking every echo

WAIT is poll, epoll or select: how each end waits for its next message. Both print
"DONE n=N" once the N messages went round, then wait for a line on stdin (the test
looks at the connection meanwhile), then close. HOLD says which processes hold the
accepted socket while the server echoes:

    alone         the server alone (the default)
    fork          it forks; the child echoes once the parent closed its copy (a
                  process-per-connection server), the parent waits for the child
    fork-parent   it forks; the parent echoes once the child closed its copy and exited
    fork-keep     it forks; the child echoes while the parent keeps its copy open
    fork-exit     it forks; the child leaves at once with _exit, closing nothing (as
                  Redis's BGSAVE child does), and the parent echoes once it is gone
"""

import os
import select
import socket
import sys

SIZE = 64


def wait_readable(sock, how, poller):
    if how == "select":
        r, _, _ = select.select([sock], [], [], 10)
        ok = bool(r)
    else:
        ok = bool(poller.poll(10 if how == "epoll" else 10000))
    if not ok:
        raise RuntimeError(f"{how}: nothing within 10 s")


def make_poller(sock, how):
    if how == "poll":
        p = select.poll()
        p.register(sock, select.POLLIN)
        return p
    if how == "epoll":
        p = select.epoll()
        p.register(sock, select.EPOLLIN)
        return p
    return None


def recv_exact(sock, n, how, poller):
    got = bytearray()
    while len(got) < n:
        wait_readable(sock, how, poller)
        chunk = sock.recv(n - len(got))
        if not chunk:
            raise RuntimeError(f"end of stream after {len(got)} of {n} bytes")
        got += chunk
    return bytes(got)


def message(i):
    return (b"%08d" % i) * (SIZE // 8)


def finish(sock, n):
    print(f"DONE n={n}", flush=True)
    sys.stdin.readline()
    sock.close()


def echo(conn, how, n):
    poller = make_poller(conn, how)
    for _ in range(n):
        conn.sendall(recv_exact(conn, SIZE, how, poller))
    finish(conn, n)


def server(how, n, hold):
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    print(f"READY port={lsock.getsockname()[1]}", flush=True)
    conn, _ = lsock.accept()
    lsock.close()
    if hold == "alone":
        echo(conn, how, n)
        return
    if hold == "fork-exit":
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        echo(conn, how, n)
        return
    # The process that echoes starts once the other one did what HOLD says.
    go_r, go_w = os.pipe()
    pid = os.fork()
    echoes = (pid == 0) != (hold == "fork-parent")
    if echoes:
        os.close(go_w)
        if hold != "fork-keep" and os.read(go_r, 1) != b"x":
            raise RuntimeError("the other process did not close its copy")
        echo(conn, how, n)
    else:
        os.close(go_r)
        if hold != "fork-keep":
            conn.close()
            os.write(go_w, b"x")
    if pid == 0:
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if hold == "fork-keep":
        conn.close()
    sys.exit(os.waitstatus_to_exitcode(status))


def client(how, n, port):
    sock = socket.create_connection(("127.0.0.1", port))
    poller = make_poller(sock, how)
    for i in range(n):
        sock.sendall(message(i))
        echo = recv_exact(sock, SIZE, how, poller)
        if echo != message(i):
            raise RuntimeError(f"message {i}: sent {message(i)!r}, got {echo!r}")
    finish(sock, n)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(sys.argv[2], int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else "alone")
    else:
        client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
