"""One listening socket shared by several accepting processes (prefork, as nginx and Apache
workers do) or threads, and servers that hand each accepted socket to a forked child.
Every connection must work and, with ulsock on both ends, take the fast path."""

import pytest

from conftest import SIDES, check_paths, run_net_client, server_conns, side_flags, start_net_server

BATCHES = 4
WORKERS = 3


@pytest.mark.parametrize("sides", SIDES)
@pytest.mark.parametrize("model", ["prefork", "threads"])
def test_every_worker_accepts(uls, model, sides):
    """WORKERS workers block in accept() on one listener and serve one connection at a
    time.  The client holds WORKERS connections open until all of them have echoed, which
    only works if every worker accepted one of them: each batch proves all workers got a
    working connection (a worker that cannot serve hangs the batch, which the bounded wait
    reports)."""
    cu, su = side_flags(sides)
    total = BATCHES * WORKERS
    server, port = start_net_server(uls, f"--{model}", str(WORKERS), "--max-conns", str(total),
                                    ulsock=su)
    clients = [run_net_client(uls, port, "--hold", "--conns", str(WORKERS), "--concurrency",
                              str(WORKERS), "--bytes", "64K", "--seed", str(b),
                              name=f"client{b}", ulsock=cu)
               for b in range(BATCHES)]
    server.wait()
    rows = server_conns(server)
    assert len(rows) == total and all(r["result"] == "ok" for r in rows), server.output()
    workers = {(r["pid"], r["worker"]) for r in rows}
    assert len(workers) == WORKERS, f"connections were served by {sorted(workers)}"
    if model == "prefork":
        forked = set(server.output().split("WORKERS", 1)[1].split("\n", 1)[0].split())
        assert {pid for pid, _ in workers} == forked
        assert str(server.pid) not in forked
        if server.preloaded:
            # Each worker process accepted (and logged) its own connections.
            assert {str(line.pid) for line in server.paths()} == forked
    for client in clients:
        check_paths(client, server, WORKERS, port=port, server_conns=total)
    uls.assert_no_shm_leftovers()


@pytest.mark.parametrize("sides", SIDES)
@pytest.mark.parametrize("model", ["fork-per-conn", "prefork-eventloop", "threads-eventloop"])
def test_concurrent_clients(uls, model, sides):
    """24 connections, 6 at a time, mixed blocking and non-blocking client sockets, against:
    a server that forks a child per accepted socket (the parent closes its copy);
    3 prefork workers each running a poll() loop on the shared non-blocking listener
    (accept4 races, EAGAIN for the losers, as in nginx); 3 threads doing the same."""
    cu, su = side_flags(sides)
    args = {"fork-per-conn": ["--fork"],
            "prefork-eventloop": ["--prefork", "3", "--nonblock"],
            "threads-eventloop": ["--threads", "3", "--nonblock"]}[model]
    server, port = start_net_server(uls, *args, "--max-conns", "24", ulsock=su)
    client = run_net_client(uls, port, "--conns", "24", "--concurrency", "6", "--io", "mix",
                            "--bytes", "256K", "--max-io", "32K", ulsock=cu)
    server.wait()
    rows = server_conns(server)
    assert len(rows) == 24 and all(r["result"] == "ok" for r in rows), server.output()
    if model == "fork-per-conn":
        assert str(server.pid) not in {r["pid"] for r in rows}, "children should serve"
    check_paths(client, server, 24, port=port)
    uls.assert_no_shm_leftovers()
