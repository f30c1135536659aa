"""TCP ports as the kernel lists them in /proc/net/tcp and /proc/net/tcp6.

Reading /proc rather than connecting matters twice: a harness that never runs under
ulsock may still be told to open no socket at all, and a probe connection counts as a
client (iperf3 -1 serves one, then exits)."""

import collections
import random
import socket
import time

TCP_LISTEN = "0A"  # st, the fourth field of a /proc/net/tcp line


def _tcp_sockets():
    """The fields of each TCP socket line of this network namespace, IPv4 and IPv6:
    (local port, st)."""
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 3:
                        yield int(fields[1].rsplit(":", 1)[1], 16), fields[3]
        except OSError:
            pass


def tcp_ports(listening=False):
    """The local ports of the TCP sockets of this network namespace, IPv4 and IPv6; only
    the listening ones if LISTENING."""
    return {port for port, st in _tcp_sockets() if not listening or st == TCP_LISTEN}


TCP_ESTABLISHED = "01"


def established_to(port):
    """How many sockets of this network namespace, IPv4 or IPv6, are ESTABLISHED with
    local port PORT (a server's accepted connections)."""
    return sum(1 for p, st in _tcp_sockets() if p == port and st == TCP_ESTABLISHED)


def listening_ports():
    return tcp_ports(listening=True)


def free_port(span=None):
    """A TCP port nobody uses right now.

    Without SPAN the kernel picks it: a socket is bound to 127.0.0.1:0 and closed, so the
    caller must not run under ulsock. With SPAN, (low, high), a random port in
    low <= port < high that no socket has, IPv4 or IPv6, read from /proc: no socket is
    opened."""
    if span is None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    used = tcp_ports() | set(_handed_out)
    candidates = [p for p in range(*span) if p not in used]
    assert candidates, "no free TCP port"
    port = random.choice(candidates)
    # A port handed out is bound later, if at all: the next calls (a test asking for
    # several before it starts anything) must not get it again.
    _handed_out.append(port)
    return port


_handed_out = collections.deque(maxlen=64)


def wait_listening(ports, exited, timeout, interval=0.02):
    """Waits until every port of PORTS listens. Returns "listening", or why it stopped
    waiting before: "exited" once EXITED() is true (the server died), "timeout" after
    TIMEOUT seconds."""
    want = set(ports)
    deadline = time.monotonic() + timeout
    while not want <= listening_ports():
        if exited():
            return "exited"
        if time.monotonic() > deadline:
            return "timeout"
        time.sleep(interval)
    return "listening"
