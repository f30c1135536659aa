"""ulflow on one host: small filter groups started by `ulflow run`, checked end to end.
The view filter checks every chunk a query needs arrives exactly once with the
repository's bytes; these tests check its reports add up to the whole image and that a
failure stops every process with a clear message."""

import os
import signal
import subprocess
import time

import pytest

from ulfutil import SANITIZED, ULFLOW, ULSOCK, leftovers, run, uow_lines, view_reports, vis_layout

LOCAL = [("p0", "127.0.0.1"), ("p1", "127.0.0.1"), ("p2", "127.0.0.1")]
IMAGE = 1 << 20


def check_ok(p, layout, nworks):
    assert p.returncode == 0, p.stderr
    reps = view_reports(p.stdout)
    assert len(uow_lines(p.stdout)) == nworks
    assert len(reps) == nworks, p.stdout
    # Complete updates (first and last UOW): every byte of the image, once.
    assert reps[0] == (IMAGE // (16 << 10), IMAGE)
    assert reps[nworks - 1] == reps[0]
    assert leftovers(layout) == []


@pytest.mark.parametrize("stages,copies", [(1, 1), (2, 2), (3, 3)])
def test_pipeline_processes(tmp_path, stages, copies):
    lay = vis_layout(tmp_path / "pipe.layout", LOCAL, stages=stages, copies=copies,
                     extra="cost=1")
    check_ok(run(["run", "--timeout", "60", lay]), lay, 7)


def test_all_filters_as_threads_of_one_process(tmp_path):
    lay = vis_layout(tmp_path / "threads.layout", LOCAL[:1], stages=2, copies=3)
    check_ok(run(["run", lay]), lay, 7)


def test_app_policy_and_real_compute(tmp_path):
    lay = vis_layout(tmp_path / "app.layout", LOCAL, stages=1, copies=2,
                     policies=("first_free", "dd"), extra="cost=2 cost_mode=compute")
    check_ok(run(["run", lay]), lay, 7)


def test_partial_needs_fewer_bytes_with_smaller_chunks(tmp_path):
    got = {}
    for chunk in ("4K", "64K"):
        lay = vis_layout(tmp_path / f"c{chunk}.layout", LOCAL, chunk=chunk,
                         works=["2 partial 8"])
        p = run(["run", lay])
        assert p.returncode == 0, p.stderr
        got[chunk] = view_reports(p.stdout)[0][1]
    assert got["4K"] < got["64K"]


@pytest.mark.skipif(not ULSOCK.exists(), reason="ulsock not built")
@pytest.mark.skipif(SANITIZED, reason="the ASan build's preload library needs libasan first")
def test_under_ulsock(tmp_path):
    lay = vis_layout(tmp_path / "uls.layout", LOCAL, stages=2, copies=2)
    p = run(["run", lay], prefix=(ULSOCK, "run", "--profile", "balanced", "--"))
    check_ok(p, lay, 7)


def test_bad_layout_names_the_line(tmp_path):
    lay = tmp_path / "bad.layout"
    lay.write_text("process p0 127.0.0.1\nfilter a vis_read on=p0\nstream a -> nowhere\n")
    p = run(["run", lay])
    assert p.returncode == 2
    assert f"{lay}:3: stream: no filter 'nowhere'" in p.stderr
    lay.write_text("process p0 127.0.0.1\nfilter a vis_reader on=p0\nwork 1 complete\n")
    p = run(["run", lay])
    assert p.returncode == 2 and "unknown kind 'vis_reader'" in p.stderr


@pytest.mark.parametrize("step", ["init", "process", "finalize"])
def test_failing_filter_stops_everyone(tmp_path, step):
    lay = vis_layout(tmp_path / f"fail-{step}.layout", LOCAL, stages=2, copies=2,
                     extra=f"fail={step}" if step != "init" else "fail=init")
    p = run(["run", "--timeout", "60", lay], timeout=90)
    assert p.returncode == 1
    assert f"{step} failed: asked to fail in {step}" in p.stderr, p.stderr
    assert "stopping the group" in p.stderr
    assert p.elapsed < 30
    assert leftovers(lay) == []


def test_unreachable_host(tmp_path):
    procs = LOCAL[:2] + [("far", "10.231.254.254")]
    lay = vis_layout(tmp_path / "far.layout", procs, timeout=3)
    p = run(["run", lay], timeout=60)
    assert p.returncode == 1
    assert "process far (rank 2): cannot listen on 10.231.254.254" in p.stderr
    assert leftovers(lay) == []


def test_time_limit_kills_a_stuck_group(tmp_path):
    # One byte costs a second: the first buffer never finishes within the limit.
    lay = vis_layout(tmp_path / "stuck.layout", LOCAL, extra="cost=1e9")
    p = run(["run", "--timeout", "2", lay], timeout=60)
    assert p.returncode == 1
    assert "time limit reached" in p.stderr
    assert p.elapsed < 20
    assert leftovers(lay) == []


# One process holds every filter: with hang=process it ignores SIGTERM and no peer's
# death wakes it, so only the SIGKILL that follows ends the group.
ALONE = LOCAL[:1]


def test_time_limit_kills_a_hung_filter(tmp_path):
    lay = vis_layout(tmp_path / "hung.layout", ALONE, extra="hang=process")
    p = run(["run", "--timeout", "2", lay], timeout=60)
    assert p.returncode == 1
    assert "time limit reached" in p.stderr
    assert 4 <= p.elapsed < 20  # the limit, then SIGTERM ignored for 2 s, then SIGKILL
    assert leftovers(lay) == []


def start_hung(tmp_path, name):
    """`ulflow run` of a group with a hung filter, once every rank is up."""
    lay = vis_layout(tmp_path / f"{name}.layout", ALONE, extra="hang=process")
    proc = subprocess.Popen([str(ULFLOW), "run", str(lay)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while len(leftovers(lay)) < 1 + len(ALONE) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # into the first UOW, where the filter hangs
    return lay, proc


def wait_gone(lay, seconds):
    deadline = time.monotonic() + seconds
    while leftovers(lay) and time.monotonic() < deadline:
        time.sleep(0.05)
    return leftovers(lay)


def test_signal_stops_a_hung_group(tmp_path):
    lay, proc = start_hung(tmp_path, "term")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "signal 15: stopping the group" in err
    assert wait_gone(lay, 5) == []


def test_killed_launcher_leaves_no_worker(tmp_path):
    # SIGKILL gives `ulflow run` no chance to stop anyone: the kernel must (PDEATHSIG).
    lay, proc = start_hung(tmp_path, "kill")
    proc.kill()
    proc.communicate(timeout=30)
    assert wait_gone(lay, 10) == []


def test_worker_rank_from_launcher_variables(tmp_path):
    lay = vis_layout(tmp_path / "rank.layout", LOCAL)
    env = dict(os.environ, SLURM_PROCID="7", SLURM_NTASKS="3")
    p = run(["worker", lay], env=env)
    assert p.returncode == 2 and "rank 7 from SLURM_PROCID" in p.stderr
    env = dict(os.environ, PMI_RANK="1", PMI_SIZE="4")
    p = run(["worker", lay], env=env)
    assert p.returncode == 2 and "PMI_SIZE=4 but the layout has 3" in p.stderr
