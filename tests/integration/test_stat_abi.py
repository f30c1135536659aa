"""The `ulsock stat` record as an ABI (include/ulsock/stat.h), written here by an independent
writer: a file laid out from the header's documented offsets is listed field for field; a
file of the old layout (version 1) or another version is named on stderr and not listed; a
file whose header is not written yet is skipped without a word; an out-of-range path prints
as "?". Each file is made as the library makes it: in /dev/shm, unlinked at once, held open
by this test's own process, where `ulsock stat` finds it through /proc/PID/fd."""

import json
import os
import socket
import struct
import subprocess

import pytest

from conftest import ULSOCK_BIN, clean_env

MAGIC = 0x3154415453534C55
VERSION = 2
SLOTS = 2048
REC = 184
HEAD = 32


def rec_bytes(fd, role, path, local, peer, reason, tx, rx):
    """One live record at the header's offsets (used 0, fd 4, role 8, path 12, local 16,
    peer 44, reason 72, tx_bytes 168, rx_bytes 176)."""
    b = bytearray(REC)
    struct.pack_into("<IiII", b, 0, 1, fd, role, path)
    b[16:16 + len(local)] = local
    b[44:44 + len(peer)] = peer
    b[72:72 + len(reason)] = reason
    struct.pack_into("<QQ", b, 168, tx, rx)
    return bytes(b)


def sockaddr_in(port):
    """struct sockaddr_in for 127.0.0.1:port, as the kernel lays it out."""
    return struct.pack("<H", socket.AF_INET) + struct.pack(">H", port) + \
        socket.inet_aton("127.0.0.1") + bytes(8)


def hold_file(data, size):
    """Makes the file as the library does and returns its open descriptor."""
    path = f"/dev/shm/ulsock-stat.{os.getuid()}.{os.getpid()}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    os.unlink(path)
    os.ftruncate(fd, size)
    os.pwrite(fd, data, 0)
    return fd


def run_stat(*args):
    res = subprocess.run([str(ULSOCK_BIN), "stat", *args], capture_output=True, timeout=30,
                         env=clean_env(), text=True)
    assert res.returncode == 0, res.stderr
    return res


def mine(res):
    return [r for r in json.loads(res.stdout) if r["pid"] == os.getpid()]


@pytest.fixture
def held():
    fds = []
    yield fds
    for fd in fds:
        os.close(fd)


def test_current_layout_listed(held):
    head = struct.pack("<QIIIIQ", MAGIC, VERSION, REC, os.getpid(), SLOTS, 0)
    recs = [rec_bytes(7, 1, 1, sockaddr_in(4001), sockaddr_in(5001), b"", 123, 456),
            rec_bytes(9, 0, 2, sockaddr_in(4002), sockaddr_in(5002),
                      b"peer address is not on this host", 7, 8),
            rec_bytes(11, 0, 7, sockaddr_in(4003), sockaddr_in(5003), b"x" * 96, 0, 0)]
    data = head + b"".join(recs)
    held.append(hold_file(data, HEAD + REC * SLOTS))
    res = run_stat("--json")
    got = sorted(mine(res), key=lambda r: r["fd"])
    assert [r["fd"] for r in got] == [7, 9, 11], res.stdout
    assert got[0] == {"pid": os.getpid(), "fd": 7, "role": "server", "local": "127.0.0.1:4001",
                      "peer": "127.0.0.1:5001", "path": "shm", "tx_bytes": 123,
                      "rx_bytes": 456, "reason": ""}
    assert got[1]["path"] == "kernel" and got[1]["role"] == "client"
    assert got[1]["reason"] == "peer address is not on this host"
    assert (got[1]["tx_bytes"], got[1]["rx_bytes"]) == (7, 8)
    assert got[2]["path"] == "?"
    assert got[2]["reason"] == "x" * 96  # not terminated in the file: cut at 96
    assert "another layout" not in res.stderr
    table = run_stat()
    assert any(line.split()[:2] == [str(os.getpid()), "7"] for line in table.stdout.splitlines())


@pytest.mark.parametrize("layout", ["version1", "version3", "short"])
def test_other_layout_named(held, layout):
    if layout == "version1":  # magic, pid, nslots, then the records at 16
        head, size = struct.pack("<QII", MAGIC, os.getpid(), SLOTS), 16 + REC * SLOTS
    elif layout == "version3":
        head, size = struct.pack("<QIIIIQ", MAGIC, 3, REC, os.getpid(), SLOTS, 0), \
            HEAD + REC * SLOTS
    else:  # the current header on a file cut short
        head, size = struct.pack("<QIIIIQ", MAGIC, VERSION, REC, os.getpid(), SLOTS, 0), \
            HEAD + REC
    data = head + rec_bytes(5, 1, 1, sockaddr_in(4004), sockaddr_in(5004), b"", 1, 1)
    held.append(hold_file(data, size))
    res = run_stat("--json")
    assert mine(res) == []
    assert f"process {os.getpid()} keeps its records in another layout" in res.stderr


def test_unwritten_header_skipped(held):
    held.append(hold_file(bytes(HEAD), HEAD + REC * SLOTS))
    res = run_stat("--json")
    assert mine(res) == []
    assert str(os.getpid()) not in res.stderr


def test_odd_reason_printable(held):
    """Another process writes the reason: bytes that are not UTF-8 (a strerror text in a
    Latin-1 locale, one cut inside a character) print as U+FFFD, so --json stays valid;
    the table shows a control character as '?', so a newline cannot forge a line."""
    head = struct.pack("<QIIIIQ", MAGIC, VERSION, REC, os.getpid(), SLOTS, 0)
    recs = [rec_bytes(13, 0, 2, sockaddr_in(4005), sockaddr_in(5005),
                      b"caf\xe9 \xc3\xa9t\xc3", 0, 0),
            rec_bytes(14, 0, 2, sockaddr_in(4006), sockaddr_in(5006),
                      b"first\n99999 1 client forged\x1b[2J", 0, 0)]
    held.append(hold_file(head + b"".join(recs), HEAD + REC * SLOTS))
    got = sorted(mine(run_stat("--json")), key=lambda r: r["fd"])
    assert [r["reason"] for r in got] == ["caf\ufffd \u00e9t\ufffd",
                                          "first\n99999 1 client forged\x1b[2J"]
    res = subprocess.run([str(ULSOCK_BIN), "stat"], capture_output=True, timeout=30,
                         env=clean_env())
    assert res.returncode == 0
    out = res.stdout.decode("utf-8")  # raises if the table is not UTF-8
    assert "caf\ufffd \u00e9t\ufffd" in out
    assert "first?99999 1 client forged?[2J" in out
    assert not any(line.startswith("99999") for line in out.splitlines())
