"""A server that accepts only after its client has sent a request, closed and exited, and
that client (test data for test_net_transparency.py::test_accept_after_client_closed; run
as a program, never imported by the harness).

    py_late_accept.py server GO    listens on 127.0.0.1, prints READY port=P, waits until
                                   the file GO exists, accepts, reads to EOF and prints
                                   GOT n=N sha=HEX
    py_late_accept.py client PORT  connects, sends REQUEST, closes, prints SENT n=N
                                   sha=HEX and exits

This is what a load generator does when its time is up with connections still in the
server's listen queue (wrk against nginx). The request went over TCP, as everything a
client sends before its server attaches does, so the server must read it whole.
"""

import hashlib
import os
import socket
import sys
import time

REQUEST = b"GET /late HTTP/1.1\r\nHost: test\r\n\r\n" + bytes(range(256)) * 16


def server(go):
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)
    print(f"READY port={lsock.getsockname()[1]}", flush=True)
    deadline = time.monotonic() + 30
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{go} never appeared")
        time.sleep(0.01)
    conn, _ = lsock.accept()
    got = bytearray()
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            break
        got += chunk
    conn.close()
    lsock.close()
    print(f"GOT n={len(got)} sha={hashlib.sha256(got).hexdigest()}", flush=True)


def client(port):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(REQUEST)
    sock.close()
    print(f"SENT n={len(REQUEST)} sha={hashlib.sha256(REQUEST).hexdigest()}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(sys.argv[2])
    else:
        client(int(sys.argv[2]))
