#!/usr/bin/env python3
"""Bar chart of a tools/bench.py --json file: one group per benchmark, one bar per
ulsock profile, height = speedup over kernel TCP (latency rows inverted so that taller
is always better).

usage: plot_bench.py BENCH.json OUT.png

matplotlib is imported only here. When the python3 on PATH lacks it (a pyenv Python,
say), the script re-runs itself with /usr/bin/python3, where Debian's python3-matplotlib
lives.
"""

import json
import os
import sys

SYSTEM_PYTHON = "/usr/bin/python3"


def import_matplotlib():
    try:
        import matplotlib
    except ImportError:
        if os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON) and \
                os.access(SYSTEM_PYTHON, os.X_OK) and not os.environ.get("ULS_PLOT_REEXEC"):
            os.environ["ULS_PLOT_REEXEC"] = "1"
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON] + sys.argv)
        sys.exit("plot_bench: matplotlib not found (install python3-matplotlib)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def speedups(data):
    """Returns (benchmark titles, {substrate: [speedup or 0]})."""
    subs = data["substrates"][1:]
    titles, series = [], {s: [] for s in subs}
    for name, res in data["results"].items():
        titles.append("%s\n(%s)" % (name, res["unit"]))
        for s in subs:
            r = res["substrates"][s]["ratio_to_kernel"]
            if r:
                r = 1 / r if res["lower_is_better"] else r
            series[s].append(r or 0)
    return titles, series


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        data = json.load(f)
    plt = import_matplotlib()
    titles, series = speedups(data)
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(titles)), 4.5))
    for i, (name, vals) in enumerate(series.items()):
        xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(titles))]
        ax.bar(xs, vals, width, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(titles)))
    ax.set_xticklabels(titles, fontsize=7)
    ax.set_ylabel("speedup over kernel TCP (higher is better)")
    ax.set_title("ulsock vs kernel TCP, median of %d runs" % data["params"]["repeats"])
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)


if __name__ == "__main__":
    main()
