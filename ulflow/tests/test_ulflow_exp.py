"""The experiment driver's smoke run: every experiment in --quick mode, kernel TCP and one
ulsock profile, writing its tables, plots and report into a temporary directory."""

import subprocess
import sys

from ulfutil import BUILD, REPO, ULSOCK
import pytest


@pytest.mark.skipif(not ULSOCK.exists(), reason="ulsock not built")
def test_all_quick(tmp_path):
    p = subprocess.run([sys.executable, str(REPO / "tools" / "ulflow_exp.py"), "all", "--quick",
                        "--build", str(BUILD), "--out", str(tmp_path), "--silent"],
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    for name in ("report.md", "latency.md", "rate.md", "mix.md", "hetero.md", "dd.md",
                 "sweep.csv", "latency_cost0.png", "rate_cost18.png", "mix_cost0.png",
                 "hetero.png", "hetero_reaction.png", "dd.png", "mix_cost18.csv"):
        assert (tmp_path / name).stat().st_size > 0, name
    report = (tmp_path / "report.md").read_text()
    assert "Factors beside the seeds'" in report and "3.5x" in report
    assert "load-balancer reaction time (003 Fig 10)" in report
    # The mix points are measured runs: one row per substrate, partition count and fraction.
    rows = (tmp_path / "mix_cost0.csv").read_text().splitlines()
    assert rows[0].startswith("substrate,partitions,block,fraction complete,queries,")
    assert len(rows) - 1 == 2 * 2 * 3
