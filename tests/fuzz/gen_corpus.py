#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the seed inputs of the fuzz targets into tests/fuzz/corpus/<target>/.

fuzz_ring: the input layout is described at the top of fuzz_ring.c; the segment layout
mirrors src/transport/shm/segment.h (struct uls_seg_ident, then two struct uls_side of
three cache lines each, then the two rings' shared positions).

fuzz_fabric_dir: one directory message each (docs/protocol.md 9.3).

fuzz_fabric_msg: fabric messages as protocol.md 9.4, 9.5 and 9.10 lay them out (header,
then payload), valid ones of every type and ones each rule of 9.11 rejects.

Rerun after a layout change:

    python3 tests/fuzz/gen_corpus.py
"""
import os
import struct

MAGIC = 0x0031474553534C55  # "ULSSEG1"
VERSION = 1
HDR = 4096
RING_MIN = 4096
IDENT_SIZE = 128
SIDE_SIZE = 3 * 64
RING_HDR = 128           # struct uls_ring_shared: prod line, cons line
RINGS_OFF = IDENT_SIZE + 2 * SIDE_SIZE
PATCH_INO, PATCH_COOKIE = 1, 2
COOKIE = 0x1122334455667788
U64 = (1 << 64) - 1

# Operation kinds of run_op(); the ring is (op >> 3) % number of rings:
# 0 = the local ring, 1 = c2s, 2 = s2c when the image validated.
SET_TAIL, SET_HEAD, NEAR_TAIL, NEAR_HEAD, READ, WRITE, PEEK, RESET = range(8)


def ident(c2s, s2c, magic=MAGIC, version=VERSION, total=None, offs=None):
    total = HDR + c2s + s2c if total is None else total
    offs = offs or (HDR, HDR + c2s)
    return struct.pack("<QIIQQQQQQQII", magic, version, HDR, total, offs[0], offs[1],
                       c2s, s2c, 0, 0, 0, 0).ljust(IDENT_SIZE, b"\0")


def image(idb, pos=((0, 0), (0, 0))):
    """An image of the header page: identity, zeroed sides, ring positions (head, tail)."""
    img = bytearray(RINGS_OFF + 2 * RING_HDR)
    img[:IDENT_SIZE] = idb
    for i, (head, tail) in enumerate(pos):
        base = RINGS_OFF + i * RING_HDR
        struct.pack_into("<Q", img, base, tail & U64)
        struct.pack_into("<Q", img, base + 64, head & U64)
    return bytes(img)


def op(kind, value, ring=0, extra=0):
    return struct.pack("<BQ", (kind & 7) | (ring << 3) | (extra << 5), value & U64)


def seed(img, file_size, ops=b"", flags=PATCH_INO | PATCH_COOKIE, local_log=0):
    return struct.pack("<BBHI", flags | (local_log << 4), 0, len(img), file_size) + img + ops


def ring_seeds():
    small = HDR + 2 * RING_MIN
    traffic = b"".join([op(WRITE, 1000, r) + op(READ, 999, r) + op(WRITE, 5000, r) +
                        op(PEEK, 17, r) + op(READ, 8191, r) for r in (0, 1, 2)])
    hostile = b"".join([op(SET_TAIL, 1 << 63, r) + op(READ, 100, r) +
                        op(NEAR_TAIL, 3 * RING_MIN, r) + op(READ, 100, r) +
                        op(SET_HEAD, U64, r) + op(WRITE, 100, r) +
                        op(NEAR_HEAD, RING_MIN + 1, r) + op(WRITE, 100, r) +
                        op(RESET, U64 - 10, r, 3) + op(WRITE, 4000, r) + op(READ, 4000, r)
                        for r in (0, 1, 2)])
    seeds = {
        "valid_small": seed(image(ident(RING_MIN, RING_MIN)), small, traffic),
        "valid_mixed": seed(image(ident(4 * RING_MIN, 2 * RING_MIN)),
                            HDR + 6 * RING_MIN, traffic, local_log=2),
        # Positions the creator left near the u64 wrap, with data waiting in c2s.
        "valid_wrap": seed(image(ident(RING_MIN, RING_MIN),
                                 ((U64 - 99, U64 - 99 + 3000), (U64, U64))),
                           small, traffic),
        # A tail more than a ring ahead, and a head ahead of the tail, in the image.
        "hostile_positions": seed(image(ident(RING_MIN, RING_MIN),
                                        ((5, 5 + RING_MIN + 1), (100, 50))), small, hostile),
        "hostile_updates": seed(image(ident(RING_MIN, RING_MIN)), small, hostile,
                                local_log=1),
        "bad_magic": seed(image(ident(RING_MIN, RING_MIN, magic=MAGIC ^ 1)), small),
        "bad_version": seed(image(ident(RING_MIN, RING_MIN, version=2)), small),
        "bad_ring_size": seed(image(ident(RING_MIN + 64, RING_MIN)), small + 64),
        "bad_offsets": seed(image(ident(RING_MIN, RING_MIN, offs=(HDR + 64, HDR + RING_MIN))),
                            small),
        "bad_total": seed(image(ident(RING_MIN, RING_MIN, total=small + HDR)), small + HDR),
        "truncated": seed(image(ident(RING_MIN, RING_MIN)), small - 1),
        "short_file": seed(image(ident(RING_MIN, RING_MIN))[:100], 100),
        "no_patch": seed(image(ident(RING_MIN, RING_MIN)), small, traffic, flags=0),
        "local_only": seed(b"", 0, hostile + traffic, local_log=4),
    }
    return seeds


# Fabric messages (protocol.md 9.4, 9.5, 9.10); integers little-endian.
M_CONNECT, M_ACCEPT, M_DECLINE, M_ABORT, M_TAKEOVER = 0x01, 0x02, 0x03, 0x04, 0x05
M_DATA, M_CREDIT, M_SWITCH, M_FIN, M_SLEEP, M_REVERT, M_RESET, M_AVAIL, M_TAKEN, M_RING, \
    M_WROTE, M_LEND, M_MOVED = range(0x10, 0x1d)


def fab_hdr(mtype, payload, tag=0, pcredits=0, seq=0, wnd=0, flags=0, length=None):
    length = len(payload) if length is None else length
    return struct.pack("<BBHIQII", mtype, flags, pcredits, length, tag, seq, wnd) + payload


def fab_tuple():
    mapped = b"\0" * 10 + b"\xff\xff"
    return mapped + bytes([10, 0, 0, 1]) + mapped + bytes([10, 0, 0, 2]) + \
        struct.pack("<HH", 40000, 5201)


def fab_connect(version=1, flags=0, slot=8192, window=256 << 10, grant=64, addr_len=16,
                reserved=0, tag=0x0102030405060708, mac=b"\0" * 32):
    addr = bytes(range(0x20, 0x20 + 16)).ljust(256, b"\0")
    return struct.pack("<HHI", version, flags, slot) + fab_tuple() + \
        struct.pack("<I", window) + bytes(range(0xc0, 0xe0)) + \
        struct.pack("<QQHHI", tag, 0xf0e0d0c0b0a09080, grant, addr_len, reserved) + addr + mac


def fab_revert(flags=3, reserved=0):
    return struct.pack("<IIQQQ", flags, reserved, 1000, 2000, 500)


def fab_takeover(tag=0x1112131415161718, new_tag=0x2122232425262728, addr_len=16,
                 revert=None):
    revert = fab_revert() if revert is None else revert
    addr = bytes(range(0x20, 0x20 + 16)).ljust(256, b"\0")
    return struct.pack("<QQQH", tag, new_tag, 0xf0e0d0c0b0a09080, addr_len) + b"\0" * 6 + \
        revert + addr + bytes(range(0x90, 0xb0))


def fabric_msg_seeds():
    nonce = bytes(range(0x30, 0x40))
    switch = struct.pack("<QII", 4096, 0, 0)
    fin = struct.pack("<QII", 1 << 40, 3, 1)
    sleep = struct.pack("<QII", 77, 1, 1)
    reset = struct.pack("<II", 6, 0)
    decline = struct.pack("<II", 3, 0) + nonce
    avail = struct.pack("<IIQQQQ", 65536, 0, 0x7f0011220000, 0x0102030405060708,
                        0x7f0011420000, 0xa5a5a5a55a5a5a5a)
    ring = struct.pack("<QQII", 0, 0x0102030405060708, 1 << 21, 0)
    lend = struct.pack("<IIQQQQQ", 1 << 20, 0, 0x7f0033440000, 0x0807060504030201,
                       0x7f0011420008, 0x0102030405060708, 0x5a5a5a5aa5a5a5a5)
    moved = struct.pack("<QIIQQQQ", 1 << 21, 1 << 20, 0, 0x7f0011220000, 0x0102030405060708,
                        0x7f0011420000, 0xa5a5a5a55a5a5a5a)
    return {
        "connect": fab_hdr(M_CONNECT, fab_connect()),
        "connect_mac": fab_hdr(M_CONNECT, fab_connect(flags=3, mac=bytes(range(32)))),
        "accept": fab_hdr(M_ACCEPT, fab_connect(slot=65536, window=16 << 20, grant=1024),
                          tag=0x0102030405060708),
        "decline": fab_hdr(M_DECLINE, decline, tag=9),
        "abort": fab_hdr(M_ABORT, struct.pack("<II", 9, 0) + nonce),
        "takeover": fab_hdr(M_TAKEOVER, fab_takeover()),
        "data": fab_hdr(M_DATA, b"hello, fabric", tag=9, pcredits=4, seq=1, wnd=4096),
        "data_full": fab_hdr(M_DATA, b"\xa5" * (2048 - 24), tag=9, seq=2),
        "credit_pair": fab_hdr(M_CREDIT, b"", pcredits=32),
        "credit_conn": fab_hdr(M_CREDIT, b"", tag=9, wnd=1 << 17),
        "switch": fab_hdr(M_SWITCH, switch, tag=9),
        "fin": fab_hdr(M_FIN, fin, tag=9, seq=5),
        "sleep": fab_hdr(M_SLEEP, sleep, tag=9),
        "revert": fab_hdr(M_REVERT, fab_revert(1), tag=9),
        "reset": fab_hdr(M_RESET, reset, tag=9),
        "avail": fab_hdr(M_AVAIL, avail, tag=9, seq=3, wnd=8192),
        "taken": fab_hdr(M_TAKEN, struct.pack("<Q", 1 << 21), tag=9, seq=4),
        "ring": fab_hdr(M_RING, ring, tag=9, seq=0),
        "wrote": fab_hdr(M_WROTE, struct.pack("<II", 1 << 20, 0), tag=9, seq=6, wnd=4096),
        "lend": fab_hdr(M_LEND, lend, tag=9, seq=7, wnd=8192),
        "moved": fab_hdr(M_MOVED, moved, tag=9, seq=8),
        # Each rule of 9.11 and 9.4 broken once.
        "bad_type": fab_hdr(0x1d, switch, tag=9),
        "bad_ring": fab_hdr(M_RING, ring[:16] + struct.pack("<II", 3 << 20, 0), tag=9),
        "bad_avail": fab_hdr(M_AVAIL, avail[:32] + bytes(8), tag=9),
        "bad_lend": fab_hdr(M_LEND, lend[:40] + bytes(8), tag=9),
        "bad_moved": fab_hdr(M_MOVED, moved[:8] + bytes(4) + moved[12:], tag=9),
        "bad_flags": fab_hdr(M_SWITCH, switch, tag=9, flags=1),
        "bad_len": fab_hdr(M_SWITCH, switch + b"\0", tag=9),
        "len_mismatch": fab_hdr(M_SWITCH, switch, tag=9, length=17),
        "bad_tag": fab_hdr(M_CONNECT, fab_connect(), tag=9),
        "bad_credits": fab_hdr(M_ACCEPT, fab_connect(), tag=9, pcredits=1),
        "bad_version": fab_hdr(M_CONNECT, fab_connect(version=2)),
        "bad_slot": fab_hdr(M_CONNECT, fab_connect(slot=3072)),
        "bad_window": fab_hdr(M_CONNECT, fab_connect(window=(16 << 20) + 1)),
        "bad_grant": fab_hdr(M_CONNECT, fab_connect(grant=0)),
        "bad_addr_len": fab_hdr(M_CONNECT, fab_connect(addr_len=257)),
        "bad_reserved": fab_hdr(M_CONNECT, fab_connect(reserved=1)),
        "bad_mac": fab_hdr(M_CONNECT, fab_connect(mac=b"\x01" * 32)),
        "bad_takeover": fab_hdr(M_TAKEOVER, fab_takeover(revert=fab_revert(1))),
        "bad_sleep": fab_hdr(M_SLEEP, struct.pack("<QII", 77, 0, 0), tag=9),
        "short": fab_hdr(M_DATA, b"x", tag=9)[:20],
        # Bare payloads, for the parsers that take them directly.
        "payload_connect": fab_connect(),
        "payload_takeover": fab_takeover(),
        "payload_revert": fab_revert(),
        "payload_decline": decline,
        "payload_avail": avail,
        "payload_ring": ring,
        "payload_lend": lend,
        "payload_moved": moved,
    }


def write(target, seeds):
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", target)
    os.makedirs(out, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds)} seeds to {out}")


DIR_MAGIC = 0x44464C55  # "ULFD"
TUPLE = bytes(10) + b"\xff\xff" + bytes([10, 1, 2, 3]) + bytes(10) + b"\xff\xff" + \
    bytes([10, 1, 2, 4]) + struct.pack("<HH", 40000, 80)


def dir_msg(mtype, body, length=None, magic=DIR_MAGIC, version=1):
    """A directory message: the 8-byte header, then BODY (offsets 8 onwards)."""
    length = 8 + len(body) if length is None else length
    return struct.pack("<IBBH", magic, version, mtype, length) + body


def where_tail(provider=b"tcp;ofi_rxm", fabric=b"fab0", addr=bytes(range(16))):
    return provider.ljust(32, b"\0") + fabric.ljust(64, b"\0") + addr.ljust(256, b"\0")


def fabric_dir_seeds():
    nd = bytes(range(16))
    offer = nd + struct.pack("<IHH", 1, 16, 0) + where_tail()
    reg = TUPLE + struct.pack("<HHQQ", 4, 1, 12345, 678) + nd + struct.pack("<H", 16) + \
        bytes(6) + where_tail()
    seeds = {
        "banner": dir_msg(1, nd + bytes([1, 1]) + bytes(6)),
        "banner_v1_to_3": dir_msg(1, nd + bytes([1, 3]) + bytes(6)),
        "hello": dir_msg(2, nd + TUPLE + bytes(4)),
        "hello_trailing": dir_msg(2, nd + TUPLE + bytes(4), length=64) + b"\0",
        "offer": dir_msg(3, offer),
        "offer_addr_257": dir_msg(3, nd + struct.pack("<IHH", 0, 257, 0) + where_tail()),
        "no": dir_msg(4, struct.pack("<II", 1, 0)),
        "no_busy": dir_msg(4, struct.pack("<II", 3, 0)),
        "reg": dir_msg(5, reg),
        "reg_v6": dir_msg(5, bytes(range(36)) + reg[36:36 + 0] + struct.pack("<HHQQ", 6, 0, 1, 2)
                          + nd + struct.pack("<H", 0) + bytes(6) + where_tail(addr=b"")),
        "ssh": b"SSH-2.0-OpenSSH_9.6\r\n",
        "bad_magic": dir_msg(1, nd + bytes([1, 1]) + bytes(6), magic=DIR_MAGIC ^ 1),
        "bad_version": dir_msg(1, nd + bytes([1, 1]) + bytes(6), version=2),
    }
    return seeds


def main():
    write("fuzz_ring", ring_seeds())
    write("fuzz_fabric_msg", fabric_msg_seeds())
    write("fuzz_fabric_dir", fabric_dir_seeds())


if __name__ == "__main__":
    main()
