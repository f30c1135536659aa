"""`ulsock fabricd`, the fabric transport's directory service (docs/protocol.md 9.3),
driven as a real daemon in a fresh network namespace (10.213.5.1), with its clients in
another one (10.213.5.2) joined by a veth pair.

Every socket is opened by the helper tests/helpers/fabric_dir_peer (the harness opens
none): it plays a stranger writing raw bytes, a server registering its accepted socket
through the library's dir.c, the library's client state machine, and unrelated services
on the directory port.  Each of its waits is bounded (10 s)."""

import re
import signal

import pytest

from conftest import ULSOCK_BIN, require_user, user_prefix

SERVER, CLIENT = "10.213.5.1", "10.213.5.2"
DIRPORT = 62840  # the default: fabricd is started without --port
NOT_REGISTERED, TUPLE_MISMATCH = 1, 2


@pytest.fixture
def world(uls, netns):
    """(server namespace, client namespace, the running fabricd)."""
    a, b = netns(), netns()
    netns.veth(a, f"{SERVER}/24", b, f"{CLIENT}/24")
    daemon = uls.start([ULSOCK_BIN, "fabricd", "--foreground"], name="fabricd",
                       ulsock=False, wrap=a.prefix, ready=r"listening on TCP port (\d+)")
    assert int(daemon.ready.group(1)) == DIRPORT
    return a, b, daemon


def peer(uls, *args, ns, name="peer", **kw):
    """Runs the helper to completion in NS; returns its stdout."""
    proc = uls.run([uls.helper("fabric_dir_peer"), *map(str, args)], name=name,
                   ulsock=False, wrap=ns.prefix, timeout=30, **kw)
    return proc.output()


def start_peer(uls, *args, ns, name, ready=r"READY port=(\d+)"):
    return uls.start([uls.helper("fabric_dir_peer"), *map(str, args)], name=name,
                     ulsock=False, wrap=ns.prefix, ready=ready)


def kv(line):
    return dict(re.findall(r"(\w+)=(\S*)", line))


def test_stranger_gets_only_the_banner(uls, world):
    """Connect and send nothing: exactly 32 bytes of a valid BANNER, then the close (the
    3 s HELLO limit), and not one byte more."""
    a, b, _ = world
    out = peer(uls, "raw", SERVER, DIRPORT, "none", ns=b)
    assert "BANNER bytes=32 valid=1" in out, out
    assert "CLOSED bytes=0" in out, out


@pytest.mark.parametrize("kind", ["badnd", "garbage", "trailing"])
def test_bad_hello_is_closed(uls, world, kind):
    """A HELLO echoing another Nd, 64 bytes of garbage, or a valid HELLO with one byte
    after it: closed without an answer."""
    a, b, _ = world
    out = peer(uls, "raw", SERVER, DIRPORT, kind, ns=b)
    assert "BANNER bytes=32 valid=1" in out, out
    assert "CLOSED bytes=0" in out, out


def test_unregistered_tuple(uls, world):
    a, b, _ = world
    out = peer(uls, "raw", SERVER, DIRPORT, "ok", f"{CLIENT}:4000", f"{SERVER}:5000", ns=b)
    assert f"NO reason={NOT_REGISTERED}" in out, out


def test_tuple_mismatch(uls, world):
    """A HELLO claiming a client address other than the side connection's source."""
    a, b, _ = world
    out = peer(uls, "raw", SERVER, DIRPORT, "ok", "10.213.9.9:4000", f"{SERVER}:5000", ns=b)
    assert f"NO reason={TUPLE_MISMATCH}" in out, out


@pytest.mark.parametrize("key", [False, True])
def test_offer_echoes_the_reg(uls, world, key):
    """A real accepted connection, registered through dir.c; the client state machine
    gets the OFFER carrying the REG's Ns, flags, provider, fabric and address."""
    a, b, _ = world
    server = start_peer(uls, "server", SERVER, DIRPORT, *(["--key"] if key else []), ns=a,
                        name="server")
    port = int(server.ready.group(1))
    out = peer(uls, "client", SERVER, port, DIRPORT, ns=b)
    server.wait_for(r"REG (sent|failed)", timeout=10)
    reg = server.output()
    assert "REG sent" in reg, reg
    ns = kv(re.search(r"REG sent.*", reg).group(0))["ns"]
    done = re.search(r"DONE.*", out)
    assert done, out
    got = kv(done.group(0))
    assert got["ns"] == ns
    assert got["provider"] == "tcp;ofi_rxm" and got["fabric"] == "fabric-test"
    assert got["flags"] == ("1" if key else "0")
    assert got["addr"] == "".join(f"{0xa0 + i:02x}" for i in range(16))
    assert "OPEN_FD=-1" in out, out


def test_reg_for_a_socket_not_owned_is_dropped(uls, world):
    """A REG naming root's accepted socket (its exact 4-tuple, inode and cookie), sent by
    nobody: fabricd drops it, so the HELLO gets NOT_REGISTERED. The same REG sent by root,
    the socket's owner, gets an OFFER (the control)."""
    a, b, _ = world
    helper = uls.helper("fabric_dir_peer")
    require_user("nobody", helper)
    server = start_peer(uls, "server", SERVER, DIRPORT, "--no-reg", ns=a, name="server")
    port = int(server.ready.group(1))
    start_peer(uls, "hold", SERVER, port, ns=b, name="hold", ready=r"CONNECTED")
    sock = kv(server.wait_for(r"SOCK .*", timeout=10).group(0))
    forge = [helper, "forge", DIRPORT, sock["client"], sock["server"], sock["inode"],
             sock["cookie"]]
    raw = ["ip", "netns", "exec", b.name, helper, "raw", SERVER, DIRPORT, "ok",
           sock["client"], sock["server"]]
    # The HELLO follows the REG at once (a REG lives 10 s), in one command.
    chain = lambda fargs: ["sh", "-c", " ".join(map(str, fargs)) + " && " +
                           " ".join(map(str, raw))]
    stranger = uls.run(chain(user_prefix("nobody") + forge), name="nobody", ulsock=False,
                       wrap=a.prefix, timeout=30).output()
    assert "REG sent" in stranger, stranger
    assert f"NO reason={NOT_REGISTERED}" in stranger, stranger
    owner = uls.run(chain(forge), name="owner", ulsock=False, wrap=a.prefix,
                    timeout=30).output()
    assert "REG sent" in owner and "OFFER bytes=384" in owner, owner


@pytest.mark.parametrize("service", ["silent", "speaks-first", "closed"])
def test_client_against_no_fabricd(uls, netns, service):
    """The client state machine pointed at a directory port where no fabricd runs: a
    silent listener, one that speaks first (like ssh), or nothing (refused). It fails with
    'no directory answer', and the listener receives not one byte."""
    a, b = netns(), netns()
    netns.veth(a, f"{SERVER}/24", b, f"{CLIENT}/24")
    server = start_peer(uls, "server", SERVER, DIRPORT, "--no-reg", ns=a, name="server")
    port = int(server.ready.group(1))
    listener, dport = None, 9  # closed: nothing listens on port 9 in this namespace
    if service != "closed":
        speak = ["SSH-2.0-x\r\n"] if service == "speaks-first" else []
        listener = start_peer(uls, "listen", SERVER, *speak, ns=a, name="listener")
        dport = int(listener.ready.group(1))
    out = peer(uls, "client", SERVER, port, dport, ns=b)
    assert "FAILED why=no directory answer (" in out, out
    assert "OPEN_FD=-1" in out, out
    if listener:
        listener.wait(timeout=30)
        assert "RECEIVED 0" in listener.output(), listener.output()


def test_sigterm_exits_0(uls, world):
    a, b, daemon = world
    daemon.kill(signal.SIGTERM)
    daemon.wait(timeout=10, expect_rc=0)
