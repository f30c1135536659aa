"""A Python server that starts children with subprocess while it holds TCP connections,
and its client (test data for test_calls_holders.py::test_python_subprocess; run as a
program, never imported by the harness, which opens no socket itself).

    py_subprocess_peer.py server        listens on 127.0.0.1, prints READY port=P
    py_subprocess_peer.py client PORT   connects CONNS times and follows the rounds
    py_subprocess_peer.py child FD      (started by the server) writes on an inherited socket

Before each round the server starts children in one of subprocess's ways (CPython 3.11
starts them with vfork where it can, posix_spawn for close_fds=False, fork with a
preexec_fn); then every connection carries ROUND bytes each way, checked byte for byte on
both sides. Any failure raises, so the exit status is not 0.
"""

import os
import random
import socket
import subprocess
import sys

CONNS = 3
ROUND = 128 * 1024
CHUNK = 16 * 1024
PASS_FDS_ROUND = 3   # the round before which a child writes CHILD_BYTES on connection 1
PASS_FDS_CONN = 1
CHILD_BYTES = b"C" * 1000


def pattern(conn, rnd):
    return random.Random(f"{conn}:{rnd}").randbytes(ROUND)


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        got = sock.recv(n - len(buf))
        if not got:
            raise RuntimeError(f"EOF after {len(buf)} of {n} bytes")
        buf += got
    return bytes(buf)


def spawn_none(conns):
    pass


def spawn_true(conns):
    subprocess.run(["true"], check=True)


def spawn_pipe(conns):
    out = subprocess.run(["echo", "hi"], stdout=subprocess.PIPE, check=True).stdout
    if out != b"hi\n":
        raise RuntimeError(f"echo printed {out!r}")


def spawn_pass_fds(conns):
    fd = conns[PASS_FDS_CONN].fileno()
    subprocess.run([sys.executable, __file__, "child", str(fd)], pass_fds=(fd,), check=True)
    print("spawned pass_fds child", flush=True)


def spawn_preexec(conns):
    subprocess.run(["true"], preexec_fn=lambda: None, check=True)


def spawn_no_close_fds(conns):
    subprocess.run(["/bin/true"], close_fds=False, check=True)


STEPS = [spawn_none, spawn_true, spawn_pipe, spawn_pass_fds, spawn_preexec, spawn_no_close_fds]
assert STEPS[PASS_FDS_ROUND] is spawn_pass_fds


def server():
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    print(f"vfork={getattr(subprocess, '_USE_VFORK', None)} "
          f"posix_spawn={getattr(subprocess, '_USE_POSIX_SPAWN', None)}", flush=True)
    print(f"READY port={lsock.getsockname()[1]}", flush=True)
    conns = [None] * CONNS
    for _ in range(CONNS):
        c, _ = lsock.accept()
        idx = recv_exact(c, 1)[0]
        if conns[idx] is not None:
            raise RuntimeError(f"connection {idx} twice")
        conns[idx] = c
        c.sendall(bytes([idx]))
    lsock.close()
    for rnd, step in enumerate(STEPS):
        step(conns)
        for i, c in enumerate(conns):
            want = pattern(i, rnd)
            c.sendall(b"R" + bytes([rnd]))
            for off in range(0, ROUND, CHUNK):
                got = recv_exact(c, CHUNK)
                if got != want[off:off + CHUNK]:
                    raise RuntimeError(f"round {rnd} conn {i}: bad bytes at {off}")
                c.sendall(got)
    for c in conns:
        c.close()
    print(f"OK rounds={len(STEPS)}", flush=True)


def client(port):
    conns = []
    for i in range(CONNS):
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(bytes([i]))
        if recv_exact(c, 1) != bytes([i]):
            raise RuntimeError(f"connection {i}: bad greeting")
        conns.append(c)
    for rnd in range(len(STEPS)):
        for i, c in enumerate(conns):
            if rnd == PASS_FDS_ROUND and i == PASS_FDS_CONN:
                got = recv_exact(c, len(CHILD_BYTES))
                if got != CHILD_BYTES:
                    raise RuntimeError(f"the child's bytes: {got[:20]!r}...")
            head = recv_exact(c, 2)
            if head != b"R" + bytes([rnd]):
                raise RuntimeError(f"round {rnd} conn {i}: header {head!r}")
            data = pattern(i, rnd)
            for off in range(0, ROUND, CHUNK):
                c.sendall(data[off:off + CHUNK])
                if recv_exact(c, CHUNK) != data[off:off + CHUNK]:
                    raise RuntimeError(f"round {rnd} conn {i}: bad echo at {off}")
    for i, c in enumerate(conns):
        if c.recv(1) != b"":
            raise RuntimeError(f"connection {i}: no EOF at the end")
        c.close()
    print(f"OK rounds={len(STEPS)}", flush=True)


def child(fd):
    s = socket.socket(fileno=fd)
    s.sendall(CHILD_BYTES)
    # Exits without closing: the parent's descriptor keeps the connection.
    os._exit(0)


def main():
    role = sys.argv[1]
    if role == "server":
        server()
    elif role == "client":
        client(int(sys.argv[2]))
    elif role == "child":
        child(int(sys.argv[2]))
    else:
        raise SystemExit(f"unknown role {role}")


if __name__ == "__main__":
    main()
