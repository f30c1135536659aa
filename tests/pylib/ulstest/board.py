"""A user's offer board as the tests read it (docs/protocol.md, section 3): a 64-byte
header, then 1,024 slots of two 32-bit words, `pending` and `stamp` (CLOCK_MONOTONIC
seconds + 1 at the slot's last offer), the slot of a port being the top 10 bits of
port * 0x9e3779b1. A server looks for a segment only while its port's slot has an offer
pending that is at most FRESH_S seconds old."""

import math
import os
import struct
import time
from pathlib import Path

HEADER = 64
FRESH_S = 10


def slot_of(port):
    return ((int(port) * 0x9E3779B1) & 0xFFFFFFFF) >> 22


def read_slot(port, uid=None):
    """(pending, stamp) of PORT's slot on UID's board (this user's by default); (0, 0)
    where the user has no board."""
    path = Path(f"/dev/shm/ulsock-offers.{os.getuid() if uid is None else uid}")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return (0, 0)
    return struct.unpack_from("=II", data, HEADER + 8 * slot_of(port))


def now_stamp():
    """What a stamp counted now would be (time.monotonic() is CLOCK_MONOTONIC)."""
    return math.floor(time.monotonic()) + 1


def quiet_since(port, stamp):
    """Did no offer to a port of PORT's slot count from FRESH_S seconds before STAMP
    (now_stamp() taken earlier) to now? Then no server of such a port saw one waiting in
    that time: every connection it accepted was kept on kernel TCP without a look. Other
    tests' clients offer to ports of the same slot now and then (1 slot in 1,024)."""
    return read_slot(port)[1] < stamp - FRESH_S - 1


def counts_before_offer(port):
    """The counts PORT's slot may hold just before a new offer adds its 1, read now: what
    it holds, or 0 where its stamp has faded (the offer restarts the count: protocol.md
    section 3); both within a second of fading."""
    pending, stamp = read_slot(port)
    age = now_stamp() - stamp
    if age < FRESH_S:
        return {pending}
    return {0} if age > FRESH_S + 1 else {0, pending}
