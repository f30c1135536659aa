#!/usr/bin/env python3
"""Statistics and the report of tools/ubench.py.

As a library: fold() turns samples into medians and ratios against kernel TCP,
write_report() writes report.md, results.json and the PNG plots into a folder.
As a command, it (re)writes a report from a results file:

    python3 tools/ubench_report.py RESULTS.json OUTDIR

matplotlib is needed only for the plots; it comes with the project's Python environment
(.venv, requirements.txt), which the command re-runs itself in when another python3
started it.
"""

import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
import projenv  # noqa: E402

METRICS = ["lat_median_us", "lat_p99_us", "lat_p999_us", "mb_s", "msg_s", "conn_s",
           "ns_per_call", "mb_per_cpu_s", "cpu_client_s", "cpu_server_s"]
LOWER_IS_BETTER = {"lat_median_us", "lat_p99_us", "lat_p999_us", "ns_per_call",
                   "cpu_client_s", "cpu_server_s"}
BASE = "kernel"

PLOTS = [("latency.png", "Ping-pong latency against message size"),
         ("bandwidth.png", "Bandwidth against message size"),
         ("clients.png", "Hot-spot latency and fan-in, fan-out, multi-stream bandwidth "
                         "against clients"),
         ("connect.png", "Connection rate"),
         ("cpu.png", "MB per CPU-second (both sides together)")]


# Statistics.

median = benchlib.median


def percentile(values, p):
    """Nearest-rank percentile (p in 0..100) of values; None when empty."""
    v = sorted(values)
    if not v:
        return None
    rank = max(1, math.ceil(p / 100.0 * len(v)))
    return v[min(rank, len(v)) - 1]


def ratio(value, base):
    """value / base, None when either is missing or base is zero."""
    if value is None or not base:
        return None
    return value / base


def row_key(r):
    """The identity of one ulsock-bench row across substrates and repeats."""
    return "%s|%s|%d|%d" % (r["test"], r.get("op") or r.get("mode", ""), r.get("size", 0),
                            r.get("clients", 0))


def fold(samples, substrates, extra=None):
    """samples: {row key: {metric: {substrate: [values]}, "verified": {...}}}.
    Returns the results document: rows with per-substrate samples, median and ratio."""
    rows = {}
    for key, cell in samples.items():
        test, mode, size, clients = key.split("|")
        out = {"test": test, "mode": mode, "size": int(size), "clients": int(clients),
               "metrics": {}, "verified": {}}
        for metric, by_sub in cell.items():
            if metric == "verified":
                out["verified"] = {s: all(v is True for v in vals) for s, vals in by_sub.items()}
                continue
            base = median(by_sub.get(BASE, []))
            out["metrics"][metric] = {
                s: {"samples": vals, "median": median(vals), "ratio": ratio(median(vals), base)}
                for s, vals in by_sub.items()}
        rows[key] = out
    extra = extra or {}
    for cell in extra.values():
        base = median(cell["substrates"].get(BASE, {}).get("samples", []))
        for s in cell["substrates"].values():
            s["median"] = median(s["samples"])
            s["ratio"] = ratio(s["median"], base)
    return {"substrates": substrates, "rows": rows, "extra": extra}


# Tables.

def fmt(x):
    return "-" if x is None else benchlib.fmt_value(x)


def cell_text(m, sub):
    c = m.get(sub) if m else None
    if not c or c["median"] is None:
        return "-"
    text = fmt(c["median"])
    if sub != BASE and c.get("ratio") is not None:
        text += " (x%.2f)" % c["ratio"]
    return text


def rows_of(data, test, mode=None):
    rows = [r for r in data["rows"].values() if r["test"] == test and
            (mode is None or r["mode"] == mode)]
    return sorted(rows, key=lambda r: (r["mode"], r["size"], r["clients"]))


def size_text(n):
    for unit, shift in (("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d %s" % (n >> shift, unit + "iB")
    return "%d B" % n


def md_table(head, body):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(out) + "\n"


def metric_table(data, rows, metric, label):
    subs = data["substrates"]
    body = [[label(r)] + [cell_text(r["metrics"].get(metric), s) for s in subs] for r in rows]
    return md_table([""] + subs, body)


SECTIONS = [
    ("latency", "block", "lat_median_us", "Ping-pong, blocking receive: median half round "
     "trip, us (lower is better)", lambda r: size_text(r["size"])),
    ("latency", "block", "lat_p99_us", "Ping-pong, blocking receive: p99 half round trip, us",
     lambda r: size_text(r["size"])),
    ("latency", "spin", "lat_median_us", "Ping-pong, busy-polling receive: median half round "
     "trip, us", lambda r: size_text(r["size"])),
    ("latency", "spin", "lat_p999_us", "Ping-pong, busy-polling receive: p99.9 half round "
     "trip, us", lambda r: size_text(r["size"])),
    ("bw", None, "mb_s", "Bandwidth, one direction, MB/s", lambda r: size_text(r["size"])),
    ("bibw", None, "mb_s", "Bandwidth, both directions together, MB/s",
     lambda r: size_text(r["size"])),
    ("multistream", None, "mb_s", "Multi-stream: N connection pairs, aggregate MB/s",
     lambda r: "%d streams" % r["clients"]),
    ("hotspot", None, "lat_median_us", "Hot spot: N clients ping-pong with one server, "
     "median half round trip, us", lambda r: "%d clients" % r["clients"]),
    ("fanin", None, "mb_s", "Fan-in: one server receiving from N clients, aggregate MB/s",
     lambda r: "%d clients" % r["clients"]),
    ("fanout", None, "mb_s", "Fan-out: one server sending to N clients, aggregate MB/s",
     lambda r: "%d clients" % r["clients"]),
    ("connect", None, "conn_s", "Connections set up and torn down per second",
     lambda r: "connect, 1 B answer"),
    ("ganglia", None, "conn_s", "Ganglia pattern: connect, fetch 2 to 10 KB, close; per "
     "second", lambda r: "connect+fetch+close"),
    ("bw", None, "mb_per_cpu_s", "MB per CPU-second, one-direction stream (both sides' CPU)",
     lambda r: size_text(r["size"])),
    ("latency", "block", "mb_per_cpu_s", "MB per CPU-second, blocking ping-pong",
     lambda r: size_text(r["size"])),
    ("overhead", None, "ns_per_call", "Overhead: ns per call that no layer accelerates "
     "(64 B; pipe = write+read)", lambda r: r["mode"]),
]


def headline(data):
    """One line per test: the ratio of each ulsock profile to kernel TCP at a chosen row."""
    picks = [("latency", "block", "lat_median_us", "ping-pong half RTT, blocking, smallest "
              "size >= 64 B"), ("latency", "spin", "lat_median_us", "ping-pong half RTT, spin"),
             ("bw", None, "mb_s", "bandwidth, largest size"), ("bibw", None, "mb_s",
                                                                 "bi-directional, largest"),
             ("hotspot", None, "lat_median_us", "hot-spot latency, most clients"),
             ("fanin", None, "mb_s", "fan-in, most clients"),
             ("fanout", None, "mb_s", "fan-out, most clients"),
             ("multistream", None, "mb_s", "multi-stream, most streams"),
             ("connect", None, "conn_s", "connections/s"),
             ("ganglia", None, "conn_s", "Ganglia connect+fetch+close/s"),
             ("bw", None, "mb_per_cpu_s", "MB per CPU-second, stream, largest size")]
    subs = data["substrates"]
    body = []
    for test, mode, metric, what in picks:
        rows = rows_of(data, test, mode)
        if test == "latency":
            rows = [r for r in rows if r["size"] >= 64][:1] or rows[:1]
        else:
            rows = rows[-1:]
        for r in rows:
            body.append([what + " (%s)" % (size_text(r["size"]) if test in ("latency", "bw",
                                                                             "bibw")
                                           else "%d" % r["clients"] if r["clients"] > 1
                                           else "-"), metric]
                        + [cell_text(r["metrics"].get(metric), s) for s in subs])
    return md_table(["figure", "metric"] + subs, body)


def extra_table(data, kind):
    # By title, then by message size (not by name: "1 MiB" would sort before "16 KiB").
    cells = sorted(((n, c) for n, c in data.get("extra", {}).items() if c.get("kind") == kind),
                   key=lambda nc: (nc[1].get("title", ""), nc[1].get("size", 0), nc[0]))
    if not cells:
        return ""
    subs = sorted({s for _, c in cells for s in c["substrates"]},
                  key=lambda s: (s != BASE, s))
    body = []
    for name, c in cells:
        row = ["%s%s (%s%s)" % (c["title"], ", %s" % size_text(c["size"]) if "size" in c else "",
                                c["unit"], ", lower is better" if c["lower_is_better"] else "")]
        for s in subs:
            x = c["substrates"].get(s)
            if not x or x["median"] is None:
                row.append("failed" if x and x["errors"] else "-")
                continue
            row.append(fmt(x["median"]) + (" (x%.2f)" % x["ratio"] if s != BASE and
                                           x.get("ratio") is not None else ""))
        body.append(row)
    return md_table([""] + subs, body)


def markdown(data, plots):
    h = data.get("host", {})
    out = ["# ulsock-bench report\n"]
    if data.get("mode") == "quick":
        out.append("**A --quick run** (two sizes, 1 and 4 clients, 30 ms rows): a smoke "
                   "test of the suite, not a measurement to quote.\n")
    if data.get("note"):
        out.append(data["note"] + "\n")
    out.append("Machine: %s, %s CPUs (%s), Linux %s. Date: %s. Command:\n\n```\n%s\n```\n"
               % (h.get("hostname", "?"), h.get("cpus", "?"), h.get("cpu", "?"),
                  h.get("kernel", "?"), h.get("date", "?"), data.get("command", "?")))
    out.append("Each cell is the median of %s runs; the substrates ran interleaved (repeat r "
               "rotates their order). (xR) is the ratio to kernel TCP; for latency, CPU and "
               "ns/call lower is better, for everything else higher. `unix` is kernel Unix "
               "domain sockets through the same program.\n" % data.get("repeats", "?"))
    unverified = sorted({"%s on %s" % (r["test"], s) for r in data["rows"].values()
                         for s, ok in r["verified"].items() if not ok})
    out.append("Byte counts: %s.\n" % ("every row's bytes received matched bytes sent"
                                        if not unverified else
                                        "MISMATCH in " + ", ".join(unverified)))
    out.append("## Headline ratios\n\n" + headline(data))
    for name, title in PLOTS:
        if name in plots:
            out.append("## %s\n\n![%s](%s)\n" % (title, title, name))
    for test, mode, metric, title, label in SECTIONS:
        rows = rows_of(data, test, mode)
        if rows:
            out.append("### %s\n\n%s" % (title, metric_table(data, rows, metric, label)))
    for kind, title in (("peer", "Other latency peers: libfabric fi_pingpong"),
                        ("crosscheck", "Cross-checks with programs no one here wrote")):
        t = extra_table(data, kind)
        if t:
            out.append("## %s\n\n%s" % (title, t))
    out.append("## Commands\n\nulsock-bench, one run per substrate and repeat (`ulsock run` "
               "wraps the whole program, so both ends run under ulsock):\n\n```")
    for s, cmd in sorted(data.get("commands", {}).items()):
        out.append("# %s\n%s" % (s, cmd))
    out.append("```\n")
    cmds = [(n, s, x["commands"]) for n, c in sorted(data.get("extra", {}).items())
            for s, x in sorted(c["substrates"].items()) if x.get("commands")]
    if cmds:
        out.append("Peers and cross-checks (first run of each; ports differ per run):\n\n```")
        for n, s, lines in cmds:
            out.append("# %s on %s\n%s" % (n, s, "\n".join(lines)))
        out.append("```\n")
    errors = data.get("errors", []) + ["%s on %s: %s" % (n, s, e.splitlines()[0])
                                       for n, c in data.get("extra", {}).items()
                                       for s, x in c["substrates"].items() for e in x["errors"]]
    out.append("## Failed runs\n\n" + ("\n".join("- " + e.splitlines()[0] for e in errors)
                                       if errors else "None.") + "\n")
    return "\n".join(out)


def text_summary(data):
    """The headline table as plain text, for the terminal."""
    return headline(data).replace("|---", "|----")


# Plots.

def caption(data):
    h = data.get("host", {})
    return "%s, %s CPUs, Linux %s, %s; %s mode, median of %s\n%s" % (
        h.get("hostname", "?"), h.get("cpus", "?"), h.get("kernel", "?"), h.get("date", "?"),
        data.get("mode", "?"), data.get("repeats", "?"), data.get("command", "?"))


def series(data, test, mode, metric, x):
    """{substrate: ([x], [median])} over the rows of one test."""
    out = {}
    for r in rows_of(data, test, mode):
        for s, c in r["metrics"].get(metric, {}).items():
            if c["median"] is not None:
                xs, ys = out.setdefault(s, ([], []))
                xs.append(r[x])
                ys.append(c["median"])
    return out


def draw(ax, data, test, mode, metric, x, title, ylabel, logx=True, style="-"):
    for s in data["substrates"]:
        xs, ys = series(data, test, mode, metric, x).get(s, ([], []))
        if xs:
            ax.plot(xs, ys, style, marker="o", markersize=3, label="%s %s" % (s, mode or "")
                    if mode else s)
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(title, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_xlabel("message size, bytes" if x == "size" else "clients", fontsize=8)
    ax.grid(True, which="both", linewidth=0.3)
    if ax.lines:
        ax.legend(fontsize=6)


def save(fig, data, path):
    fig.text(0.01, 0.005, caption(data), fontsize=6, va="bottom")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)


def plot_all(data, outdir):
    import plot_bench
    plt = plot_bench.import_matplotlib()
    fig, axs = plt.subplots(1, 2, figsize=(11, 4.5))
    draw(axs[0], data, "latency", "block", "lat_median_us", "size",
         "ping-pong, blocking receive (median)", "half round trip, us")
    draw(axs[1], data, "latency", "spin", "lat_median_us", "size",
         "ping-pong, busy-polling receive (median)", "half round trip, us")
    for prov in ("shm", "tcp"):
        pts = sorted((c["size"], c["substrates"]["fi-" + prov]["median"])
                     for c in data.get("extra", {}).values() if c.get("kind") == "peer"
                     and "fi-" + prov in c["substrates"]
                     and c["substrates"]["fi-" + prov]["median"] is not None)
        if pts:
            axs[0].plot([p[0] for p in pts], [p[1] for p in pts], ":", marker="x",
                        label="fi_pingpong " + prov)
            axs[0].legend(fontsize=6)
    save(fig, data, os.path.join(outdir, "latency.png"))
    fig, axs = plt.subplots(1, 2, figsize=(11, 4.5))
    draw(axs[0], data, "bw", None, "mb_s", "size", "one direction", "MB/s")
    draw(axs[1], data, "bibw", None, "mb_s", "size", "both directions together", "MB/s")
    save(fig, data, os.path.join(outdir, "bandwidth.png"))
    fig, axs = plt.subplots(1, 4, figsize=(15, 4.2))
    draw(axs[0], data, "hotspot", None, "lat_median_us", "clients", "hot spot latency",
         "half round trip, us")
    for ax, test in zip(axs[1:], ("fanin", "fanout", "multistream")):
        draw(ax, data, test, None, "mb_s", "clients", test + " aggregate", "MB/s")
    save(fig, data, os.path.join(outdir, "clients.png"))
    plot_connect(plt, data, os.path.join(outdir, "connect.png"))
    fig, axs = plt.subplots(1, 2, figsize=(11, 4.5))
    draw(axs[0], data, "bw", None, "mb_per_cpu_s", "size", "one-direction stream",
         "MB per CPU-second")
    draw(axs[1], data, "latency", "block", "mb_per_cpu_s", "size", "blocking ping-pong",
         "MB per CPU-second")
    save(fig, data, os.path.join(outdir, "cpu.png"))


def plot_connect(plt, data, path):
    subs = data["substrates"]
    tests = [t for t in ("connect", "ganglia") if rows_of(data, t)]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.8 / max(1, len(subs))
    for i, s in enumerate(subs):
        vals = [(rows_of(data, t)[0]["metrics"].get("conn_s", {}).get(s) or {}).get("median")
                or 0 for t in tests]
        ax.bar([x + (i - (len(subs) - 1) / 2) * width for x in range(len(tests))], vals,
               width, label=s)
    ax.set_xticks(range(len(tests)))
    ax.set_xticklabels(["connect + close" if t == "connect" else "connect + fetch 2-10 KB "
                        "+ close" for t in tests], fontsize=8)
    ax.set_ylabel("per second (higher is better)", fontsize=8)
    ax.legend(fontsize=7)
    save(fig, data, path)


def write_report(data, outdir):
    """Writes results.json, report.md and the plots; returns the paths written."""
    os.makedirs(outdir, exist_ok=True)
    results = os.path.join(outdir, "results.json")
    with open(results, "w") as f:
        json.dump(data, f, indent=1)
    plots = []
    try:
        subprocess.run([sys.executable, os.path.abspath(__file__), "--plots", results, outdir],
                       check=True, timeout=300)
        plots = [n for n, _ in PLOTS if os.path.exists(os.path.join(outdir, n))]
    except (subprocess.SubprocessError, OSError) as e:
        print("ubench_report: plots failed: %s" % e, file=sys.stderr)
    report = os.path.join(outdir, "report.md")
    with open(report, "w") as f:
        f.write(markdown(data, plots))
    return [report, results] + [os.path.join(outdir, p) for p in plots]


def main():
    args = sys.argv[1:]
    if len(args) == 3 and args[0] == "--plots":
        with open(args[1]) as f:
            plot_all(json.load(f), args[2])
        return 0
    if len(args) != 2:
        sys.exit(__doc__)
    with open(args[0]) as f:
        data = json.load(f)
    for p in write_report(data, args[1]):
        print(p)
    return 0


if __name__ == "__main__":
    projenv.use()
    sys.exit(main())
