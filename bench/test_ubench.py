"""Unit tests of the ulsock-bench driver's statistics and report (tools/ubench*.py).

No benchmark runs here: the rows are made up, so the checks are exact.
"""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tools"))
import ubench  # noqa: E402
import ubench_report as rep  # noqa: E402


def test_median_odd_even_empty():
    assert rep.median([3, 1, 2]) == 2
    assert rep.median([4, 1, 3, 2]) == 2.5
    assert rep.median([]) is None


def test_percentile_nearest_rank():
    v = list(range(1, 101))
    assert rep.percentile(v, 50) == 50
    assert rep.percentile(v, 99) == 99
    assert rep.percentile(v, 99.9) == 100
    assert rep.percentile([7], 99.9) == 7
    assert rep.percentile([], 50) is None


def test_ratio():
    assert rep.ratio(2.0, 4.0) == 0.5
    assert rep.ratio(None, 4.0) is None
    assert rep.ratio(1.0, 0) is None


def row(test, sub, **kw):
    r = {"test": test, "substrate": sub, "mode": "block", "size": 64, "clients": 1,
         "verified": True}
    r.update(kw)
    return r


def make_data():
    col = ubench.Collector()
    for sub, lat, mbs in (("kernel", [10.0, 12.0, 11.0], [1000.0, 1100.0, 900.0]),
                          ("ulsock-latency", [1.0, 0.5, 2.0], [3000.0, 2800.0, 3200.0])):
        for v_lat, v_mbs in zip(lat, mbs):
            col.add_rows(sub, [row("latency", sub, lat_median_us=v_lat, lat_p99_us=v_lat * 2),
                               row("bw", sub, size=65536, mb_s=v_mbs, mb_per_cpu_s=v_mbs / 2),
                               row("hotspot", sub, clients=4, lat_median_us=v_lat * 3),
                               row("connect", sub, size=1, conn_s=v_mbs * 10),
                               row("overhead", sub, op="udp-send", mode="block",
                                   ns_per_call=v_lat * 100)])
    col.add_extra("iperf3", {"title": "iperf3", "unit": "Gbit/s", "lower_is_better": False,
                             "kind": "crosscheck"}, "kernel", 20.0, cmds=[["iperf3", "-c", "x"]])
    col.add_extra("iperf3", {"title": "iperf3", "unit": "Gbit/s", "lower_is_better": False,
                             "kind": "crosscheck"}, "ulsock-latency", 60.0)
    data = rep.fold(col.rows, ["kernel", "ulsock-latency"], col.extra)
    data.update(host={"hostname": "testhost", "cpus": 2, "kernel": "6.x", "date": "today"},
                mode="quick", repeats=3, command="python3 tools/ubench.py --quick",
                commands={"kernel": "ulsock-bench --json-lines"}, errors=[])
    return data


def test_fold_medians_and_ratios():
    data = make_data()
    lat = data["rows"]["latency|block|64|1"]["metrics"]["lat_median_us"]
    assert lat["kernel"]["median"] == 11.0
    assert lat["ulsock-latency"]["median"] == 1.0
    assert lat["ulsock-latency"]["ratio"] == pytest.approx(1 / 11)
    assert lat["kernel"]["ratio"] == 1.0
    bw = data["rows"]["bw|block|65536|1"]["metrics"]["mb_s"]
    assert bw["ulsock-latency"]["ratio"] == pytest.approx(3.0)
    assert data["rows"]["overhead|udp-send|64|1"]["test"] == "overhead"
    assert data["extra"]["iperf3"]["substrates"]["ulsock-latency"]["ratio"] == 3.0
    assert all(data["rows"]["bw|block|65536|1"]["verified"].values())


def test_markdown_has_rows_and_ratios():
    md = rep.markdown(make_data(), ["latency.png"])
    assert "A --quick run" in md
    assert "testhost" in md and "python3 tools/ubench.py --quick" in md
    assert "| 64 B | 11.0 | 1.00 (x0.09) |" in md
    assert "| 64 KiB | 1000 | 3000 (x3.00) |" in md
    assert "| 4 clients | 33.0 | 3.00 (x0.09) |" in md
    assert "udp-send" in md
    assert "![Ping-pong latency against message size](latency.png)" in md
    assert "| iperf3 (Gbit/s) | 20.0 | 60.0 (x3.00) |" in md
    assert "every row's bytes received matched bytes sent" in md
    assert "## Failed runs\n\nNone." in md


def test_markdown_reports_unverified_rows():
    data = make_data()
    data["rows"]["bw|block|65536|1"]["verified"]["ulsock-latency"] = False
    assert "MISMATCH in bw on ulsock-latency" in rep.markdown(data, [])


def test_write_report_writes_files(tmp_path):
    paths = rep.write_report(make_data(), str(tmp_path))
    assert (tmp_path / "report.md").read_text().startswith("# ulsock-bench report")
    with open(tmp_path / "results.json") as f:
        assert json.load(f)["rows"]["latency|block|64|1"]["test"] == "latency"
    assert str(tmp_path / "report.md") in paths
    # The plots need matplotlib (python3-matplotlib); when present, all are written.
    pngs = [p for p in paths if p.endswith(".png")]
    if pngs:
        assert sorted(os.path.basename(p) for p in pngs) == sorted(n for n, _ in rep.PLOTS)
        assert all(os.path.getsize(p) > 1000 for p in pngs)


def test_driver_options():
    args = ubench.parse_args(["--quick", "--tests", "latency,bw", "--profiles", "latency"])
    assert args.mode == "quick" and args.tests == ["latency", "bw"]
    assert args.params["repeats"] >= 5
    assert args.profile_list == ["latency"]
    with pytest.raises(SystemExit):
        ubench.parse_args(["--tests", "nosuchtest"])
    with pytest.raises(SystemExit):
        ubench.parse_args(["--profiles", "fast"])
