"""A request/response protocol over asyncio streams, for tests/programs/test_asyncio.py.

Run by Debian's /usr/bin/python3 (standard library only), plain or under `ulsock run`;
it never imports the project's code.

    asyncio_frames.py server --port P --conns N [--file PATH]
    asyncio_frames.py client --port P --conns N --requests R --max-frame B --seed S
                             [--file PATH --file-requests F]

Requests, big-endian: op (1 byte), payload length (4), tag (8), payload.
  E  echo: the payload comes back.
  F  file: the payload is offset and count (8 + 8); the server sends that slice of its
     --file with loop.sendfile(fallback=False), which on a selector loop is os.sendfile
     on the socket (no copy through Python, or an error).
Responses: length (4), tag (8), SHA-256 of the body (32), body. The client keeps up to
all of a connection's requests in flight (a writer and a reader task per connection)
and checks every tag, digest and byte against what it expects.

The server exits after --conns connections: status 0 and a line
"SERVED conns= requests= rx= tx= sendfile_calls= sendfile_bytes= errors=0" when every
one ended cleanly, 1 otherwise. The client exits 0 with "OK conns= requests= tx= rx=",
1 with "FAIL ..." lines.
"""

import argparse
import asyncio
import hashlib
import os
import random
import struct
import sys

REQ = struct.Struct("!cIQ")
RESP = struct.Struct("!IQ32s")
SLICE = struct.Struct("!QQ")

stats = {"conns": 0, "requests": 0, "rx": 0, "tx": 0, "sendfile_calls": 0,
         "sendfile_bytes": 0, "errors": 0}

# Count what os.sendfile really moves: asyncio's selector loop calls it by module
# attribute, so this wrapper sees every call of loop.sendfile's native path.
_os_sendfile = os.sendfile


def counting_sendfile(out_fd, in_fd, offset, count):
    n = _os_sendfile(out_fd, in_fd, offset, count)
    stats["sendfile_calls"] += 1
    stats["sendfile_bytes"] += n
    return n


os.sendfile = counting_sendfile


def read_slice(path, offset, count):
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(count)


async def serve_file(writer, path, tag, offset, count):
    data = read_slice(path, offset, count)
    if len(data) != count:
        raise ValueError("slice %d+%d is past the end of %s" % (offset, count, path))
    writer.write(RESP.pack(count, tag, hashlib.sha256(data).digest()))
    await writer.drain()
    loop = asyncio.get_running_loop()
    with open(path, "rb") as f:
        sent = await loop.sendfile(writer.transport, f, offset, count, fallback=False)
    if sent != count:
        raise ValueError("loop.sendfile sent %d of %d bytes" % (sent, count))
    stats["tx"] += RESP.size + count


async def handle(reader, writer, args, done):
    try:
        while True:
            try:
                head = await reader.readexactly(REQ.size)
            except asyncio.IncompleteReadError as e:
                if e.partial:
                    raise
                break  # a clean end between requests
            op, length, tag = REQ.unpack(head)
            payload = await reader.readexactly(length)
            stats["requests"] += 1
            stats["rx"] += REQ.size + length
            if op == b"E":
                writer.write(RESP.pack(length, tag, hashlib.sha256(payload).digest()))
                writer.write(payload)
                stats["tx"] += RESP.size + length
                await writer.drain()
            elif op == b"F" and args.file:
                offset, count = SLICE.unpack(payload)
                await serve_file(writer, args.file, tag, offset, count)
            else:
                raise ValueError("unknown request %r" % op)
        writer.close()
        await writer.wait_closed()
    except Exception as e:  # every failure counts; the connection is dropped
        stats["errors"] += 1
        print("ERR server: %s: %s" % (type(e).__name__, e), flush=True)
        writer.transport.abort()
    finally:
        stats["conns"] += 1
        if stats["conns"] >= args.conns:
            done.set()


async def server(args):
    done = asyncio.Event()
    srv = await asyncio.start_server(lambda r, w: handle(r, w, args, done),
                                     "127.0.0.1", args.port, backlog=256)
    print("READY port=%d pid=%d" % (args.port, os.getpid()), flush=True)
    async with srv:
        await done.wait()
    print("SERVED " + " ".join("%s=%d" % kv for kv in stats.items()), flush=True)
    return 0 if stats["errors"] == 0 else 1


def frame_sizes(rng, count, max_frame):
    """Mostly small frames, some large ones, the largest always once."""
    sizes = [max_frame]
    while len(sizes) < count:
        kind = rng.random()
        if kind < 0.6:
            sizes.append(rng.randint(0, 512))
        elif kind < 0.9:
            sizes.append(rng.randint(513, 65536))
        else:
            sizes.append(rng.randint(65537, max_frame))
    rng.shuffle(sizes)
    return sizes


def plan(args, k, file_data):
    """Connection k's requests: [(op, payload, expected body)]."""
    rng = random.Random(args.seed * 1000003 + k)
    reqs = []
    for size in frame_sizes(rng, args.requests, args.max_frame):
        body = rng.randbytes(size)
        reqs.append((b"E", body, body))
    for _ in range(args.file_requests):
        offset = rng.randrange(0, len(file_data))
        count = rng.randint(1, len(file_data) - offset)
        reqs.append((b"F", SLICE.pack(offset, count), file_data[offset:offset + count]))
    rng.shuffle(reqs)
    return reqs


async def one_conn(args, k, file_data, totals):
    reqs = plan(args, k, file_data)
    reader, writer = await asyncio.open_connection("127.0.0.1", args.port)

    async def send_all():
        for tag, (op, payload, _) in enumerate(reqs):
            writer.write(REQ.pack(op, len(payload), tag) + payload)
            totals["tx"] += REQ.size + len(payload)
            await writer.drain()

    async def receive_all():
        for tag, (op, _, want) in enumerate(reqs):
            length, got_tag, digest = RESP.unpack(await reader.readexactly(RESP.size))
            if got_tag != tag or length != len(want):
                raise ValueError("response %d: tag %d, %d bytes (want %d bytes)"
                                 % (tag, got_tag, length, len(want)))
            body = await reader.readexactly(length)
            totals["rx"] += RESP.size + length
            if digest != hashlib.sha256(want).digest():
                raise ValueError("response %d (%s): the server's digest differs" % (tag, op))
            if body != want:
                first = next(i for i, (a, b) in enumerate(zip(body, want)) if a != b)
                raise ValueError("response %d (%s): byte %d of %d differs"
                                 % (tag, op, first, length))

    try:
        await asyncio.gather(send_all(), receive_all())
        writer.write_eof()
        if await reader.read(1) != b"":
            raise ValueError("bytes after the last response")
        totals["requests"] += len(reqs)
    except Exception as e:
        totals["failed"] += 1
        print("FAIL conn=%d: %s: %s" % (k, type(e).__name__, e), flush=True)
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass


async def client(args):
    file_data = b""
    if args.file_requests:
        with open(args.file, "rb") as f:
            file_data = f.read()
    totals = {"requests": 0, "tx": 0, "rx": 0, "failed": 0}
    await asyncio.wait_for(asyncio.gather(*(one_conn(args, k, file_data, totals)
                                            for k in range(args.conns))), args.timeout)
    word = "OK" if totals["failed"] == 0 else "FAIL"
    print("%s conns=%d failed=%d requests=%d tx=%d rx=%d" % (
        word, args.conns, totals["failed"], totals["requests"], totals["tx"], totals["rx"]),
        flush=True)
    return 0 if totals["failed"] == 0 else 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--conns", type=int, default=1)
    p.add_argument("--requests", type=int, default=10)
    p.add_argument("--max-frame", type=int, default=1 << 20)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--file")
    p.add_argument("--file-requests", type=int, default=0)
    p.add_argument("--timeout", type=float, default=60)
    args = p.parse_args()
    if args.file_requests and not args.file:
        p.error("--file-requests needs --file")
    sys.exit(asyncio.run(server(args) if args.role == "server" else client(args)))


if __name__ == "__main__":
    main()
