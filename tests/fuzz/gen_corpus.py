#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the seed inputs of the fuzz targets into tests/fuzz/corpus/<target>/.

fuzz_ring: the input layout is described at the top of fuzz_ring.c; the segment layout
mirrors src/transport/shm/shm_abi.h (struct uls_seg_ident, then two struct uls_side of
three cache lines each, then the two rings' shared positions); tests/fuzz/fuzz_shm.h
asserts the constants below, so a layout change fails the build until they follow it.

fuzz_segment, fuzz_close_revert: a segment image (the whole header, or its lines after
the identity) and the operations of fuzz_conn.c: valid connections driven through the
switch, moving back to TCP both ways and the close, and each rule of protocol.md
section 7 broken once.

fuzz_stat: `ulsock stat` record files (include/ulsock/stat.h): the current layout with
records of every path, and headers of other layouts.

fuzz_client: the operations of fuzz_server_peer.c, after a byte of ring sizes: honest
servers (a plain one, one that attaches and streams, moves back or serves the client's
move back, shuts down and closes) and hostile server words.

fuzz_offers: an offer board file (src/transport/shm/offers.h) and the operations of
fuzz_offers.c: offers counted and taken back on valid boards, new and short files, boards
of other layouts or writable by the group, hostile counts and stamps, a file shrunk.

fuzz_fabric_dir: one directory message each (docs/protocol.md 9.3).

fuzz_fabric_msg: fabric messages as protocol.md 9.4, 9.5 and 9.10 lay them out (header,
then payload), valid ones of every type and ones each rule of 9.11 rejects.

Rerun after a layout change:

    python3 tests/fuzz/gen_corpus.py
"""
import os
import struct

MAGIC = 0x0031474553534C55  # "ULSSEG1"
VERSION = 5
HDR = 4096
RING_MIN = 4096
IDENT_SIZE = 128
SIDE_SIZE = 3 * 64
RING_HDR = 256           # struct uls_ring_shared: prod lines (tail, flags), cons lines
RINGS_OFF = IDENT_SIZE + 2 * SIDE_SIZE
CONS = 128               # offset of the consumer's lines in a ring header
BOTH_OFF = RINGS_OFF + 2 * RING_HDR   # struct uls_seg_both: the client's offer word
HDR_END = BOTH_OFF + 64               # sizeof(struct uls_seg_hdr)
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
        struct.pack_into("<Q", img, base + CONS, head & U64)
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


# fuzz_conn.c: the client's words by offset in the header (shm_abi.h), the operations.
SIDE_CLIENT, SIDE_SERVER = IDENT_SIZE, IDENT_SIZE + SIDE_SIZE
SIDE = {"state": 64, "pid": 72, "tcp_data": 88, "switch_pos": 96, "switched": 104,
        "tokens_sent": 112, "tokens_closed": 132, "tokens_seen": 144, "revert_req": 152,
        "tx_reverted": 156, "revert_ring_end": 160, "revert_tcp_pos": 168}
ATTACHED, CLOSED = 0x1, 0x4
# fields[] of fuzz_conn.c, in order; modes of set_field: raw, anchor + i8, anchor +- span, ~raw.
FIELDS = ["state", "pid", "switch_pos", "switched", "tcp_data", "tokens_sent", "light_fence",
          "tokens_closed", "tokens_refused", "revert_req", "tx_reverted", "revert_ring_end",
          "revert_tcp_pos", "rx_back", "multi", "tokens_seen", "c2s_tail", "c2s_eof",
          "c2s_want_space", "s2c_head", "s2c_want_data", "s2c_closed",
          "s2c_data_pipe_who", "s2c_data_pipe_ino", "c2s_space_pipe_who", "c2s_space_pipe_ino"]
RAW, NEAR, SPAN, TOP = range(4)
# Operations: SET, PUBLISH, TCP, CONSUME, STEP (client); RECV, SEND, CTL (server).
SET, PUBLISH, TCP, CONSUME, STEP, RECV, SEND, CTL = range(8)
SWITCH, REVERT, REQUEST, CLOSE = range(4)                  # STEP
READY, INQ, DRAIN, SERVE, RX_BACK, SELF_REVERT, SHUT, ARM = range(8)  # CTL
PEEK, WAITALL = 1 << 14, 1 << 15


def c_op(kind, v=0):
    return struct.pack("<BQ", kind, v & U64)


def c_set(field, value, mode=RAW):
    return c_op(SET, FIELDS.index(field) | mode << 5 | (value & ((1 << 56) - 1)) << 8)


def c_near(field, delta):
    """The field at its anchor (the server's count or position) plus delta."""
    return c_set(field, delta & 0xff, NEAR)


def c_tcp(n, tokens=False, data=False):
    return c_op(TCP, n | tokens << 12 | data << 13)


def seg_header(c2s=RING_MIN, s2c=RING_MIN, server=None, **client):
    """A whole header page: identity, the client's side with the given words, the
    server's side (zero unless given), ring positions zero, the offer counted."""
    img = bytearray(HDR)
    img[:IDENT_SIZE] = ident(c2s, s2c)
    for name, value in client.items():
        struct.pack_into("<Q" if SIDE[name] in (88, 96, 112, 144, 160, 168) else "<I",
                         img, SIDE_CLIENT + SIDE[name], value)
    if server:
        img[SIDE_SERVER:SIDE_SERVER + len(server)] = server
    struct.pack_into("<I", img, BOTH_OFF, 1)  # its offer, counted on the board
    return bytes(img)


def conn_ops(*parts):
    return b"".join(parts)


# Stories both targets start from: an honest client through each protocol stage.
TRAFFIC = conn_ops(c_tcp(300, data=True), c_op(RECV, 200), c_op(RECV, 8191),
                   c_op(STEP, SWITCH), c_op(PUBLISH, 5000 | 1 << 16), c_op(CTL, ARM),
                   c_op(RECV, 1000), c_op(RECV, 4000 | PEEK), c_op(RECV, 8191),
                   c_op(SEND, 3000), c_op(CTL, READY), c_op(CTL, INQ), c_op(CONSUME, 2000),
                   c_op(SEND, 8000), c_op(CONSUME, 8192), c_op(SEND, 100))
CLIENT_REVERTS = conn_ops(c_tcp(100, data=True), c_op(STEP, SWITCH), c_op(CTL, ARM),
                          c_op(PUBLISH, 3000 | 1 << 16), c_op(RECV, 1000), c_tcp(2, tokens=True),
                          c_op(STEP, REVERT), c_tcp(500), c_op(RECV, 8191), c_op(RECV, 8191),
                          c_op(CTL, RX_BACK), c_op(RECV, 8191), c_op(SEND, 700))
SERVER_SERVES = conn_ops(c_op(STEP, SWITCH), c_op(SEND, 6000), c_op(CONSUME, 1000),
                         c_op(STEP, REQUEST), c_op(SEND, 500), c_op(CTL, DRAIN),
                         c_op(CTL, SERVE), c_op(CONSUME, 0), c_op(SEND, 300), c_op(RECV, 10))
SERVER_REVERTS = conn_ops(c_op(STEP, SWITCH), c_op(PUBLISH, 2000), c_op(SEND, 1500),
                          c_op(STEP, REVERT), c_op(CTL, SELF_REVERT), c_op(RECV, 4000),
                          c_op(SEND, 900), c_tcp(50), c_op(RECV, 4000))
CLOSES = conn_ops(c_op(STEP, SWITCH), c_op(PUBLISH, 700), c_op(SEND, 200), c_op(CTL, DRAIN),
                  c_op(STEP, CLOSE), c_op(RECV, 8191), c_op(SEND, 10), c_op(CTL, READY))
HOSTILE = conn_ops(c_tcp(64, data=True), c_op(RECV, 32), c_near("switch_pos", -8),
                   c_set("switched", 1), c_op(RECV, 100), c_op(SEND, 10), c_op(RECV, 100))
HOSTILE_REVERT = conn_ops(c_op(STEP, SWITCH), c_op(PUBLISH, 1000), c_set("tx_reverted", 1),
                          c_set("revert_ring_end", 3 * RING_MIN, SPAN), c_op(RECV, 4000),
                          c_op(CTL, RX_BACK), c_op(RECV, 10), c_op(SEND, 10))
HOSTILE_TCP_POS = conn_ops(c_op(STEP, SWITCH), c_tcp(10, tokens=True), c_op(CTL, DRAIN),
                           c_set("tx_reverted", 1), c_near("revert_ring_end", 0),
                           c_near("revert_tcp_pos", -3), c_op(CTL, RX_BACK),
                           c_op(RECV, 10))
HOSTILE_REQUEST = conn_ops(c_op(STEP, SWITCH), c_op(SEND, 3000), c_set("revert_req", 1),
                           c_set("s2c_head", 2 * RING_MIN + 5, SPAN), c_op(CTL, SERVE),
                           c_op(SEND, 10), c_op(RECV, 10), c_set("s2c_head", 7, TOP),
                           c_op(SEND, 100))


def segment_seed(img, file_size=None, ops=b"", flags=PATCH_INO | PATCH_COOKIE, pre=0):
    file_size = HDR + 2 * RING_MIN if file_size is None else file_size
    return struct.pack("<BBHI", flags, pre, len(img), file_size) + img + ops


def segment_seeds():
    small = HDR + 2 * RING_MIN
    seg = seg_header()
    return {
        "valid": segment_seed(seg),
        "traffic": segment_seed(seg, ops=TRAFFIC, pre=40),
        "mixed_sizes": segment_seed(seg_header(4 * RING_MIN, 2 * RING_MIN), HDR + 6 * RING_MIN,
                                    TRAFFIC),
        "client_reverts": segment_seed(seg, ops=CLIENT_REVERTS),
        "closes": segment_seed(seg, ops=CLOSES, pre=3),
        "switched_before": segment_seed(seg_header(switched=1, switch_pos=20), pre=30,
                                        ops=conn_ops(c_op(RECV, 8191), c_op(RECV, 8191),
                                                     c_op(PUBLISH, 100), c_op(RECV, 50))),
        "declined": segment_seed(seg_header(tx_reverted=1), ops=conn_ops(c_op(SEND, 10),
                                                                         c_op(RECV, 10)),
                                 pre=5),
        "server_side_prefilled": segment_seed(
            seg_header(server=bytes([0x5a]) * SIDE_SIZE), ops=TRAFFIC),
        "switch_behind": segment_seed(seg, ops=HOSTILE),
        "bad_magic": segment_seed(seg[:8].replace(seg[:1], b"V") + seg[8:]),
        "bad_version": segment_seed(ident(RING_MIN, RING_MIN, version=2) + seg[IDENT_SIZE:]),
        "bad_ring_size": segment_seed(ident(RING_MIN + 64, RING_MIN) + seg[IDENT_SIZE:],
                                      small + 64),
        "bad_offsets": segment_seed(ident(RING_MIN, RING_MIN, offs=(HDR + 64, HDR + RING_MIN))
                                    + seg[IDENT_SIZE:]),
        "bad_total": segment_seed(ident(RING_MIN, RING_MIN, total=small + HDR) +
                                  seg[IDENT_SIZE:], small + HDR),
        "truncated": segment_seed(seg, small - 1),
        "short_file": segment_seed(seg[:100], 100),
        "stale_inode": segment_seed(seg, flags=PATCH_COOKIE),
        "stale_cookie": segment_seed(seg, flags=PATCH_INO, ops=TRAFFIC),
        # Regressions. The client left the server's send lock held in the file it made:
        # a non-blocking send of the server blocked for good (attach.c now starts the
        # server's side afresh).
        "regress_server_lock": segment_seed(seg_header(server=struct.pack("<I", 4)),
                                            ops=conn_ops(c_op(SEND, 99), c_op(RECV, 99))),
    }


def close_revert_seed(lines, ops=b"", c2s_log=0, s2c_log=0, pre=0):
    return struct.pack("<BBH", c2s_log | s2c_log << 2, pre, len(lines)) + lines + ops


def close_revert_seeds():
    lines = seg_header()[IDENT_SIZE:HDR_END]
    wrapped = bytearray(lines)
    # Ring positions near the u64 wrap: C2S (head, tail), S2C (head, tail).
    for base, head, tail in ((RINGS_OFF, U64 - 99, U64 - 99), (RINGS_OFF + RING_HDR, U64, U64)):
        struct.pack_into("<Q", wrapped, base - IDENT_SIZE, tail)
        struct.pack_into("<Q", wrapped, base - IDENT_SIZE + CONS, head)
    return {
        "traffic": close_revert_seed(lines, TRAFFIC, pre=40),
        "traffic_big": close_revert_seed(lines, TRAFFIC, 2, 1),
        "wrapped": close_revert_seed(bytes(wrapped), TRAFFIC + SERVER_SERVES),
        "client_reverts": close_revert_seed(lines, CLIENT_REVERTS, pre=10),
        "server_serves": close_revert_seed(lines, SERVER_SERVES, 1, 1),
        "server_reverts": close_revert_seed(lines, SERVER_REVERTS),
        "closes": close_revert_seed(lines, CLOSES, pre=7),
        "closes_unread": close_revert_seed(lines, conn_ops(c_op(STEP, SWITCH),
                                                           c_op(PUBLISH, 900))),
        "switch_behind": close_revert_seed(lines, HOSTILE),
        "ring_end_out_of_range": close_revert_seed(lines, HOSTILE_REVERT),
        "tcp_pos_behind": close_revert_seed(lines, HOSTILE_TCP_POS),
        "head_out_of_range": close_revert_seed(lines, HOSTILE_REQUEST, 0, 1),
        "tokens_lie": close_revert_seed(lines, conn_ops(c_op(STEP, SWITCH),
                                                        c_set("tokens_sent", 1 << 40),
                                                        c_op(CTL, DRAIN))),
        # Regressions (fixed in src/transport/shm/io.c and attach.c).
        # Bytes wait on the ring when a send finds the client's head out of range: the
        # receive after that ECONNRESET returned them.
        "regress_broken_recv": close_revert_seed(lines, conn_ops(
            c_op(STEP, SWITCH), c_op(PUBLISH, 500), c_op(SEND, 4095),
            c_set("s2c_head", 0, TOP), c_op(SEND, 9), c_op(RECV, 99))),
        # A client that never switched says it moves back to TCP (here with ring bytes it
        # should not have written; or killed between tokens_closed and tx_reverted): a
        # non-blocking receive spun for good.
        "regress_unswitched_revert": close_revert_seed(lines, conn_ops(
            c_op(PUBLISH, 2000), c_op(STEP, REVERT), c_op(RECV, 3999), c_tcp(10),
            c_op(RECV, 3999))),
        "regress_revert_killed": close_revert_seed(lines, conn_ops(
            c_tcp(10, data=True), c_set("tokens_closed", 1), c_op(RECV, 99), c_op(RECV, 99)),
            pre=5),
        # The last close of a socket other processes may hold (a fork) is a server's, with
        # bytes unread (the kernel resets): the lookup of the socket's 4-tuple found the
        # listening socket instead, so the client was never told CLOSED.
        "regress_shared_close": close_revert_seed(lines, conn_ops(
            c_op(STEP, SWITCH), c_op(SEND, 99), c_op(CONSUME, 100), c_op(CTL, ARM | 8)),
            pre=5),
    }


# `ulsock stat` record files (include/ulsock/stat.h).
STAT_MAGIC, STAT_VERSION, STAT_SLOTS, STAT_REC = 0x3154415453534C55, 2, 2048, 184
AF_INET, AF_INET6 = 2, 10


def stat_head(magic=STAT_MAGIC, version=STAT_VERSION, rec=STAT_REC, pid=4242,
              slots=STAT_SLOTS):
    return struct.pack("<QIIIIQ", magic, version, rec, pid, slots, 0)


def stat_rec(slot, fd=7, role=1, path=1, local=None, peer=None, reason=b"", tx=0, rx=0,
             used=1):
    v4 = struct.pack("<H", AF_INET) + struct.pack(">H", 4000) + bytes([127, 0, 0, 1])
    local = v4.ljust(28, b"\0") if local is None else local
    peer = v4.ljust(28, b"\0") if peer is None else peer
    rec = (struct.pack("<IiII", used, fd, role, path) + local + peer +
           reason[:96].ljust(96, b"\0") + struct.pack("<QQ", tx, rx))
    return struct.pack("<H", slot) + rec


def stat_seed(head, recs=b"", json=False, delta=None):
    flags = int(json) | (2 if delta is not None else 0)
    return struct.pack("<Bb", flags, delta or 0) + head + recs


def stat_seeds():
    v6 = (struct.pack("<H", AF_INET6) + struct.pack(">H", 443) + bytes(4) +
          bytes(15) + b"\x01" + bytes(4))
    recs = (stat_rec(0) +
            stat_rec(1, 9, 0, 2, reason=b"peer address is not on this host", tx=7, rx=8) +
            stat_rec(2047, 11, 0, 3, local=v6, peer=v6, reason=b"net", tx=1 << 40) +
            stat_rec(5, 12, 1, 9, reason=b"x" * 96) + stat_rec(6, used=0))
    # What a reason may hold: quotes and control characters, UTF-8 (a strerror in a
    # French locale), Latin-1 and a UTF-8 sequence cut at the 96th byte.
    # The odd_reasons seeds are regressions too: --json printed invalid UTF-8 and the
    # table raw control characters (fixed in src/cli/ulsock.c).
    odd = (stat_rec(3, reason=b'quote " backslash \\ tab \t newline \n bell \x07 del \x7f') +
           stat_rec(4, path=2, reason="cannot create segment: P\u00e9riph\u00e9rique".encode()) +
           stat_rec(8, path=2, reason=b"latin-1 caf\xe9, cut \xc3") +
           stat_rec(9, path=2, reason=("x" * 95 + "\u00e9").encode()))
    return {
        "listed": stat_seed(stat_head(), recs),
        "listed_json": stat_seed(stat_head(), recs, json=True),
        "odd_reasons": stat_seed(stat_head(), odd),
        "odd_reasons_json": stat_seed(stat_head(), odd, json=True),
        "empty": stat_seed(stat_head(), json=True),
        "version1": stat_seed(struct.pack("<QII", STAT_MAGIC, 4242, STAT_SLOTS) + bytes(16),
                              recs),
        "version3": stat_seed(stat_head(version=3), recs, json=True),
        "rec_size": stat_seed(stat_head(rec=STAT_REC + 8), recs),
        "slots": stat_seed(stat_head(slots=1024), recs),
        "short": stat_seed(stat_head(), recs, delta=-1),
        "long": stat_seed(stat_head(), recs, json=True, delta=64),
        "unwritten": stat_seed(bytes(32), recs),
    }


# fuzz_client: fuzz_server_peer.c's operations; SRV_FIELDS is the order of its fields[].
SRV_FIELDS = ["state", "reason", "cookie", "tcp_data", "tokens_sent", "light_fence",
              "tokens_closed", "tokens_refused", "tokens_seen", "revert_req", "tx_reverted",
              "revert_ring_end", "revert_tcp_pos", "rx_back", "multi", "s2c.tail", "s2c.eof",
              "s2c.want_space", "c2s.head", "c2s.want_data", "c2s.closed", "switched",
              "c2s.data_pipe.who", "c2s.data_pipe.ino", "s2c.pipe.who", "s2c.pipe.ino"]
S_SET, S_PUBLISH, S_TCP, S_CONSUME, S_STEP, C_RECV, C_SEND, C_CTL = range(8)
ATTACH, S_REVERT, S_SERVE, S_FOLLOW, S_SHUT, S_CLOSE = range(6)
RECV_PEEK, RECV_WAITALL = 1 << 14, 1 << 15
CTL_READY, CTL_INQ, CTL_DRAIN, CTL_ARM, CTL_SHUT, CTL_REVERT = range(6)
SET_RAW, SET_NEAR, SET_OR, SET_NOT = range(4)
ST_ATTACHED, ST_DECLINED, ST_CLOSED, ST_RESET = 1, 2, 4, 0x10
MAX_XFER_C = 8192


def s_op(kind, v=0):
    return struct.pack("<BQ", kind, v & U64)


def s_set(field, value, mode=SET_RAW):
    return s_op(S_SET, SRV_FIELDS.index(field) | mode << 5 | (value & (U64 >> 8)) << 8)


def recv(n=MAX_XFER_C, flags=0):
    return s_op(C_RECV, (n - 1) | flags)


def client_seed(ops, c2s_log=0, s2c_log=0):
    return bytes([c2s_log | s2c_log << 2]) + b"".join(ops)


def client_seeds():
    attach = s_op(S_STEP, ATTACH)
    seeds = {
        # The server attaches and streams on S2C; the client reads and closes.
        "attach_stream": client_seed([attach, s_op(S_PUBLISH, 300), recv(100), recv(),
                                      s_op(C_SEND, 500), s_op(S_CONSUME, 8192),
                                      s_op(S_PUBLISH, 5000), recv(), recv(),
                                      s_op(S_STEP, S_CLOSE), recv(), recv()]),
        # A wake-up asked for by a receive that found the ring empty.
        "attach_wakeup": client_seed([recv(10), attach, recv(), s_op(S_PUBLISH, 40 | 1 << 16),
                                      s_op(C_CTL, CTL_READY), s_op(C_CTL, CTL_DRAIN),
                                      recv(), s_op(C_CTL, CTL_INQ), recv()], 1, 1),
        # A server without ulsock: its TCP data, then the end.
        "plain_server": client_seed([s_op(S_TCP, 700), recv(200), recv(), s_op(C_SEND, 900),
                                     s_op(S_STEP, S_CLOSE), recv()]),
        # The server moves back to TCP with bytes on the ring the client has not read.
        "server_revert": client_seed([attach, s_op(S_PUBLISH, 2000), recv(500),
                                      s_op(S_STEP, S_REVERT), recv(), recv(),
                                      s_op(S_TCP, 300), recv(), s_op(C_SEND, 100), recv()]),
        # The client moves back; the server serves its request and follows it.
        "client_revert": client_seed([attach, s_op(S_PUBLISH, 3000), recv(1000),
                                      s_op(C_SEND, 700), s_op(C_CTL, CTL_REVERT),
                                      s_op(S_STEP, S_SERVE), s_op(S_CONSUME, 8192),
                                      s_op(S_STEP, S_FOLLOW), recv(), recv(),
                                      s_op(S_TCP, 50), recv()]),
        # The client's data on TCP before the attach, then on the ring after its switch.
        "client_stream": client_seed([s_op(C_SEND, 300), s_op(S_CONSUME, 0), attach,
                                      s_op(C_SEND, 2000), s_op(S_CONSUME, 8192), recv(),
                                      s_op(S_PUBLISH, 100), recv(), s_op(C_SEND, 5000),
                                      s_op(S_CONSUME, 1000), s_op(C_SEND, 5000),
                                      s_op(S_CONSUME, 8192), s_op(C_CTL, CTL_DRAIN),
                                      s_op(S_STEP, S_CLOSE), recv(), recv()], 1, 0),
        # The server closes with the client's ring bytes unread: a reset.
        "close_reset": client_seed([attach, s_op(C_SEND, 1000), s_op(S_PUBLISH, 100),
                                    s_op(S_STEP, S_CLOSE), recv(50), recv(), recv(),
                                    s_op(C_SEND, 10), recv()]),
        # The server shuts its direction, then closes with a reset.
        "shutdown_reset": client_seed([attach, s_op(S_PUBLISH, 10), s_op(S_STEP, S_SHUT),
                                       recv(), recv(), s_set("state", ST_RESET, SET_OR),
                                       recv(), s_op(C_CTL, CTL_SHUT)]),
        # Hostile: wake-ups closed by a server that never attached.
        "tokens_closed_unattached": client_seed([s_set("tokens_closed", 1), recv(), recv()]),
        # Hostile: a tail far ahead of the head, a head moved back, a revert point outside.
        "tail_out_of_range": client_seed([attach, s_set("s2c.tail", 1 << 40), recv(),
                                          recv(), s_op(C_SEND, 10)]),
        "head_back": client_seed([attach, s_op(C_SEND, 5000), s_set("c2s.head", 1 << 20),
                                  s_op(C_SEND, 5000), recv()]),
        "ring_end_outside": client_seed([attach, s_op(S_PUBLISH, 100),
                                         s_set("revert_ring_end", 1 << 30),
                                         s_set("tx_reverted", 1), recv(), recv()]),
        # Hostile: wake-ups counted that never came, then the client closes.
        "tokens_owed": client_seed([attach, recv(), s_set("tokens_sent", 1 << 20)]),
        # Hostile: ATTACHED with DECLINED; a CLOSED side before the attach.
        "declined": client_seed([s_set("state", ST_ATTACHED | ST_DECLINED), recv(),
                                 s_op(C_SEND, 100), s_op(S_TCP, 10), recv()]),
        # A revert position past the wake-ups sent: a non-blocking receive waited 5 s
        # for them (discard_tcp) and returned ETIMEDOUT.
        "regress_revert_wait_nonblock": client_seed([attach, s_set("revert_tcp_pos", 100),
                                                     s_set("tx_reverted", 1), recv(),
                                                     recv()]),
        # A server that never attached "moved back": the client skipped its data bytes
        # as wake-ups up to the revert position.
        "regress_revert_unattached": client_seed([s_op(S_TCP, 100),
                                                  s_set("revert_tcp_pos", 50),
                                                  s_set("tx_reverted", 1), recv(), recv()]),
    }
    return seeds


OFFER_MAGIC = 0x0031464F534C55  # "ULSOF1"
O_PENDING, O_STAMP, O_MADE, O_DONE, O_WAITING, O_SHRINK = range(6)
O_HEADER, O_SIZE_ZERO, O_SIZE_HALF, O_SIZE_MORE = 0x01, 0x02, 0x04, 0x06
O_GROUP, O_NOW, O_UID, O_MAGIC, O_VERSION = 0x08, 0x10, 0x20, 0x40, 0x80
O_VALID = O_UID | O_MAGIC | O_VERSION


def o_op(kind, port=8080, value=0):
    return struct.pack("<BHI", kind, port, value & 0xFFFFFFFF)


def offers_seed(flags, ops, version=1, slots=1024, uid=0, magic=OFFER_MAGIC):
    return bytes([flags]) + struct.pack("<IIIIQ", version, slots, uid, 0, magic) + b"".join(ops)


def offers_seeds():
    cycle = [o_op(O_MADE), o_op(O_WAITING), o_op(O_MADE), o_op(O_DONE), o_op(O_WAITING),
             o_op(O_DONE), o_op(O_WAITING), o_op(O_DONE), o_op(O_WAITING, 8081)]
    return {
        # A board as the module makes it: counted, taken back, never below zero.
        "valid_cycle": offers_seed(O_VALID, cycle),
        # A new file (zeros) and one that is short: the module fills and grows them.
        "new_file": offers_seed(0, cycle),
        "short_file": offers_seed(O_SIZE_HALF, cycle),
        "empty_file": offers_seed(O_SIZE_ZERO, cycle),
        "long_file": offers_seed(O_VALID | O_SIZE_MORE, cycle),
        # Stamps: fresh, 10 s old, 11 s old, from the future, never.
        "stamps": offers_seed(O_VALID | O_NOW, [
            o_op(O_PENDING, value=3), o_op(O_STAMP, value=0), o_op(O_WAITING),
            o_op(O_STAMP, value=-10), o_op(O_WAITING), o_op(O_STAMP, value=-11),
            o_op(O_WAITING), o_op(O_STAMP, value=100), o_op(O_WAITING),
            o_op(O_PENDING, value=1), o_op(O_STAMP, value=0), o_op(O_WAITING)]),
        # A count at its top wraps with the next offer; one taken back at zero stays.
        "pending_top": offers_seed(O_VALID, [o_op(O_PENDING, value=0xFFFFFFFF), o_op(O_MADE),
                                             o_op(O_WAITING), o_op(O_DONE), o_op(O_DONE)]),
        # Boards the module leaves alone: writable by the group, other layouts.
        "group_writable": offers_seed(O_VALID | O_GROUP, cycle),
        "other_magic": offers_seed(O_HEADER | O_UID | O_VERSION, cycle, magic=0x1234),
        "other_version": offers_seed(O_HEADER | O_UID | O_MAGIC, cycle, version=2),
        "other_user": offers_seed(O_HEADER | O_MAGIC | O_VERSION, cycle, uid=4242),
        # Shrunk under the module's mapping: cut, and a server looks from then on.
        "shrunk": offers_seed(O_VALID, [o_op(O_MADE), o_op(O_SHRINK, value=100), o_op(O_WAITING),
                                        o_op(O_MADE), o_op(O_DONE), o_op(O_WAITING, 1)]),
        "shrunk_empty": offers_seed(O_VALID, [o_op(O_MADE), o_op(O_SHRINK, value=0),
                                              o_op(O_WAITING), o_op(O_MADE)]),
    }


def main():
    write("fuzz_ring", ring_seeds())
    write("fuzz_fabric_msg", fabric_msg_seeds())
    write("fuzz_fabric_dir", fabric_dir_seeds())
    write("fuzz_segment", segment_seeds())
    write("fuzz_close_revert", close_revert_seeds())
    write("fuzz_stat", stat_seeds())
    write("fuzz_client", client_seeds())
    write("fuzz_offers", offers_seeds())


if __name__ == "__main__":
    main()
