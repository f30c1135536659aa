"""A peer running as another user must not get the fast path (it would share memory
across a trust boundary) unless ULSOCK_TRUST_UIDS allows it; the fallback must be
byte-exact and its reason must name the uid."""

import re

import pytest

from conftest import (PLAIN, ULSOCK_BIN, ULSOCK_LIB, Runner, check_paths, require_user,
                      run_net_client, server_conns, start_net_server)

NOBODY = "nobody"


def require_nobody():
    paths = [Runner.helper("net_server"), Runner.helper("net_client")]
    if not PLAIN:
        paths += [ULSOCK_BIN, ULSOCK_LIB]
    require_user(NOBODY, *paths)


def pair(uls, as_nobody, mode, env=None, concurrency=3, client_env=None):
    server, port = start_net_server(uls, "--mode", mode, "--max-conns", "3", env=env,
                                    user=NOBODY if as_nobody == "server" else None)
    client = run_net_client(uls, port, "--mode", mode, "--conns", "3",
                            "--concurrency", str(concurrency),
                            "--bytes", "777K", "--io", "mix", env=client_env or env,
                            user=NOBODY if as_nobody == "client" else None)
    server.wait()
    assert all(r["result"] == "ok" for r in server_conns(server)), server.output()
    return client, server, port


@pytest.mark.parametrize("mode", ["echo", "duplex"])
@pytest.mark.parametrize("as_nobody", ["server", "client"])
def test_other_user_falls_back(uls, as_nobody, mode):
    """Both ends preloaded, one of them running as nobody: path=kernel on both sides, and
    for every connection the side that refused says why, naming the uid, and so does the
    client whatever side refused; every byte verified."""
    require_nobody()
    client, server, port = pair(uls, as_nobody, mode)
    check_paths(client, server, 3, port=port, kernel_reason=".")
    if client.preloaded and server.preloaded:
        reasons = {}
        for line in client.paths():
            reasons.setdefault(line.local_port, []).append(line.reason)
        for line in server.paths():
            reasons.setdefault(line.peer_port, []).append(line.reason)
        assert len(reasons) == 3, reasons
        for cport, why in reasons.items():
            assert any(re.search(r"\buid\b", r, re.I) for r in why), \
                f"connection from port {cport}: no side names the uid: {why}"
        # The client too: its server never attached, and only the server's uid (the
        # client asks sock_diag) tells that from a server without ulsock.
        for line in client.paths():
            assert re.search(r"\buid \d+\b", line.reason), line
    uls.assert_no_shm_leftovers()


def test_one_sided_trust_named(uls):
    """The client trusts the server's uid, the server (nobody) trusts no one: the fast
    path needs both, so the connections stay on kernel TCP, and the client's reason names
    the uid it trusted and says the server may not trust it back."""
    if PLAIN:
        pytest.skip("needs ulsock")
    require_nobody()
    client, server, port = pair(uls, "server", "duplex",
                                client_env={"ULSOCK_TRUST_UIDS": "0,65534"})
    check_paths(client, server, 3, port=port, kernel_reason=".")
    for line in client.paths():
        assert "peer uid 65534 never attached" in line.reason, line
    uls.assert_no_shm_leftovers()


@pytest.mark.parametrize("as_nobody", ["server", "client"])
def test_trusted_uids_take_fast_path(uls, as_nobody):
    """With ULSOCK_TRUST_UIDS naming both uids, the same pair takes the fast path. One
    connection at a time: the client's later segments come from its spare, whose ACL for
    the trusted uid is set on the unnamed file."""
    if PLAIN:
        pytest.skip("needs ulsock")
    require_nobody()
    client, server, port = pair(uls, as_nobody, "duplex", env={"ULSOCK_TRUST_UIDS": "0,65534"},
                                concurrency=1)
    check_paths(client, server, 3, port=port)
    uls.assert_no_shm_leftovers()
