#!/usr/bin/env python3
"""Bar chart of a tools/bench.py --json file: one group per benchmark, one bar per
ulsock profile, height = speedup over kernel TCP (latency rows inverted so that taller
is always better).

usage: plot_bench.py BENCH.json OUT.png

matplotlib is imported only here; it comes with the project's Python environment (.venv,
requirements.txt), which the script re-runs itself in when another python3 started it.
"""

import json
import sys

import projenv


def import_matplotlib():
    try:
        import matplotlib
    except ImportError:
        sys.exit("plot_bench: matplotlib not found in %s: run `make deps`" % sys.prefix)
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
    projenv.use()
    main()
