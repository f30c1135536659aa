"""ulflow across two hosts: two network namespaces joined by a veth pair stand for two
nodes; each rank is started the way a launcher would (`ip netns exec NS env SLURM_PROCID=R
ulflow worker LAYOUT`), with no daemon. Skips when namespaces cannot be made."""

import os
import random
import shutil
import subprocess
import time

import pytest

from ulfutil import ULFLOW, leftovers, uow_lines, view_reports, vis_layout


def sh(*args):
    subprocess.run(args, check=True, capture_output=True, timeout=30)


@pytest.fixture
def hosts():
    """Two namespaces with addresses 10.231.N.1 and 10.231.N.2; deleted afterwards."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("network namespaces need root and ip(8)")
    tag = f"ulf{os.getpid() % 100000}"
    net = random.randint(1, 250)
    names = [f"{tag}a", f"{tag}b"]
    try:
        for n in names:
            sh("ip", "netns", "add", n)
            sh("ip", "-n", n, "link", "set", "lo", "up")
        sh("ip", "-n", names[0], "link", "add", f"{tag}x", "type", "veth", "peer", "name",
           f"{tag}y", "netns", names[1])
        for n, dev, host in ((names[0], f"{tag}x", 1), (names[1], f"{tag}y", 2)):
            sh("ip", "-n", n, "addr", "add", f"10.231.{net}.{host}/24", "dev", dev)
            sh("ip", "-n", n, "link", "set", dev, "up")
    except (subprocess.CalledProcessError, OSError) as e:
        for n in names:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
        pytest.skip(f"cannot create network namespaces: {e}")
    yield [(names[0], f"10.231.{net}.1"), (names[1], f"10.231.{net}.2")]
    for n in names:
        subprocess.run(["ip", "netns", "del", n], capture_output=True)


def start_ranks(layout, ranks, ntasks=None):
    """ranks: [(netns, rank)] -> Popen per rank, as srun would start them."""
    procs = []
    for ns, rank in ranks:
        cmd = ["ip", "netns", "exec", ns, "env", f"SLURM_PROCID={rank}",
               f"SLURM_NTASKS={ntasks or len(ranks)}", str(ULFLOW), "worker", str(layout)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    return procs


def finish(procs, timeout=60):
    out = []
    for p in procs:
        o, e = p.communicate(timeout=timeout)
        out.append((p.returncode, o, e))
    return out


def test_pipeline_across_two_hosts(tmp_path, hosts):
    (na, aa), (nb, ab) = hosts
    procs = [("p0", aa), ("p1", ab), ("p2", ab)]
    lay = vis_layout(tmp_path / "two.layout", procs, stages=2, copies=2,
                     placement=lambda f, n: "p1,p0" if f == "stage1" else "p2,p1",
                     coord=random.randint(20000, 30000))
    res = finish(start_ranks(lay, [(na, 0), (nb, 1), (nb, 2)]))
    for rc, o, e in res:
        assert rc == 0, e
    stdout = "".join(o for _, o, _ in res)
    reps = view_reports(stdout)
    assert len(uow_lines(stdout)) == 7 and len(reps) == 7
    assert reps[0] == (64, 1 << 20) and reps[6] == (64, 1 << 20)
    assert leftovers(lay) == []


def test_unreachable_coordinator_times_out_cleanly(tmp_path, hosts):
    (na, aa), (nb, ab) = hosts
    # Rank 0's host is an address nobody holds: rank 1 cannot join, rank 0 cannot bind.
    far = aa.rsplit(".", 1)[0] + ".77"
    procs = [("p0", far), ("p1", ab)]
    lay = vis_layout(tmp_path / "far.layout", procs, stages=1, copies=1,
                     placement=lambda f, n: "p1", timeout=2, coord=24000)
    t0 = time.monotonic()
    (rc, _, err), = finish(start_ranks(lay, [(nb, 1)], ntasks=2))
    assert rc == 1
    assert f"cannot join the coordinator at {far}:24000" in err
    assert time.monotonic() - t0 < 20


def test_missing_rank_is_reported_by_the_coordinator(tmp_path, hosts):
    (na, aa), (nb, ab) = hosts
    procs = [("p0", aa), ("p1", ab)]
    lay = vis_layout(tmp_path / "alone.layout", procs, stages=1, copies=1,
                     placement=lambda f, n: "p1", timeout=2, coord=24001)
    (rc, _, err), = finish(start_ranks(lay, [(na, 0)], ntasks=2))
    assert rc == 1
    assert "process p1 (rank 1, " + ab + ") did not join within 2 s" in err
    assert leftovers(lay) == []
