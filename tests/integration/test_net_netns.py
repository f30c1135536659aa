"""Addresses other than loopback.  Inside one network namespace, a connection to the host's
own non-loopback address is still local and must take the fast path; a peer in another
network namespace (joined by a veth pair) is not the same host and must fall back, with
every byte intact.  Namespaces and addresses are created by the test and deleted after it;
it skips where namespaces cannot be created."""

import pytest

from conftest import SIDES, check_paths, run_net_client, server_conns, side_flags, start_net_server


@pytest.mark.parametrize("sides", SIDES)
def test_own_non_loopback_address(uls, netns, sides):
    """Server on 0.0.0.0, client to 10.200.7.1, an address of a veth interface of this
    (fresh) namespace: both ends see 10.200.7.1 and, preloaded both, path=shm."""
    cu, su = side_flags(sides)
    ns = netns()
    netns.veth(ns, "10.200.7.1/24", ns, "10.200.7.2/24")
    server, port = start_net_server(uls, "--addr", "0.0.0.0", "--max-conns", "4", ulsock=su,
                                    wrap=ns.prefix)
    client = run_net_client(uls, port, "--addr", "10.200.7.1", "--conns", "4",
                            "--concurrency", "2", "--bytes", "512K", "--io", "mix",
                            ulsock=cu, wrap=ns.prefix)
    server.wait()
    assert all(r["result"] == "ok" for r in server_conns(server)), server.output()
    check_paths(client, server, 4, port=port)
    for line in client.paths():
        assert line.peer == f"10.200.7.1:{port}" and line.local.startswith("10.200.7.1:"), line
    for line in server.paths():
        assert line.local == f"10.200.7.1:{port}", line
    uls.assert_no_shm_leftovers()


@pytest.mark.parametrize("sides", SIDES)
@pytest.mark.parametrize("mode", ["echo", "duplex"])
def test_peer_in_other_netns(uls, netns, mode, sides):
    """Server in one namespace (10.201.0.1), client in another (10.201.0.2), joined by a
    veth pair: path=kernel on every preloaded side, all data verified."""
    cu, su = side_flags(sides)
    a, b = netns(), netns()
    netns.veth(a, "10.201.0.1/24", b, "10.201.0.2/24")
    server, port = start_net_server(uls, "--addr", "10.201.0.1", "--mode", mode,
                                    "--max-conns", "3", ulsock=su, wrap=a.prefix)
    client = run_net_client(uls, port, "--addr", "10.201.0.1", "--mode", mode, "--conns", "3",
                            "--concurrency", "3", "--bytes", "1M", "--io", "mix",
                            ulsock=cu, wrap=b.prefix)
    server.wait()
    assert all(r["result"] == "ok" for r in server_conns(server)), server.output()
    check_paths(client, server, 3, port=port, kernel_reason=".")
    for line in client.paths():
        assert line.local.startswith("10.201.0.2:"), line
    uls.assert_no_shm_leftovers()
