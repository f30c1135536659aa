"""HTTP clients and files for the web server tests (test_nginx.py, test_caddy.py).

The clients are curl (downloads and uploads, one process per call, each transfer's
status, size and connection count read from its --write-out line) and wrk (a load
generator whose own counters say how many requests completed and how many failed).
Both run as an End of proglib, plain or under ulsock. Nothing here measures time.
"""

import hashlib
import json
import random
import re
import subprocess

from proglib import ULSOCK, End, Proc, require

# Sizes the servers serve: empty, one byte, a page, and a file larger than any ring
# (default 1 MiB) and any socket buffer, so that it streams through many refills.
FILES = {
    "empty.bin": 0,
    "one.bin": 1,
    "page.bin": 100 * 1024,
    "large.bin": 8 * 1024 * 1024,
}


def make_files(root, sizes=FILES, seed=20251125):
    """Writes random files of the given sizes under root; returns {name: sha256}."""
    rnd = random.Random(seed)
    sums = {}
    root.mkdir(parents=True, exist_ok=True)
    for name, size in sizes.items():
        data = rnd.randbytes(size)
        (root / name).write_bytes(data)
        sums[name] = sha256(data)
    return sums


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def file_sha256(path):
    with open(path, "rb") as f:
        return sha256(f.read())


# One line per transfer: HTTP status, bytes of body received, bytes sent in the request
# body, new connections this transfer opened. (A format that starts with @ would name a
# file to read the format from.)
WRITE_OUT = "transfer %{http_code} %{size_download} %{size_upload} %{num_connects}\\n"
WRITE_OUT_LINE = re.compile(rb"^transfer (\d{3}) (\d+) (\d+) (\d+)$", re.M)


def curl(harness, end, args, timeout=60):
    """Runs curl as end with args, in which each transfer has `-w WRITE_OUT`; returns
    [(status, size_download, size_upload, num_connects)] in transfer order."""
    require("curl")
    rc, out = harness.run(end, ["curl", "-sS", "--max-time", "30"] + args,
                          timeout=timeout, tag="curl")
    assert rc == 0, "curl %s exited %s:\n%s" % (args, rc, out[-2000:].decode("utf-8", "replace"))
    return [tuple(int(x) for x in m) for m in WRITE_OUT_LINE.findall(out)]


def get_args(base, names, out_dir, close=False):
    """curl arguments that download base/NAME into out_dir/NAME for each name, in one
    curl process: on one kept-alive connection, or one connection per transfer with
    `Connection: close`."""
    args = []
    if close:
        args += ["-H", "Connection: close"]
    for name in names:
        args += ["-o", str(out_dir / name), "-w", WRITE_OUT, "%s/%s" % (base, name)]
    return args


def check_downloads(results, names, out_dir, sums, close):
    """Every transfer returned 200 with the file's exact bytes; a kept-alive series opened
    one connection in all, a `Connection: close` series one per transfer."""
    assert len(results) == len(names), "curl reported %d transfers for %d URLs: %s" % (
        len(results), len(names), results)
    for name, (status, size, _, _) in zip(names, results):
        assert status == 200, "%s: HTTP %d" % (name, status)
        got = out_dir / name
        data = got.read_bytes() if got.exists() else b""
        assert size == len(data), "%s: curl counted %d bytes, file has %d" % (
            name, size, len(data))
        assert sha256(data) == sums[name], "%s: %d bytes, content differs from the " \
            "served file" % (name, len(data))
    connects = [r[3] for r in results]
    if close:
        assert connects == [1] * len(names), "Connection: close should open one " \
            "connection per transfer: %s" % connects
    else:
        assert connects == [1] + [0] * (len(names) - 1), "keep-alive should reuse the " \
            "first connection: %s" % connects



def check_download_series(harness, end, base, names, tmp_path, sums):
    """Every file of names from base as end, byte-exact: once over one kept-alive
    connection (into tmp_path/got-keepalive), once with a connection per request (into
    tmp_path/got-close)."""
    for close in (False, True):
        out_dir = tmp_path / ("got-close" if close else "got-keepalive")
        out_dir.mkdir()
        results = curl(harness, end, get_args(base, names, out_dir, close))
        check_downloads(results, names, out_dir, sums, close)


WRK_REQUESTS = re.compile(r"^\s*(\d+) requests in ([0-9.]+)(\w+), ([0-9.]+)(\w+) read", re.M)
WRK_SOCKET_ERRORS = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), "
                               r"timeout (\d+)")
WRK_NON2XX = re.compile(r"Non-2xx or 3xx responses: (\d+)")
UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def wrk_start(harness, end, url, threads=2, connections=16, seconds=2, close=False):
    """Starts wrk as end in the background (no Lua script); returns its Proc."""
    require("wrk")
    argv = ["wrk", "-t%d" % threads, "-c%d" % connections, "-d%ds" % seconds,
            "--timeout", "10s"]
    if close:
        argv += ["-H", "Connection: close"]
    argv.append(url)
    p = Proc(end.wrap(argv), end.env(), harness._out("wrk"))
    harness.procs.append(p)
    return p


def wrk_result(proc, body_size, seconds=2):
    """Waits for wrk and checks its own counters: requests completed, no socket errors,
    no error statuses, and at least each response's body read. Returns the request
    count."""
    rc = proc.wait(seconds + 60)
    text = proc.text()
    assert rc == 0, "wrk exited %s:\n%s" % (rc, text[-3000:])
    m = WRK_REQUESTS.search(text)
    assert m, "no request count in wrk's output:\n%s" % text
    requests = int(m[1])
    assert requests > 0, "wrk completed no request:\n%s" % text
    errors = WRK_SOCKET_ERRORS.search(text)
    assert errors is None, "wrk saw socket errors:\n%s" % text
    non2xx = WRK_NON2XX.search(text)
    assert non2xx is None, "wrk saw error statuses:\n%s" % text
    # wrk prints the bytes read with two decimals of its unit; allow for that rounding.
    read = float(m[4]) * UNITS[m[5]]
    slack = 0.01 * UNITS[m[5]]
    assert read + slack >= requests * body_size, "wrk read %s%s for %d responses of %d " \
        "bytes:\n%s" % (m[4], m[5], requests, body_size, text)
    return requests


def stat_rows(port):
    """`ulsock stat --json` rows of connections whose local or peer port is port (other
    tests may run ulsock processes of this user at the same time). A record another
    process is still filling in shows its addresses as "-"; such rows are left out."""
    out = subprocess.run([ULSOCK, "stat", "--json"], capture_output=True, timeout=30,
                         check=True).stdout
    rows = json.loads(out or b"[]")
    return [r for r in rows if port in (addr_port(r["local"]), addr_port(r["peer"]))]


def addr_port(addr):
    """'1.2.3.4:80' or '[::1]:80' -> 80; None for '-' (no address yet)."""
    head, sep, tail = addr.rpartition(":")
    return int(tail) if sep and tail.isdigit() else None


class EnvEnd(End):
    """An End whose program gets extra environment variables (HOME and the XDG
    directories of a server that writes state, say)."""

    def __init__(self, end, extra):
        super().__init__(end.name, end.accelerated, end.profile, end.log_path)
        self.extra = dict(extra)

    def env(self):
        env = super().env()
        env.update(self.extra)
        return env


def preloaded(pid):
    """Whether libulsock.so is mapped in process pid."""
    with open("/proc/%d/maps" % pid) as f:
        return "libulsock.so" in f.read()
