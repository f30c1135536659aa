"""Between hosts, the socket calls a program makes on a fabric connection (docs/protocol.md,
section 9): readiness (poll, select, epoll level- and edge-triggered and one-shot, with
kernel descriptors in the same set), the seeds' tools (ulsock-bench, ulflow) across two
hosts, libfabric loaded only by processes that use it, and odd call shapes (peek,
MSG_WAITALL, many iovecs, 1-byte sendmsg, one 4 MiB send, FIONREAD, four threads sending
records at once, SO_RCVLOWAT).

Two network namespaces joined by a veth pair stand for the hosts (fabric_hosts.Hosts),
with fabricd in the server's.  Both ends always run under ulsock, and every connection
that should be on the fabric is checked to be so on both sides, and to have carried its
bytes there (the close line's counters).

The calls are tests/helpers/fabric_calls: one process per host, a data connection on an
allow-listed port (the fabric) and a control connection on another port, which stays on
kernel TCP ('peer not allow-listed'): it orders the two halves of a case and is the kernel
descriptor of the mixed readiness sets.

Not covered here, on purpose (limits of this cut): a switched connection used by a fork
child, carried over exec or sent with SCM_RIGHTS (it cannot move back to TCP yet),
providers without a wait fd, link-down detection.

Skips where namespaces cannot be made (not root)."""

import json
import os
import random
import re
import shutil
import time
from pathlib import Path

import pytest

from conftest import BUILD, PLAIN, expect_paths, run_net_client
from fabric_hosts import FABRIC_LINE, NET_PROVIDER, PROVIDER, Hosts, wake_counts
from ulstest.logs import PATH_LINE, matches

CASES_READY = [f"{m}_{c}" for m in ("poll", "select", "epoll")
               for c in ("later", "full", "eof_shut", "eof_close")] + [
    "epoll_et_read", "epoll_et_write", "epoll_oneshot", "read_later"]
CASES_HUP = ["poll_hup", "epoll_hup"]
CASES_DATA = ["peek", "waitall", "iov", "sendmsg1", "big_send", "fionread", "threads_records",
              "rcvlowat", "shut_rd"]

pytestmark = pytest.mark.skipif(PLAIN, reason="ULSOCK_TEST_PLAIN=1: the fabric needs ulsock")


class FabricHosts(Hosts):
    """Hosts whose allow-list holds one port of the server, PORT; CTL, another port of the
    server, is not allow-listed."""

    def __init__(self, uls, netns, provider=PROVIDER):
        super().__init__(uls, netns, provider=provider)
        self.port = random.randint(20000, 29999)
        self.ctl = self.port + 1
        self.env["ULSOCK_FABRIC_PEERS"] = f"{self.saddr.rsplit('.', 1)[0]}.0/24:{self.port}"


@pytest.fixture
def hosts(uls, netns):
    return FabricHosts(uls, netns)


def fabric_lines(proc):
    """(tcp_tx, fabric_tx, tcp_rx, fabric_rx) of each fabric connection PROC closed."""
    return [tuple(int(m[i]) for i in range(1, 5)) for m in FABRIC_LINE.finditer(proc.log_text())]


def check_split(proc, port, local):
    """PROC's connection on PORT (its local port if LOCAL, else the peer's) is on the
    fabric, the others on TCP as not allow-listed; returns the data connection's counters."""
    lines = proc.paths()
    data = [ln for ln in lines if (ln.local_port if local else ln.peer_port) == port]
    other = [ln for ln in lines if ln not in data]
    ctx = f"\n{proc.describe()}"
    assert len(data) == 1 and data[0].path == "fabric", f"{proc.name}: {data}" + ctx
    assert other and all(ln.path == "kernel" and "not allow-listed" in ln.reason
                         for ln in other), f"{proc.name}: {other}" + ctx
    counts = fabric_lines(proc)
    assert len(counts) == 1, f"{proc.name}: fabric close lines {counts}" + ctx
    return counts[0]


def await_fabric(uls, procs, port, timeout=20):
    """Waits until `ulsock stat` shows each of PROCS with its connection on PORT on the
    fabric: the handshake has ended at both ends. Gives up quietly after TIMEOUT (the
    checks that follow then say what went wrong)."""
    deadline = time.monotonic() + timeout
    want = {p.pid for p in procs}
    while time.monotonic() < deadline:
        done = {e["pid"] for e in uls.stat() if e["path"] == "fabric" and
                any(e[k].endswith(":%d" % port) for k in ("local", "peer"))}
        if want <= done:
            return
        time.sleep(0.05)


def run_pair(hosts, case, timeout=30):
    """Runs CASE's server half in the server's namespace and its client half in the
    client's; both must pass.  Between the greetings, both wait until the handshake has
    ended at both ends.  Returns (server, client) Procs."""
    helper = hosts.uls.helper("fabric_calls")
    common = ["--addr", hosts.saddr, "--port", str(hosts.port), "--ctl-port", str(hosts.ctl),
              "--go-stdin", "1"]
    server = hosts.uls.start([helper, case, "--role", "server", *common], name="server",
                             env=hosts.env, wrap=hosts.s.prefix, ready=r"READY port=",
                             stdin=True)
    client = hosts.uls.start([helper, case, "--role", "client", *common], name="client",
                             env=hosts.env, wrap=hosts.c.prefix, stdin=True)
    for p in (server, client):
        p.wait_for(r"^GREETED$")
    await_fabric(hosts.uls, (server, client), hosts.port)
    for p in (server, client):
        p.send_line()
    client.wait(timeout=timeout)
    server.wait(timeout=timeout)
    for p in (server, client):
        assert f"calls: PASS {case}" in p.output(), p.describe()
    return server, client


def check_on_fabric(server, client, port):
    """The data connection was on the fabric at both ends and, past the greeting byte each
    way, carried every byte there."""
    s = check_split(server, port, local=True)
    c = check_split(client, port, local=False)
    for name, (ttx, ftx, trx, frx) in (("server", s), ("client", c)):
        assert ttx <= 1 and trx <= 1, f"{name}: bytes on TCP past the greeting: {s} {c}"
        assert ftx >= 1 and frx >= 1, f"{name}: nothing on the fabric: {s} {c}"
    # What one side sent on the fabric, the other received there.
    assert s[1] == c[3] and c[1] == s[3], (s, c)


def test_case_list(uls):
    """The helper has exactly the cases this suite runs."""
    proc = uls.run([uls.helper("fabric_calls"), "list"], name="list", ulsock=False)
    assert sorted(proc.output().split()) == sorted(CASES_READY + CASES_HUP + CASES_DATA)


@pytest.mark.parametrize("case", CASES_READY)
def test_readiness(hosts, case):
    """poll, select and epoll on a fabric connection, in one set with a pipe and a kernel
    TCP connection: a sleeper woken by data that comes later (only the fabric descriptor
    reports), a writer blocked on a full window woken by POLLOUT/EPOLLOUT once the peer
    reads (every byte verified), EOF readiness (POLLIN|POLLRDHUP, EPOLLRDHUP) after the
    peer's SHUT_WR and after its close; epoll edge-triggered (one report per arrival, none
    after a partial read) and EPOLLONESHOT (none until re-armed; re-arming reports what is
    pending).  See the cases in tests/helpers/fabric_calls.c."""
    server, client = run_pair(hosts, case)
    check_on_fabric(server, client, hosts.port)


@pytest.mark.parametrize("case", CASES_HUP)
def test_hup_both_shut(hosts, case):
    """After both directions are shut, poll and epoll report POLLHUP/EPOLLHUP."""
    server, client = run_pair(hosts, case)
    check_on_fabric(server, client, hosts.port)


@pytest.mark.parametrize("case", CASES_DATA)
def test_call_shapes(hosts, case):
    """Byte-exact streams through odd call shapes on the fabric: MSG_PEEK (across fabric
    messages, then reads of the same bytes), MSG_WAITALL of 1 MiB (four connection windows)
    over 1,000-byte sends, readv/writev of 1,024 uneven iovecs each way, 20,000 one-byte
    sendmsg calls, one blocking 4 MiB send() read back in small reads, FIONREAD equal to
    what the next read returns (1 byte to 100,000), four threads' 3,000-byte records, each
    whole and in order, SO_RCVLOWAT 10 in readiness and in a blocking recv, and reads after
    SHUT_RD (what was queued and what came later, then 0 at once)."""
    server, client = run_pair(hosts, case)
    check_on_fabric(server, client, hosts.port)


@pytest.mark.parametrize("case", ["big_send", "fionread", "iov", "poll_full", "epoll_et_write"])
def test_bulk_slots(uls, netns, case):
    """The same cases on the net provider, where DATA longer than 8 KiB travels in bulk
    slots of 64 KiB (protocol.md 9.2): a full window of them, reads of every size across
    them, and readiness while the window fills and empties."""
    hosts = FabricHosts(uls, netns, provider=NET_PROVIDER)
    server, client = run_pair(hosts, case)
    check_on_fabric(server, client, hosts.port)


@pytest.mark.parametrize("case", ["poll_later", "select_later", "epoll_later", "read_later",
                                  "epoll_oneshot", "poll_full", "epoll_et_write", "waitall",
                                  "big_send", "rcvlowat"])
def test_wakeups_without_wait_fd(uls, netns, case):
    """On shm, whose completion queue has no wait descriptor, with the efficient profile
    (no spin: every wait sleeps): a sleeper sends SLEEP and the peer answers with one byte
    on TCP once the data or window it waits for is on its way (protocol.md 9.7), in
    recv, send, poll, select and epoll. Every case passes, every byte on the fabric;
    wake-up bytes never outnumber the SLEEPs they answer, and the cases where data comes
    later asked for wake-ups."""
    hosts = FabricHosts(uls, netns, provider="shm")
    hosts.env["ULSOCK_PROFILE"] = "efficient"
    server, client = run_pair(hosts, case)
    check_on_fabric(server, client, hosts.port)
    s, c = wake_counts(server), wake_counts(client)
    for mine, peer in ((s, c), (c, s)):
        assert mine[1] <= mine[0] and peer[2] <= mine[0], (s, c)
    if case.endswith("_later"):
        assert s[0] + c[0] >= 1, (s, c)


# ------------------------------------------------------------- libfabric mapped or not


def maps_libfabric(proc):
    """Whether PROC or a process under it maps libfabric now (it must be alive)."""
    assert proc.alive, proc.describe()
    pids, found = [proc.pid], []
    while pids:
        pid = pids.pop()
        try:
            if "libfabric" in Path(f"/proc/{pid}/maps").read_text():
                found.append(pid)
            for task in os.listdir(f"/proc/{pid}/task"):
                kids = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
                pids += [int(k) for k in kids]
        except OSError:
            continue
    return bool(found)


def held_pair(h, addr, server_ns):
    """A net_server on ADDR in SERVER_NS and a net_client in the client's namespace holding
    its one connection open (--hold --pause-held), after 1.5 s in poll() so that a fabric
    handshake has ended before the exchange."""
    server, port = h.uls.server([h.uls.helper("net_server"), "--port", "0", "--addr", addr,
                                 "--mode", "echo", "--max-conns", "1"], name="server",
                                env=h.env, wrap=server_ns.prefix)
    client = h.uls.start([h.uls.helper("net_client"), "--port", str(port), "--addr", addr,
                          "--mode", "echo", "--conns", "1", "--bytes", "64K", "--hold",
                          "--settle", "1500", "--pause-held"], name="client", env=h.env,
                         wrap=h.c.prefix,
                         stdin=True, ready="HELD")
    return server, client, port


def release(server, client):
    client.send_line()
    client.wait()
    server.wait()


@pytest.mark.parametrize("kind", ["loopback", "not_allow_listed", "fabric"])
def test_libfabric_mapped_only_when_used(uls, netns, kind):
    """With ULSOCK_FABRIC_PEERS set, a process whose only connection is a loopback one
    (shared memory) or one to a peer outside the allow-list never maps libfabric: checked
    in /proc/PID/maps of both ends while the connection is open.  The control: the two
    ends of a fabric connection map it."""
    h = Hosts(uls, netns, peers="10.9.9.0/24" if kind == "not_allow_listed" else None)
    if kind == "loopback":
        server, client, port = held_pair(h, "127.0.0.1", h.c)
        path = "shm"
    else:
        server, client, port = held_pair(h, h.saddr, h.s)
        path = "fabric" if kind == "fabric" else "kernel"
    for p in (client, server):
        assert maps_libfabric(p) == (kind == "fabric"), f"{kind}: {p.describe()}"
    release(server, client)
    expect_paths(client, path, count=1, peer_port=port)
    expect_paths(server, path, count=1, local_port=port)
    if kind == "not_allow_listed":
        lines = client.paths() + server.paths()
        assert all("not allow-listed" in ln.reason for ln in lines), lines


# ------------------------------------------------------------- the seeds' tools across hosts

BENCH = BUILD / "bin" / "ulsock-bench"
ULFLOW = BUILD / "bin" / "ulflow"


def test_bench_across_hosts(hosts):
    """ulsock-bench --server in the server's namespace and --client in the client's, both
    under ulsock: the server reads each connection's hello (on the fabric) and then forks
    a child per session, so each connection moves back to kernel TCP in place at the fork
    (no TAKEOVER yet: README, limitations), and the client's resend of what the server
    had not read goes out while it waits for the answer. The short latency and bandwidth
    run completes with every row verified."""
    hosts.env["ULSOCK_FABRIC_PEERS"] = f"{hosts.saddr.rsplit('.', 1)[0]}.0/24"
    server = hosts.uls.start([BENCH, "--server", f"{hosts.saddr}:0", "--timeout", "3"],
                             name="bench-server", env=hosts.env, wrap=hosts.s.prefix,
                             ready=r"listening on port (\d+)")
    port = int(server.ready.group(1))
    client = hosts.uls.run([BENCH, "latency", "bw", "--client", f"{hosts.saddr}:{port}",
                            "--sizes", "64,64K", "--time", "0.1", "--iters", "1000",
                            "--mode", "block", "--timeout", "3", "--json-lines"],
                           name="bench-client", env=hosts.env, wrap=hosts.c.prefix,
                           timeout=60)
    rows = [ln for ln in client.output().splitlines() if ln.startswith("{")]
    tests = {re.search(r'"test":\s*"(\w+)"', r)[1] for r in rows}
    assert {"latency", "bw"} <= tests, client.output()
    assert all('"verified":true' in r for r in rows), client.output()
    log = client.log_text()
    assert "path=fabric" in log, client.describe()
    assert "moved back to kernel TCP (the peer asked)" in log, client.describe()
    server.stop()
    assert "moved back to kernel TCP" in server.log_text(), server.describe()


def test_bench_across_hosts_inline(hosts):
    """ulsock-bench --server --inline serves each session in its own process: every
    connection of the latency, bandwidth and hotspot rows stays on the fabric from the
    hello to the trailer (no move back to kernel TCP on either side), and every row is
    verified byte for byte against the server's counts."""
    hosts.env["ULSOCK_FABRIC_PEERS"] = f"{hosts.saddr.rsplit('.', 1)[0]}.0/24"
    server = hosts.uls.start([BENCH, "--server", f"{hosts.saddr}:0", "--inline",
                              "--timeout", "5"],
                             name="bench-server", env=hosts.env, wrap=hosts.s.prefix,
                             ready=r"listening on port (\d+)")
    port = int(server.ready.group(1))
    client = hosts.uls.run([BENCH, "latency", "bw", "hotspot", "--client",
                            f"{hosts.saddr}:{port}", "--sizes", "64,64K", "--clients", "1,4",
                            "--time", "0.2", "--iters", "1000", "--mode", "block",
                            "--timeout", "5", "--json-lines"],
                           name="bench-client", env=hosts.env, wrap=hosts.c.prefix,
                           timeout=90)
    rows = [json.loads(ln) for ln in client.output().splitlines() if ln.startswith("{")]
    assert {r["test"] for r in rows} == {"latency", "bw", "hotspot"}, client.output()
    for r in rows:
        assert r["verified"] is True, r
        assert r["bytes_sent"] == r["server_bytes_received"] > 0, r
        assert r["bytes_received"] == r["server_bytes_sent"], r
    server.stop()
    for side in (client, server):
        paths = matches(side.log_text(), PATH_LINE)
        assert paths and all(p["path"] == "fabric" for p in paths), side.describe()
        assert "moved back to kernel TCP" not in side.log_text(), side.describe()
    # latency 64 B and 64 KiB, bw the same, hotspot 1 and 4 clients: 1 + 1 + 1 + 1 + 1 + 4
    # connections, each logged once by each side.
    assert len(matches(client.log_text(), PATH_LINE)) >= 9, client.describe()


# ------------------------------------------------------------ a real program across hosts

REDIS_PORT = 6379  # the namespaces are the test's own: any port is free


def _redis(hosts):
    """redis-server (Debian's, no persistence, so no forks) in S under ulsock; returns it."""
    for prog in ("redis-server", "redis-cli", "redis-benchmark"):
        if not shutil.which(prog):
            pytest.skip(f"{prog} not installed (scripts/install-deps.sh)")
    return hosts.uls.start(["redis-server", "--bind", hosts.saddr, "--port", str(REDIS_PORT),
                            "--save", "", "--appendonly", "no", "--protected-mode", "no"],
                           name="redis-server", env=hosts.env, wrap=hosts.s.prefix,
                           ready="Ready to accept connections")


def _redis_client(hosts, name, script, ulsock):
    """sh -c SCRIPT in C (redis-cli and redis-benchmark with -h/-p filled in as $H $P)."""
    return hosts.uls.run(["sh", "-c", script], name=name, ulsock=ulsock,
                         env={**hosts.env, "H": hosts.saddr, "P": str(REDIS_PORT)},
                         wrap=hosts.c.prefix, timeout=120)


@pytest.mark.parametrize("client", ["ulsock", "plain"])
def test_redis_across_hosts(hosts, tmp_path, client):
    """Debian's redis-server in one namespace host, redis-cli and redis-benchmark in the
    other, both under ulsock: a 1 MiB binary value set three times and read back three
    times byte for byte, each redis-cli on one connection that lives past its handshake
    (-r 3 -i 0.4: a process's first fabric connection waits for libfabric to load), and
    a 2 s benchmark of SET and GET on 4 connections, all of them on the fabric; the
    benchmark's first connection (its CONFIG GET) ends before its handshake and stays on
    TCP, saying so. With a plain client, the same bytes on kernel TCP."""
    ulsock = client == "ulsock"
    hosts.env["ULSOCK_FABRIC_PEERS"] = f"{hosts.saddr.rsplit('.', 1)[0]}.0/24"
    value = random.Random(14).randbytes(1 << 20)
    (tmp_path / "value").write_bytes(value)
    server = _redis(hosts)
    cli = 'redis-cli -h "$H" -p "$P" -r 3 -i 0.4'
    put = _redis_client(hosts, "redis-set", f'{cli} -x SET big < {tmp_path / "value"}', ulsock)
    get = _redis_client(hosts, "redis-get", f'{cli} GET big > {tmp_path / "got"}', ulsock)
    got = (tmp_path / "got").read_bytes()
    assert got == (value + b"\n") * 3, (len(got), get.describe())
    bench = _redis_client(hosts, "redis-benchmark",
                          'redis-benchmark -h "$H" -p "$P" -t set,get -c 4 -n 40000 -d 100 -q',
                          ulsock)
    rates = dict(re.findall(r"(SET|GET): ([0-9.]+) requests per second", bench.output()))
    assert set(rates) == {"SET", "GET"}, bench.describe()
    server.stop()
    if not ulsock:
        spaths = matches(server.log_text(), PATH_LINE)
        assert spaths and all(p["path"] == "kernel" and p["reason"] for p in spaths), \
            server.describe()
        return
    for proc, least in ((put, 1), (get, 1), (bench, 4)):
        cpaths = matches(proc.log_text(), PATH_LINE)
        fabric = [p for p in cpaths if p["path"] == "fabric"]
        assert len(fabric) >= least, proc.describe()
        assert all(p["path"] == "fabric" or "closed before the handshake ended" in p["reason"]
                   for p in cpaths), proc.describe()


def test_ulflow_across_hosts(hosts, tmp_path):
    """ulflow's two-host layout (ulflow/tests/test_ulflow_netns.py): rank 0 (read, view and
    a stage copy) on the server's host, ranks 1 and 2 on the client's, each started as a
    launcher would, under ulsock, fabricd on both hosts.  The pipeline delivers every unit
    of work whole; connections between the hosts are on the fabric (one that closes before
    its handshake ends stays on TCP, saying so), those within the client host on shared
    memory."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "ulflow" / "tests"))
    from ulfutil import view_reports, vis_layout
    hosts.env["ULSOCK_FABRIC_PEERS"] = f"{hosts.saddr.rsplit('.', 1)[0]}.0/24"
    hosts.start_fabricd(hosts.c)
    procs = [("p0", hosts.saddr), ("p1", hosts.caddr), ("p2", hosts.caddr)]
    lay = vis_layout(tmp_path / "two.layout", procs, stages=2, copies=2,
                     placement=lambda f, n: "p1,p0" if f == "stage1" else "p2,p1",
                     coord=hosts.port + 2)
    ranks = [hosts.uls.start([ULFLOW, "worker", lay], name=f"rank{r}", wrap=ns.prefix,
                             env={**hosts.env, "SLURM_PROCID": str(r), "SLURM_NTASKS": "3"})
             for r, ns in ((0, hosts.s), (1, hosts.c), (2, hosts.c))]
    for p in ranks:
        p.wait(timeout=60)
    reps = view_reports("".join(p.output() for p in ranks))
    assert len(reps) == 7 and reps[0] == (64, 1 << 20) and reps[6] == (64, 1 << 20), reps
    lines = [ln for p in ranks for ln in p.paths()]
    # A connection that ends before its handshake does stays on TCP and says so (short
    # connections of the coordinator's start-up may); no other reason is allowed.
    short = "fabric: closed before the handshake ended"
    assert not [ln for ln in lines if ln.path == "kernel" and ln.reason != short], lines
    cross = [ln for ln in lines if ln.local.split(":")[0] != ln.peer.split(":")[0]]
    assert [ln for ln in cross if ln.path == "fabric"], lines
    assert all(ln.path in ("fabric", "kernel") for ln in cross), lines
    assert all(ln.path == "shm" for ln in lines if ln not in cross), lines
