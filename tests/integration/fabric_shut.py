"""Both ends of test_fabric.py's test_shutdown_*: shutdown(2) on a connection that is on
the fabric, as kernel TCP has it. Run under ulsock between two hosts (or plain).

    fabric_shut.py server ADDR CASE   listen on ADDR (port 0), print "READY port=P", serve
                                      one connection as CASE has it
    fabric_shut.py client ADDR PORT CASE

Both ends first echo 64-byte pings until the client's ulsock log names the path (the
calls move the handshake on; an "L" ping ends it). Then, by CASE:

    after     the client sends 1000 bytes, shuts down its writes and sends again: EPIPE
              ("AFTER EPIPE"); the server reads the 1000 and EOF ("READ 1000"), then sends
              "bye" and closes; the client reads it and EOF ("GOT 3").
    blocked   the server stops reading ("QUIET") until a line on stdin; a client thread
              sends until its send blocks, and the main thread shuts down its writes:
              the shutdown returns ("SHUTDOWN done") and the blocked send ends with EPIPE
              ("SENT n err=EPIPE"), all before the server reads again; then the server
              reads the n bytes and EOF ("READ n"), sends "bye" and closes, and the
              client, reading meanwhile, gets it ("GOT 3"; its calls are what moves a
              fabric provider's queued bytes on, README's limitations).
    peer-fin  the client sends 1000 bytes and shuts down its writes ("SHUT"); on a line,
              the server moves the connection back to kernel TCP (O_ASYNC) and reads the
              1000 and EOF ("READ 1000"), sends "bye", closes; the client: "GOT 3".
    own-fin   the server sends 1000 bytes, shuts down its writes ("SHUT") and, on a line,
              moves the connection back ("LEFT"), then reads to EOF ("READ n"); the client
              sends pings until a line comes, then reads the 1000 bytes and EOF ("GOT
              1000"), prints "SENT n" (its pings after the first part) and closes."""

import fcntl
import os
import select
import socket
import sys
import threading
import time

from fabric_echo import accept_one, path_named

PING = 64


def recv_exact(conn, n):
    data = b""
    while len(data) < n:
        d = conn.recv(n - len(data))
        if not d:
            raise EOFError(f"EOF after {len(data)} of {n} bytes")
        data += d
    return data


def read_to_eof(conn):
    n = 0
    while d := conn.recv(65536):
        n += len(d)
    return n


def serve_pings(conn):
    while True:
        d = recv_exact(conn, PING)
        conn.sendall(d)
        if d == b"L" * PING:
            return


def send_pings(conn):
    deadline = time.monotonic() + 30
    while path_named() is None and time.monotonic() < deadline:
        conn.sendall(b"p" * PING)
        recv_exact(conn, PING)
    conn.sendall(b"L" * PING)
    recv_exact(conn, PING)
    print(f"PATH {path_named()}", flush=True)


def move_back(conn):
    fl = fcntl.fcntl(conn.fileno(), fcntl.F_GETFL)
    fcntl.fcntl(conn.fileno(), fcntl.F_SETFL, fl | os.O_ASYNC)


def server(addr, case):
    conn = accept_one(addr)
    serve_pings(conn)
    if case == "after":
        print(f"READ {read_to_eof(conn)}", flush=True)
        conn.sendall(b"bye")
    elif case == "blocked":
        print("QUIET", flush=True)
        sys.stdin.readline()
        print(f"READ {read_to_eof(conn)}", flush=True)
        conn.sendall(b"bye")
    elif case == "peer-fin":
        sys.stdin.readline()
        move_back(conn)
        print(f"READ {read_to_eof(conn)}", flush=True)
        conn.sendall(b"bye")
    elif case == "own-fin":
        conn.sendall(b"z" * 1000)
        conn.shutdown(socket.SHUT_WR)
        print("SHUT", flush=True)
        sys.stdin.readline()
        move_back(conn)
        print("LEFT", flush=True)
        print(f"READ {read_to_eof(conn)}", flush=True)
    conn.close()


def blocked_sender(conn, res):
    buf, n = b"b" * 65536, 0
    try:
        while True:
            n += conn.send(buf)
    except OSError as e:
        res["err"] = e
    res["n"] = n


def client(addr, port, case):
    conn = socket.create_connection((addr, port))
    send_pings(conn)
    if case == "after":
        conn.sendall(b"z" * 1000)
        conn.shutdown(socket.SHUT_WR)
        try:
            conn.send(b"after")
            print("AFTER sent", flush=True)
        except BrokenPipeError:
            print("AFTER EPIPE", flush=True)
        print(f"GOT {read_to_eof(conn)}", flush=True)
    elif case == "blocked":
        res = {}
        t = threading.Thread(target=blocked_sender, args=(conn, res))
        t.start()
        time.sleep(1.0)  # lets the sender fill what the peer's side takes, then block
        conn.shutdown(socket.SHUT_WR)
        print("SHUTDOWN done", flush=True)
        t.join()
        err = "EPIPE" if isinstance(res.get("err"), BrokenPipeError) else repr(res.get("err"))
        print(f"SENT {res['n']} err={err}", flush=True)
        print(f"GOT {read_to_eof(conn)}", flush=True)
    elif case == "peer-fin":
        conn.sendall(b"z" * 1000)
        conn.shutdown(socket.SHUT_WR)
        print("SHUT", flush=True)
        print(f"GOT {read_to_eof(conn)}", flush=True)
    elif case == "own-fin":
        conn.setblocking(False)
        n = 0
        while not select.select([sys.stdin], [], [], 0.002)[0]:
            try:
                n += conn.send(b"p" * PING)
            except BlockingIOError:
                pass
        sys.stdin.readline()
        conn.setblocking(True)
        print(f"GOT {read_to_eof(conn)}", flush=True)
        print(f"SENT {n}", flush=True)
    conn.close()


def main():
    if sys.argv[1] == "server":
        server(sys.argv[2], sys.argv[3])
    else:
        client(sys.argv[2], int(sys.argv[3]), sys.argv[4])


if __name__ == "__main__":
    main()
