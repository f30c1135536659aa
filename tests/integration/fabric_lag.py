"""Both ends of test_fabric.py's test_move_back_reader_behind: a server that moves its
connection back to kernel TCP (O_ASYNC) while the client has not read a byte of what
the server sent, so that the peer's REVERT finds the client's reader still before the
server's switch position, with bytes of all three parts of the stream waiting for it:
on TCP before the switch, on the fabric, on TCP after the move back (docs/protocol.md
9.6, 9.10). Run under ulsock between two hosts.

    fabric_lag.py server ADDR T F     listen on ADDR (port 0), print "READY port=P"; send
                                      T bytes (on TCP: the handshake has not ended); read
                                      the client's pings until this process's log names
                                      the path, print "PATH fabric|kernel"; send F bytes
                                      (on the fabric), fcntl(O_ASYNC) (the move back),
                                      print "LEFT"; send T bytes (TCP again), shut down,
                                      read to EOF, print "SENT n=BYTES". The TCP parts
                                      are short, so that the client's kernel holds both
                                      while it reads nothing.
    fabric_lag.py client ADDR PORT    connect; send a 64-byte ping every 2 ms (the calls
                                      move the handshake on and answer the REVERT), reading
                                      nothing, until a line comes on stdin; then read to
                                      EOF and print "GOT n=BYTES sha=HEX"

The stream is stream_bytes(n), which the test compares by its SHA-256."""

import fcntl
import hashlib
import os
import select
import socket
import sys
import time

from fabric_echo import accept_one, path_named


def stream_bytes(start, n):
    """Bytes [start, start+n) of the test stream: each byte is its position's low bits
    mixed with a higher one, so a piece read at the wrong place differs."""
    return bytes(((i * 131) ^ (i >> 9)) & 0xFF for i in range(start, start + n))


def server(addr, tcp_piece, fabric_piece):
    conn = accept_one(addr)
    conn.sendall(stream_bytes(0, tcp_piece))
    sent = tcp_piece
    conn.settimeout(0.05)
    deadline = time.monotonic() + 30
    while (path := path_named()) is None and time.monotonic() < deadline:
        try:
            if not conn.recv(4096):
                break
        except TimeoutError:
            pass
    print(f"PATH {path}", flush=True)
    conn.settimeout(None)
    conn.sendall(stream_bytes(sent, fabric_piece))
    sent += fabric_piece
    fl = fcntl.fcntl(conn.fileno(), fcntl.F_GETFL)
    fcntl.fcntl(conn.fileno(), fcntl.F_SETFL, fl | os.O_ASYNC)
    print("LEFT", flush=True)
    conn.sendall(stream_bytes(sent, tcp_piece))
    sent += tcp_piece
    # The client's pings wait unread: a close now would be a reset. Its close ends them.
    conn.shutdown(socket.SHUT_WR)
    while conn.recv(65536):
        pass
    conn.close()
    print(f"SENT n={sent}", flush=True)


def client(addr, port):
    conn = socket.create_connection((addr, port))
    conn.setblocking(False)
    ping = b"p" * 64
    while not select.select([sys.stdin], [], [], 0.002)[0]:
        try:
            conn.send(ping)
        except BlockingIOError:
            pass
    sys.stdin.readline()
    conn.setblocking(True)
    digest, n = hashlib.sha256(), 0
    while data := conn.recv(1 << 20):  # one read may take all three parts
        digest.update(data)
        n += len(data)
    print(f"GOT n={n} sha={digest.hexdigest()}", flush=True)
    conn.close()


def main():
    if sys.argv[1] == "server":
        server(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        client(sys.argv[2], int(sys.argv[3]))


if __name__ == "__main__":
    main()
