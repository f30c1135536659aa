"""Data-integrity soak: 16 concurrent connections, each carrying a verified stream in both
directions at once, random write and read sizes from 1 B to 256 KiB (log-uniform, so tiny
and ring-sized operations both occur), blocking and non-blocking (poll()-driven) sockets
in all four client/server combinations.  Not one byte may be lost, duplicated or
reordered: each side checks every byte against the deterministic stream at its offset.

ULSOCK_SOAK_MIB sets the MiB per connection and direction (default 32 with ulsock on both
ends: 16 x 32 MiB x 2 directions = 1 GiB; the mixed runs move a quarter of that)."""

import os

import pytest

from conftest import check_paths, kv, run_net_client, server_conns, side_flags, start_net_server

CONNS = 16
MIB = int(os.environ.get("ULSOCK_SOAK_MIB", "32"))
LIMIT = 300


@pytest.mark.parametrize("sides", ["both", "client", "server"])
def test_soak(uls, sides):
    cu, su = side_flags(sides)
    per_conn = (MIB if sides == "both" else max(1, MIB // 4)) << 20
    server, port = start_net_server(uls, "--mode", "duplex", "--io", "mix", "--max-io", "256K",
                                    "--max-conns", str(CONNS), "--timeout", str(LIMIT + 30),
                                    ulsock=su)
    client = run_net_client(uls, port, "--mode", "duplex", "--io", "mix",
                            "--conns", str(CONNS), "--concurrency", str(CONNS),
                            "--bytes", str(per_conn), "--min-io", "1", "--max-io", "256K",
                            "--timeout", str(LIMIT), ulsock=cu, timeout=LIMIT + 10)
    res = kv(client.output(), "OK")
    assert int(res["tx"]) == int(res["rx"]) == CONNS * per_conn, res
    server.wait(timeout=30)
    rows = server_conns(server)
    assert len(rows) == CONNS, server.output()
    for r in rows:
        assert r["result"] == "ok", r
        # The server verified what it received too (the 56-byte header comes first).
        assert int(r["rx"]) == per_conn + 56 and int(r["tx"]) == per_conn, r
    check_paths(client, server, CONNS, port=port)
    uls.assert_no_shm_leftovers()
