"""Two network-namespace hosts for the fabric transport's tests: a veth pair the test
creates, on its own addresses (10.233.N.0/24) only, `ulsock fabricd` in the server's
namespace, and the environment that lets ulsock processes there use libfabric's tcp
provider between them.  Used by test_fabric*.py."""

import re

from conftest import ULSOCK_BIN, run_net_client, server_conns, start_net_server

PROVIDER = "tcp;ofi_rxm"
# libfabric 1.17's fork of the tcp provider with its own FI_EP_RDM (fi_net(7)), ordered and
# without an eager limit: the one where the fabric uses bulk slots (protocol.md 9.2).
NET_PROVIDER = "net"
FABRIC_LINE = re.compile(r"fd=\d+ fabric: sent (\d+) bytes on TCP and (\d+) on the fabric, "
                         r"received (\d+) on TCP and (\d+) on the fabric; "
                         r"wake-ups: (\d+) asked, (\d+) received, (\d+) sent; "
                         r"offers read: (\d+) bytes; lent: (\d+) bytes, (\d+) moved; "
                         r"written: (\d+) bytes")

_subnet = [0]


class Hosts:
    """Two namespace hosts, server S (.1) and client C (.2), and fabricd on S."""

    def __init__(self, uls, netns, peers=None, fabricd=True, provider=PROVIDER):
        _subnet[0] += 1
        net = f"10.233.{_subnet[0] % 250}"
        self.uls = uls
        self.s, self.c = netns(), netns()
        self.sdev, self.cdev = netns.veth(self.s, f"{net}.1/24", self.c, f"{net}.2/24")
        self.saddr, self.caddr = f"{net}.1", f"{net}.2"
        self.env = {"ULSOCK_FABRIC_PEERS": peers if peers is not None else f"{net}.0/24",
                    "ULSOCK_FABRIC_PROVIDER": provider}
        self.fabricd = self.start_fabricd(self.s) if fabricd else None

    def start_fabricd(self, ns):
        return self.uls.start([ULSOCK_BIN, "fabricd", "--foreground"], name="fabricd",
                              ulsock=False, wrap=ns.prefix, ready="listening")

    def server(self, *args, ulsock=True, env=None):
        return start_net_server(self.uls, "--addr", self.saddr, *args, ulsock=ulsock,
                                env={**self.env, **(env or {})}, wrap=self.s.prefix)

    def client(self, port, *args, ulsock=True, env=None, **kw):
        return run_net_client(self.uls, port, "--addr", self.saddr, *args, ulsock=ulsock,
                              env={**self.env, **(env or {})}, wrap=self.c.prefix, **kw)


def fabric_counts(proc):
    """(tcp_tx, fabric_tx, tcp_rx, fabric_rx) summed over PROC's fabric connections."""
    tot = [0, 0, 0, 0]
    for m in FABRIC_LINE.finditer(proc.log_text()):
        for i in range(4):
            tot[i] += int(m[i + 1])
    return tuple(tot)


def wake_counts(proc):
    """(asked, received, sent) wake-ups summed over PROC's fabric connections: SLEEPs it
    sent, wake-up bytes it read, wake-up bytes it sent for the peer's SLEEPs (9.7)."""
    tot = [0, 0, 0]
    for m in FABRIC_LINE.finditer(proc.log_text()):
        for i in range(3):
            tot[i] += int(m[i + 5])
    return tuple(tot)


def offers_read(proc):
    """Bytes PROC read from its peers' memory, over its fabric connections (protocol.md
    9.6, AVAIL)."""
    return sum(int(m[8]) for m in FABRIC_LINE.finditer(proc.log_text()))


def lends(proc):
    """(lent, moved): bytes PROC's blocking sends lent from its program's memory and its
    peers took there, and bytes it moved into its send buffer instead when a peer did not
    take them in time (protocol.md 9.6, LEND and MOVED)."""
    tot = [0, 0]
    for m in FABRIC_LINE.finditer(proc.log_text()):
        tot[0] += int(m[9])
        tot[1] += int(m[10])
    return tuple(tot)


def written(proc):
    """Bytes PROC wrote into its peers' receive rings, over its fabric connections
    (protocol.md 9.14, WROTE)."""
    return sum(int(m[11]) for m in FABRIC_LINE.finditer(proc.log_text()))


def all_ok(server, conns):
    res = server_conns(server)
    assert len(res) == conns and all(r["result"] == "ok" for r in res), server.output()
