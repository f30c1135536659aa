#!/usr/bin/env python3
"""The visualization-server experiments of seeds 000 (section 5.2, Figures 24-31) and 003
(Figures 10-11) on ulflow, every substrate (kernel TCP and ulsock's profiles) measured in
the same run, interleaved. Each subcommand writes CSV tables, PNG plots and a Markdown
page into --out (default docs/perf/ulflow); `all` runs them all and writes report.md.

  sweep     block size x substrate x cost: complete-update time and partial-update latency
  latency   Fig 24-25: partial-update latency under a guaranteed full-update rate
  rate      Fig 26-27: full updates per second under a partial-update latency guarantee
  mix       Fig 28-29: response time of seeded random query mixes, by complete fraction
  hetero    Fig 30-31 / 003 Fig 10: round-robin on uneven copies, time wasted per fast copy
            and the load balancer's reaction time
  dd        003 Fig 11: demand-driven, one copy slows at random, execution time

--quick shrinks everything (the ctest smoke run uses it). See docs/ulflow.md.
"""

import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, Substrate, default_build_dir  # noqa: E402
import projenv  # noqa: E402

SEED = {"latency": (3.5, 10), "rate": (6, 8), "reaction": 8}
COST_NS = 18.0  # seed 000: the Virtual Microscope's visualization, per byte


def kib(n):
    return f"{n // 1024}K" if n < (1 << 20) else f"{n >> 20}M"


class Runner:
    """Writes layouts for the scaled visualization server and runs them on a substrate."""

    def __init__(self, args):
        self.a = args
        self.bin = os.path.join(args.build, "bin", "ulflow")
        self.tmp = tempfile.mkdtemp(prefix="ulflow-exp-")
        self.n = 0
        self.shm_checked = set()

    def layout(self, block, works, cost=0.0, policy="dd", extra="", copies=None,
               stages=None, image=None, view_cost=None):
        a = self.a
        copies = copies or a.copies
        stages = stages or a.stages
        image = image or a.image
        procs = [f"p{i}" for i in range(copies + 1)]
        lines = [f"block {block}", "timeout 20", f"set image {image}", f"set chunk {block}",
                 f"set view {a.view}", "set verify 0", f"set cost_mode {a.cost_mode}"]
        lines += [f"process {p} 127.0.0.1" for p in procs]
        lines.append("filter read vis_read on=p0")
        names = [f"stage{i + 1}" for i in range(stages)]
        for i, s in enumerate(names):
            # Copy k of every stage shares process k+1: one node per pipeline row.
            on = ",".join(procs[1 + k] for k in range(copies))
            ex = extra if i == 0 else ""
            lines.append(f"filter {s} vis_stage copies={copies} on={on} cost={cost} {ex}")
        lines.append(f"filter view vis_view on=p0 cost={cost if view_cost is None else view_cost}")
        chain = ["read"] + names + ["view"]
        for i in range(len(chain) - 1):
            lines.append(f"stream {chain[i]} -> {chain[i + 1]} policy={policy}")
        lines += [f"work {n} {w}" for n, w in works]
        self.n += 1
        path = os.path.join(self.tmp, f"run{self.n}.layout")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def run(self, sub, path):
        """(uow records, reports) of one `ulflow run`; raises on failure."""
        env = sub.env()
        if sub.profile and sub.name not in self.shm_checked:
            env["ULSOCK_LOG"] = "info"
        p = subprocess.run(sub.wrap([self.bin, "run", "--timeout", "300", path]), env=env,
                           capture_output=True, text=True, timeout=400)
        if p.returncode != 0:
            raise RuntimeError(f"{sub.name}: ulflow run {path} failed:\n{p.stderr[-2000:]}")
        if sub.profile and sub.name not in self.shm_checked:
            # The fast path must carry the streams, or the comparison means nothing.
            if "path=shm" not in p.stderr:
                raise RuntimeError(f"{sub.name}: no connection took ulsock's shm path")
            self.shm_checked.add(sub.name)
        uows = [(int(m[0]), float(m[1]), m[2])
                for m in re.findall(r"^uow (\d+) ([\d.]+) (.*)$", p.stdout, re.M)]
        reps = re.findall(r"^report (\S+) (\d+) (\d+) (.*)$", p.stdout, re.M)
        return uows, reps


def mean_of(uows, prefix, skip=1):
    """Mean seconds of the UOWs whose work starts with prefix, skipping the first ones
    (the first touches cold buffers and connections)."""
    v = [t for _, t, w in uows if w.startswith(prefix)]
    v = v[skip:] if len(v) > skip else v
    return statistics.mean(v) if v else float("nan")


def substrates(args):
    subs = [Substrate(None, args.build)] + [Substrate(p, args.build) for p in args.profiles]
    for s in subs:
        s.check()
    return subs


def write_csv(out, name, header, rows):
    with open(os.path.join(out, name + ".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def publish(a, tag, header, rows, title, xlabel, ylabel, series, **kw):
    """The CSV table and the PNG plot of one figure; returns the Markdown image link."""
    write_csv(a.out, tag, header, rows)
    return plot(a.out, tag, title, xlabel, ylabel, series, **kw)


def md_table(header, rows):
    def fmt(v):
        return f"{v:.4g}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def plot(out, name, title, xlabel, ylabel, series, logx=False, logy=False):
    """series: {label: [(x, y)]}; points with y None are dropped (a substrate drops out)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, pts in series.items():
        pts = [(x, y) for x, y in pts if y is not None and y == y]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, name + ".png"), dpi=110)
    plt.close(fig)
    return f"![{title}]({name}.png)"


# ---------------------------------------------------------------------------- sweep

def sweep(r, subs, costs):
    """{(sub, cost, block): (complete_s, partial_s)}: block outermost and substrates
    innermost, so every substrate sees the same machine conditions."""
    a = r.a
    res = {}
    works = [(a.full, "complete"), (a.partial, f"partial {a.move}")]
    for cost in costs:
        for block in a.blocks:
            for sub in subs:
                uows, _ = r.run(sub, r.layout(block, works, cost=cost))
                res[(sub.name, cost, block)] = (mean_of(uows, "complete"),
                                                mean_of(uows, "partial"))
                log(a, f"sweep cost={cost} block={kib(block)} {sub.name}: "
                       f"complete {res[(sub.name, cost, block)][0] * 1e3:.2f} ms, "
                       f"partial {res[(sub.name, cost, block)][1] * 1e6:.0f} us")
    return res


def sweep_page(r, subs, costs, res):
    rows = []
    for cost in costs:
        for block in r.a.blocks:
            for s in subs:
                c, p = res[(s.name, cost, block)]
                rows.append([cost, kib(block), s.name, c * 1e3, 1 / c, p * 1e6])
    header = ["ns/byte", "block", "substrate", "complete ms", "full updates/s",
              "partial us"]
    write_csv(r.a.out, "sweep", header, rows)
    figs = []
    for cost in costs:
        ser = {}
        for s in subs:
            ser[s.name + " partial"] = [(b, res[(s.name, cost, b)][1] * 1e6)
                                        for b in r.a.blocks]
        figs.append(plot(r.a.out, f"sweep_partial_cost{int(cost)}",
                         f"Partial-update latency by block size ({cost:g} ns/byte)",
                         "distribution block size (bytes)", "latency (us)", ser,
                         logx=True, logy=True))
        ser = {s.name: [(b, 1 / res[(s.name, cost, b)][0]) for b in r.a.blocks]
               for s in subs}
        figs.append(plot(r.a.out, f"sweep_rate_cost{int(cost)}",
                         f"Full updates per second by block size ({cost:g} ns/byte)",
                         "distribution block size (bytes)", "full updates/s", ser,
                         logx=True))
    return "## Block-size sweep\n\n" + "\n\n".join(figs) + "\n\n" + md_table(header, rows)


# ---------------------------------------------------------------- latency and rate

def pick_for_rate(res, sub, cost, blocks, rate):
    """The smallest block whose full-update rate meets rate: data repartitioned for sub."""
    for b in blocks:
        if 1 / res[(sub, cost, b)][0] >= rate:
            return b
    return None


def pick_for_latency(res, sub, cost, blocks, lat):
    """Among blocks whose partial latency meets lat, the one with the most updates/s."""
    ok = [b for b in blocks if res[(sub, cost, b)][1] <= lat]
    return max(ok, key=lambda b: 1 / res[(sub, cost, b)][0]) if ok else None


def guarantee_series(r, subs, cost, res, targets, pick, value):
    """Rows and plot series: kernel at its block, each ulsock profile at the kernel's
    block and with its own block (DR). value(sub, block) is what is plotted."""
    blocks = r.a.blocks
    kern = subs[0].name
    rows, ser, factors = [], {}, {"same": [], "dr": []}
    for t in targets:
        kb = pick(res, kern, cost, blocks, t)
        row = [t, kib(kb) if kb else "-", value(kern, kb)]
        ser.setdefault("kernel TCP", []).append((t, value(kern, kb)))
        for s in subs[1:]:
            ob = pick(res, s.name, cost, blocks, t)
            same, dr = value(s.name, kb), value(s.name, ob)
            row += [same, kib(ob) if ob else "-", dr]
            ser.setdefault(f"{s.name} (TCP's block)", []).append((t, same))
            ser.setdefault(f"{s.name} (with DR)", []).append((t, dr))
            base = row[2]
            if base and same:
                factors["same"].append((s.name, t, base, same))
            if base and dr:
                factors["dr"].append((s.name, t, base, dr))
        rows.append(row)
    return rows, ser, factors


def exp_latency(r, subs, res, costs):
    a = r.a
    parts, summary = [], {}
    for cost in costs:
        rates = sorted({1 / res[(subs[0].name, cost, b)][0] for b in a.blocks})
        # Targets: the kernel's achievable rates, plus one above them, where TCP drops out.
        targets = [round(x, 1) for x in rates[:-1]] + [round(rates[-1] * 0.98, 1)]
        targets += [round(max(1 / res[(s.name, cost, b)][0] for s in subs
                              for b in a.blocks) * 0.9, 1)]
        targets = sorted(set(targets))

        def value(sub, b, cost=cost):
            return None if b is None else res[(sub, cost, b)][1] * 1e6
        rows, ser, fac = guarantee_series(r, subs, cost, res, targets, pick_for_rate, value)
        header = ["full updates/s", "kernel block", "kernel us"]
        for s in subs[1:]:
            header += [f"{s.name} us (TCP block)", f"{s.name} block", f"{s.name} us (DR)"]
        tag = f"latency_cost{int(cost)}"
        write_csv(a.out, tag, header, rows)
        fig = plot(a.out, tag, f"Partial-update latency under a full-update rate "
                   f"({cost:g} ns/byte)", "guaranteed full updates per second",
                   "average partial-update latency (us)", ser, logy=True)
        summary[cost] = {k: max((b / x for _, _, b, x in v), default=None)
                         for k, v in fac.items()}
        parts.append(f"### {cost:g} ns/byte (seed Figure {24 if cost == 0 else 25})\n\n"
                     f"{fig}\n\n{md_table(header, rows)}\n\nLargest factor (kernel latency / "
                     f"ulsock latency): same block {fmt_x(summary[cost]['same'])}, with DR "
                     f"{fmt_x(summary[cost]['dr'])}.")
    return "## Partial-update latency under a full-update rate\n\n" + "\n\n".join(parts), summary


def exp_rate(r, subs, res, costs):
    a = r.a
    parts, summary = [], {}
    for cost in costs:
        lats = sorted({res[(s.name, cost, b)][1] for s in subs for b in a.blocks})
        targets = sorted({round(x * 1.05 * 1e6) / 1e6 for x in lats})
        # Keep a handful of guarantees spread over the measured range.
        step = max(1, len(targets) // 7)
        targets = targets[::step]

        def value(sub, b, cost=cost):
            return None if b is None else 1 / res[(sub, cost, b)][0]
        rows, ser, fac = guarantee_series(r, subs, cost, res, targets, pick_for_latency,
                                          value)
        for row in rows:
            row[0] = round(row[0] * 1e6)
        ser = {k: [(round(x * 1e6), y) for x, y in v] for k, v in ser.items()}
        header = ["latency guarantee us", "kernel block", "kernel updates/s"]
        for s in subs[1:]:
            header += [f"{s.name} updates/s (TCP block)", f"{s.name} block",
                       f"{s.name} updates/s (DR)"]
        tag = f"rate_cost{int(cost)}"
        write_csv(a.out, tag, header, rows)
        fig = plot(a.out, tag, f"Full updates/s under a partial-update latency guarantee "
                   f"({cost:g} ns/byte)", "latency guarantee (us)", "full updates per second",
                   ser, logy=False)
        summary[cost] = {k: max((x / b for _, _, b, x in v), default=None)
                         for k, v in fac.items()}
        # A guarantee the kernel cannot meet at all is an unbounded factor: say so.
        drop = [row[0] for row in rows if row[2] is None and any(v for v in row[3:]
                                                                   if isinstance(v, float))]
        parts.append(f"### {cost:g} ns/byte (seed Figure {26 if cost == 0 else 27})\n\n"
                     f"{fig}\n\n{md_table(header, rows)}\n\nLargest factor (ulsock updates/s "
                     f"/ kernel updates/s): same block {fmt_x(summary[cost]['same'])}, with "
                     f"DR {fmt_x(summary[cost]['dr'])}."
                     + (f" Kernel TCP meets no block at guarantees {drop} us, where ulsock "
                        "still does." if drop else ""))
    return ("## Full updates per second under a latency guarantee\n\n" + "\n\n".join(parts),
            summary)


def fmt_x(v):
    return "n/a" if v is None else f"{v:.2f}x"


# ------------------------------------------------------------------------------ mix

def mix_queries(a, cost, parts_n, frac):
    """The seeded query stream of one mix point: round(frac x n) complete updates among
    n queries, zoom (4 chunks) for the rest, in a random order that depends only on the
    point, so every substrate runs the same stream. A warm-up complete update goes first
    (dropped: it touches cold buffers and connections)."""
    import random
    n = a.mix_queries
    k = round(frac * n)
    qs = ["complete"] * k + ["zoom 4"] * (n - k)
    random.Random(f"{a.seed}/{cost:g}/{parts_n}/{frac:g}").shuffle(qs)
    return [(1, "complete")] + [(1, q) for q in qs]


def exp_mix(r, subs, costs):
    """Fig 28-29: mixed streams of zoom and complete-update queries, by partition count:
    the average response time of the stream, measured, every substrate at every point."""
    a = r.a
    parts = []
    for cost in costs:
        ser, rows = {}, []
        for parts_n in a.partitions:
            block = a.image // parts_n
            for frac in a.fracs:
                works = mix_queries(a, cost, parts_n, frac)
                for s in subs:
                    uows, _ = r.run(s, r.layout(block, works, cost=cost))
                    resp = statistics.mean(t for u, t, _ in uows if u > 0)
                    rows.append([s.name, parts_n, kib(block), frac, len(works) - 1,
                                 resp * 1e3])
                    ser.setdefault(f"{s.name} ({parts_n})", []).append((frac, resp * 1e3))
                    log(a, f"mix cost={cost} partitions={parts_n} f={frac:g} {s.name}: "
                           f"{resp * 1e3:.2f} ms")
        header = ["substrate", "partitions", "block", "fraction complete", "queries",
                  "response ms"]
        tag = f"mix_cost{int(cost)}"
        fig = publish(a, tag, header, rows, f"Average response time vs fraction of complete "
                      f"updates ({cost:g} ns/byte)", "fraction of complete-update queries",
                      "average response time (ms)", ser)
        parts.append(f"### {cost:g} ns/byte (seed Figure {28 if cost == 0 else 29})\n\n{fig}"
                     f"\n\n{mix_tolerance(subs, a, rows)}\n\n{md_table(header, rows)}")
    return ("## Response time against the mix of queries\n\n"
            f"Each point is one run of a seeded random stream of {a.mix_queries} queries "
            "(after a dropped warm-up complete update), the given fraction of them complete "
            "updates and the rest zoom queries (4 chunks); the response time is the mean "
            "time per query, measured. Substrates run the same stream back to back.\n\n"
            + "\n\n".join(parts))


def mix_tolerance(subs, a, rows):
    """The seeds' reading of Fig 28-29: under a response-time budget, up to which fraction
    of complete updates each substrate stays, at the largest partition count. The budget
    is the midpoint of the kernel's range there."""
    pn = max(a.partitions)
    pts = {s.name: [(r[3], r[5]) for r in rows if r[0] == s.name and r[1] == pn]
           for s in subs}
    kern = [y for _, y in pts[subs[0].name]]
    budget = (min(kern) + max(kern)) / 2
    ok = {}
    for n, v in pts.items():
        ok[n] = None
        for f, y in sorted(v):
            if y > budget:
                break
            ok[n] = f
    return (f"Budget {budget:.3g} ms at {pn} partitions: every fraction of complete updates "
            "from 0 up to this one stays within it: " +
            ", ".join(f"{n} {'none' if f is None else f'{f:g}'}" for n, f in ok.items()) +
            " (seeds: 64 partitions, 150 ms, TCP 0.6, SocketVIA 0.9).")


# ------------------------------------------------------------- heterogeneity (RR, DD)

def pipeline_block(res, sub, blocks):
    """Seed 000's 'perfect pipeline' block: the smallest whose full-update rate with
    linear compute is within 10% of the best this substrate reaches."""
    best = max(1 / res[(sub, COST_NS, b)][0] for b in blocks)
    return next(b for b in blocks if 1 / res[(sub, COST_NS, b)][0] >= 0.9 * best)


def hetero_run(r, sub, block, policy, extra):
    """(time wasted per fast copy, update time, reaction time) of one run, means over the
    UOWs after the first. The reaction time is the slow copy's mean gap between two
    acknowledgements: after the balancer sends it a block, how long until it hears from
    that copy again (seed 003's 'time the load balancer takes to realize its mistake')."""
    a = r.a
    uows, reps = r.run(sub, r.layout(block, [(a.full, "complete")], cost=COST_NS,
                                     policy=policy, extra=extra, stages=1, view_cost=0))
    times = {u: t for u, t, _ in uows}
    waste, react = [], []
    for name, copy, uow, text in reps:
        if name != "stage1" or int(uow) == 0:
            continue
        kv = dict(x.split("=") for x in text.split())
        if kv["slow"] == "0":
            waste.append(times[int(uow)] - float(kv["busy"]))
        elif float(kv["react"]) > 0:
            react.append(float(kv["react"]))
    total = [t for u, t in times.items() if u > 0] or list(times.values())

    def mean(v):
        return statistics.mean(v) if v else float("nan")
    return mean(waste), statistics.mean(total), mean(react)


def kernel_over_best(rows, col, at):
    """Kernel's value / the best ulsock value in column col at heterogeneity at."""
    k = [row for row in rows if row[2] == at]
    best = min((row[col] for row in k[1:] if row[col] == row[col]), default=0)
    return k[0][col] / best if len(k) > 1 and best > 0 else None


def exp_hetero(r, subs, res):
    a = r.a
    blocks = {s.name: pipeline_block(res, s.name, a.blocks) for s in subs}
    rows, waste_ser, react_ser = [], {}, {}
    for h in a.factors:
        for s in subs:
            w, t, rt = hetero_run(r, s, blocks[s.name], "rr", f"slow_copies=0 slow={h}")
            rows.append([s.name, kib(blocks[s.name]), h, w * 1e3, rt * 1e3, t * 1e3])
            label = f"{s.name} ({kib(blocks[s.name])})"
            waste_ser.setdefault(label, []).append((h, w * 1e3))
            react_ser.setdefault(label, []).append((h, rt * 1e3))
            log(a, f"hetero h={h} {s.name}: wasted {w * 1e3:.2f} ms of {t * 1e3:.2f} ms, "
                   f"reaction {rt * 1e3:.3f} ms")
    header = ["substrate", "block", "heterogeneity", "wasted per fast copy ms",
              "reaction ms", "update ms"]
    fig = publish(a, "hetero", header, rows,
                  "Round-robin on uneven copies: time wasted per fast copy",
                  "factor of heterogeneity", "time wasted per fast copy (ms)", waste_ser)
    rfig = plot(a.out, "hetero_reaction", "Load-balancer reaction time on uneven copies",
                "factor of heterogeneity", "reaction time (ms)", react_ser)
    hmax = max(a.factors)
    wasted, reaction = kernel_over_best(rows, 3, hmax), kernel_over_best(rows, 4, hmax)
    text = (f"## Round-robin on uneven copies (seed 000 Figures 30-31, seed 003 Figure 10)\n\n"
            f"Each substrate uses its own 'perfect pipeline' block (smallest block within 10% "
            f"of its best full-update rate at {COST_NS:g} ns/byte): "
            + ", ".join(f"{n} {kib(b)}" for n, b in blocks.items())
            + ". Copy 0 of stage 1 is slower by the factor. Two measures: the time wasted "
            "per fast copy (update time minus its busy time; seed 000 Figure 31) and the "
            "load balancer's reaction time (seed 003 Figure 10): the slow copy's mean gap "
            "between two acknowledgements, that is, once the balancer has sent it a block, "
            "how long until it hears from that copy again. Seed 003 explains its 8x by the "
            "block: a mistake costs the slow node one block's processing, 16 KB for TCP "
            f"against 2 KB for SocketVIA.\n\n{fig}\n\n{rfig}\n\n{md_table(header, rows)}"
            f"\n\nAt factor {hmax}, kernel / best ulsock: wasted time {fmt_x(wasted)}, "
            f"reaction time {fmt_x(reaction)}.")
    return text, {"reaction": reaction, "wasted": wasted, "blocks": blocks}


def exp_dd(r, subs, res):
    a = r.a
    blocks = {s.name: pipeline_block(res, s.name, a.blocks) for s in subs}
    rows, ser = [], {}
    for h in a.dd_factors:
        for p in a.probs:
            for s in subs:
                _, t, _ = hetero_run(r, s, blocks[s.name], "dd",
                                  f"slow_copies=0 slow={h} slow_prob={p} seed=7")
                rows.append([s.name, kib(blocks[s.name]), h, p, t * 1e3])
                ser.setdefault(f"{s.name} ({h})", []).append((p, t * 1e3))
                log(a, f"dd h={h} p={p} {s.name}: {t * 1e3:.2f} ms")
    header = ["substrate", "block", "heterogeneity", "probability of slowing", "update ms"]
    fig = publish(a, "dd", header, rows, "Demand-driven, one copy slows at random",
                  "probability of the copy being slow", "execution time per update (ms)", ser)
    return (f"## Demand-driven with a copy slowing at random (seed 003 Figure 11)\n\n{fig}\n\n"
            f"{md_table(header, rows)}")


# ------------------------------------------------------------------------------ main

def log(a, msg):
    if not a.silent:
        print(msg, flush=True)


def write_page(a, name, title, body):
    path = os.path.join(a.out, name + ".md")
    with open(path, "w") as f:
        f.write(f"# {title}\n\n{config_text(a)}\n\n{body}\n")
    return path


def config_text(a):
    return (f"Configuration: image {kib(a.image)}, {a.stages} stages x {a.copies} copies "
            f"(seeds: 16M, 4 x 3), partial update = view of {a.view} px moved by {a.move} px, "
            f"{a.full} complete and {a.partial} partial queries per point (first of each "
            f"dropped), cost model `{a.cost_mode}`, blocks {', '.join(kib(b) for b in a.blocks)}, "
            f"substrates kernel, {', '.join('ulsock-' + p for p in a.profiles)}; "
            f"{os.cpu_count()} CPUs; generated {time.strftime('%Y-%m-%d %H:%M')}"
            f"{' (--quick)' if a.quick else ''}.")


def factors_text(lat, rate, het):
    rows = [
        ["latency, same block (Fig 24)", f"{SEED['latency'][0]}x", fmt_x(lat.get(0.0, {}).get("same"))],
        ["latency, with DR (Fig 24)", f"{SEED['latency'][1]}x", fmt_x(lat.get(0.0, {}).get("dr"))],
        ["latency, same block, linear compute (Fig 25)", "4x", fmt_x(lat.get(COST_NS, {}).get("same"))],
        ["latency, with DR, linear compute (Fig 25)", "12x", fmt_x(lat.get(COST_NS, {}).get("dr"))],
        ["updates/s, same block (Fig 26)", f"{SEED['rate'][0]}x", fmt_x(rate.get(0.0, {}).get("same"))],
        ["updates/s, with DR (Fig 26)", f"{SEED['rate'][1]}x", fmt_x(rate.get(0.0, {}).get("dr"))],
        ["updates/s, with DR, linear compute (Fig 27)", "4x",
         fmt_x(rate.get(COST_NS, {}).get("dr"))],
        ["time wasted per fast node (Fig 31)", f"{SEED['reaction']}x",
         fmt_x(het.get("wasted"))],
        ["load-balancer reaction time (003 Fig 10)", f"{SEED['reaction']}x",
         fmt_x(het.get("reaction"))],
    ]
    return md_table(["factor", "seeds (SocketVIA vs TCP)", "ulflow here (ulsock vs kernel)"], rows)


def ensure_matplotlib():
    """matplotlib comes with the project's Python environment (requirements.txt), which
    the command runs in (projenv.use); fail early, not after the runs."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        sys.exit("ulflow_exp: matplotlib not found in %s: run `make deps`" % sys.prefix)


def main():
    ensure_matplotlib()
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["sweep", "latency", "rate", "mix", "hetero", "dd", "all"])
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    ap.add_argument("--build", default=default_build_dir())
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "perf", "ulflow"))
    ap.add_argument("--profiles", default=None, help="ulsock profiles, comma-separated")
    ap.add_argument("--image", type=int, default=None, help="image bytes (power of two)")
    ap.add_argument("--stages", type=int, default=None)
    ap.add_argument("--copies", type=int, default=None)
    ap.add_argument("--cost-mode", default="wait", choices=["wait", "compute"])
    ap.add_argument("--seed", type=int, default=1, help="seed of the mixed query streams")
    ap.add_argument("--silent", action="store_true")
    a = ap.parse_args()
    q = a.quick
    a.image = a.image or ((1 << 20) if q else (4 << 20))
    a.stages = a.stages or 2
    a.copies = a.copies or 2
    a.profiles = (a.profiles or ("efficient" if q else "efficient,balanced")).split(",")
    a.profiles = [p for p in a.profiles if p]
    a.blocks = [b for b in ([4 << 10, 16 << 10, 64 << 10, 256 << 10] if q else
                            [1 << k for k in range(11, 21)]) if b <= a.image]
    a.view = 256 if q else 512
    a.move = 8
    a.full, a.partial = (3, 5) if q else (4, 12)
    a.partitions = [1, 64] if q else [1, 4, 16, 64, 256]
    a.fracs = [0.0, 0.5, 1.0] if q else [i / 5 for i in range(6)]
    a.mix_queries = 4 if q else 20
    a.factors = [1, 4] if q else [1, 2, 4, 8]
    a.dd_factors = [4] if q else [2, 4, 8]
    a.probs = [0.0, 0.5] if q else [0.0, 0.1, 0.3, 0.5, 0.7, 0.9]
    os.makedirs(a.out, exist_ok=True)
    r = Runner(a)
    subs = substrates(a)
    costs = [0.0, COST_NS]
    t0 = time.time()
    pages = {}
    need_sweep = a.what in ("sweep", "latency", "rate", "hetero", "dd", "all")
    res = sweep(r, subs, costs if a.what != "hetero" and a.what != "dd" else [COST_NS]) \
        if need_sweep else None
    lat, rate, het = {}, {}, {}
    if a.what in ("sweep", "all"):
        pages["sweep"] = sweep_page(r, subs, costs if a.what == "all" else costs, res)
    if a.what in ("latency", "all"):
        pages["latency"], lat = exp_latency(r, subs, res, costs)
    if a.what in ("rate", "all"):
        pages["rate"], rate = exp_rate(r, subs, res, costs)
    if a.what in ("mix", "all"):
        pages["mix"] = exp_mix(r, subs, costs)
    if a.what in ("hetero", "all"):
        pages["hetero"], het = exp_hetero(r, subs, res)
    if a.what in ("dd", "all"):
        pages["dd"] = exp_dd(r, subs, res)
    for name, body in pages.items():
        write_page(a, name, f"ulflow experiment: {name}", body)
    if a.what == "all":
        body = ("## Factors beside the seeds'\n\n" + factors_text(lat, rate, het) + "\n\n"
                + "\n\n".join(pages[k] for k in ("latency", "rate", "mix", "hetero", "dd",
                                                   "sweep")))
        path = write_page(a, "report", "ulflow: the visualization-server experiments", body)
        with open(os.path.join(a.out, "factors.json"), "w") as f:
            json.dump({"latency": {str(k): v for k, v in lat.items()},
                       "rate": {str(k): v for k, v in rate.items()},
                       "hetero": {"wasted": het.get("wasted"),
                                  "reaction": het.get("reaction")}}, f, indent=1)
        log(a, f"report: {path}")
    log(a, f"done in {time.time() - t0:.0f} s; pages in {a.out}")


if __name__ == "__main__":
    projenv.use()
    main()
