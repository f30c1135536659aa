#!/usr/bin/env python3
"""ulsock benchmark (`make bench`): kernel TCP and ulsock side by side, in one run.

Every benchmark runs on every substrate (kernel TCP, then ulsock with each profile),
interleaved: repeat r runs the substrates in an order rotated by r, so slow drifts of the
machine hit all of them alike. Reported numbers are medians over the repeats; the ratio
is ulsock / kernel (for latency lower is better, for every other row higher is better).
A benchmark with a reference (Benchmark.reference, such as fi_pingpong beside the fabric
rows of benchrows_fabric.py) runs it as one more column, interleaved like a substrate, and
its ulsock cells also give ulsock / reference. A row that cannot run on this machine at
all (its BenchError has skip set) is reported as skipped, with the reason.

Progress goes to stderr, the table to stdout. Exit status 1 when some cell has no
successful run at all (with --smoke: when any run failed), 0 otherwise; --smoke skips
benchmarks whose programs are not installed and exits 77 when none is left.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
from benchlib import BenchError, Substrate  # noqa: E402
import projenv  # noqa: E402

PROFILES = ["latency", "balanced", "efficient"]

# Run lengths. seconds bounds each time-based client; n_* bound the count-based ones.
MODES = {
    "full": dict(repeats=5, seconds=2, iperf_seconds=3, n_get1=20000, n_get50=100000,
                 n_conn=20000),
    "quick": dict(repeats=5, seconds=1, iperf_seconds=1, n_get1=5000, n_get50=20000,
                  n_conn=2000),
    "smoke": dict(repeats=1, seconds=1, iperf_seconds=1, n_get1=500, n_get50=2000,
                  n_conn=100),
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, help="runs per cell (default 5)")
    ap.add_argument("--quick", action="store_true", help="1 s runs, small counts")
    ap.add_argument("--smoke", action="store_true",
                    help="one tiny run per cell, to check the tool itself (used by ctest)")
    ap.add_argument("--only", help="comma-separated benchmarks (see --list)")
    ap.add_argument("--profiles",
                    help="comma-separated ulsock profiles to compare with kernel TCP "
                         "(default %s; balanced with --smoke)" % ",".join(PROFILES))
    ap.add_argument("--build", default=benchlib.default_build_dir(),
                    help="build directory holding bin/ulsock (default %(default)s)")
    ap.add_argument("--baseline-build", metavar="DIR",
                    help="also run each profile with the ulsock of this older build (its "
                         "substrates are named base-PROFILE), interleaved with the others: "
                         "a before/after comparison in one run")
    ap.add_argument("--json", metavar="FILE", help="write every sample and command here")
    ap.add_argument("--markdown", metavar="FILE",
                    help="write the table and the exact commands here")
    ap.add_argument("--plot", metavar="PNG", help="bar chart of the ratios (matplotlib)")
    ap.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = ap.parse_args()

    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    args.mode = mode
    args.params = dict(MODES[mode], build_dir=os.path.abspath(args.build))
    if args.repeats is not None:
        if args.repeats < 1:
            ap.error("--repeats must be at least 1")
        args.params["repeats"] = args.repeats

    names = [b.name for b in benchlib.BENCHMARKS]
    args.names = names
    if args.only:
        args.names = [n.strip() for n in args.only.split(",") if n.strip()]
        bad = [n for n in args.names if n not in names]
        if bad:
            ap.error("unknown benchmark %s; choose from %s" % (", ".join(bad), ", ".join(names)))
    if args.profiles is None:
        args.profiles = "balanced" if args.smoke else ",".join(PROFILES)
    args.profile_list = [p.strip() for p in args.profiles.split(",") if p.strip()]
    bad = [p for p in args.profile_list if p not in PROFILES]
    if bad:
        ap.error("unknown profile %s; choose from %s" % (", ".join(bad), ", ".join(PROFILES)))
    return args


class Reference:
    """The column of a benchmark's own reference tool (its run() tells it by .reference)."""
    profile = None
    reference = True

    def __init__(self, name):
        self.name = name


def columns(benches, subs):
    """The substrates, then the reference column of each benchmark that has one."""
    refs = []
    for b in benches:
        name = getattr(b, "reference", None)
        if name and name not in [r.name for r in refs]:
            refs.append(Reference(name))
    return subs + refs


def bench_subs(b, cols, subs):
    return subs + [c for c in cols if c.name == getattr(b, "reference", None)]


class Cell:
    """All runs of one benchmark on one substrate."""

    def __init__(self):
        self.samples = []
        self.errors = []
        self.commands = None
        self.skipped = None

    def median(self):
        return benchlib.median(self.samples)


def run_all(args, subs):
    benches = [benchlib.benchmark(n) for n in args.names]
    repeats = args.params["repeats"]
    cols = columns(benches, subs)
    cells = {(b.name, s.name): Cell() for b in benches for s in bench_subs(b, cols, subs)}
    total = len(cells) * repeats
    step = 0
    for b in benches:
        bsubs = bench_subs(b, cols, subs)
        for rep in range(repeats):
            if cells[(b.name, subs[0].name)].skipped:
                break
            order = bsubs[rep % len(bsubs):] + bsubs[:rep % len(bsubs)]
            for s in order:
                step += 1
                cell = cells[(b.name, s.name)]
                cmds = []
                t0 = time.monotonic()
                try:
                    v = b.run(s, args.params, cmds.append)
                    cell.samples.append(v)
                    result = "%s %s" % (benchlib.fmt_value(v), b.unit)
                except BenchError as e:
                    if getattr(e, "skip", False):
                        for t in bsubs:
                            cells[(b.name, t.name)].skipped = str(e)
                        log("bench: skipping %s: %s" % (b.name, e))
                        break
                    cell.errors.append(str(e))
                    first = str(e).splitlines()[0] if str(e) else "error"
                    result = "FAILED: " + first
                    if len(str(e).splitlines()) > 1:
                        log("    " + "\n    ".join(str(e).splitlines()[1:]))
                if cell.commands is None and cmds:
                    cell.commands = [benchlib.shell_line(c) for c in cmds]
                log("[%3d/%d] %-8s %-17s rep %d: %s (%.1f s)"
                    % (step, total, b.name, s.name, rep + 1, result, time.monotonic() - t0))
    return benches, cells, cols


def ratio(cell, base):
    m, k = cell.median(), base.median()
    if m is None or not k:
        return None
    return m / k


def table_rows(benches, subs, cells, repeats):
    """Rows of strings: header first. ulsock cells read 'median (xratio)', and with a
    reference 'median (xratio, xratio-to-reference REF)'. SUBS: the columns."""
    head = ["benchmark", "unit"] + [s.name for s in subs]
    rows = [head]
    for b in benches:
        base = cells[(b.name, subs[0].name)]
        ref = cells.get((b.name, getattr(b, "reference", None)))
        row = [b.title, b.unit + (" (lower is better)" if b.lower_is_better else "")]
        for i, s in enumerate(subs):
            c = cells.get((b.name, s.name))
            if c is None or c.skipped:
                row.append("-" if c is None else "skipped")
                continue
            text = benchlib.fmt_value(c.median())
            if i > 0 and c.median() is not None and not getattr(s, "reference", False):
                r = ratio(c, base)
                text += "  (x%.2f" % r if r is not None else "  (x?"
                r = ratio(c, ref) if ref is not None else None
                text += ", x%.2f %s)" % (r, b.reference) if r is not None else ")"
            if c.samples and len(c.samples) < repeats:
                text += " [%d/%d ok]" % (len(c.samples), repeats)
            row.append(text)
        rows.append(row)
    return rows


def format_text(rows):
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_markdown(rows):
    out = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(out)


def host_info():
    info = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "kernel": platform.release(), "machine": platform.machine(),
            "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return info


def c2c_probe(build_dir, seconds):
    """The cache-line round trip between CPU 0 and 1 (bench/c2c.c), min/median/max in ns.

    Every cross-process fast path pays it, and on a virtual machine it moves with the
    host's placement of the virtual CPUs, so a run records it before and after."""
    prog = os.path.join(build_dir, "bin", "uls-c2c")
    if not os.access(prog, os.X_OK) or (os.cpu_count() or 1) < 2:
        return None
    try:
        out = subprocess.run([prog, "-s", str(seconds), "-i", "250"], capture_output=True,
                             text=True, timeout=seconds + 30).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    m = re.search(r"c2c: min=(\d+) median=(\d+) max=(\d+)", out)
    return {"min": int(m[1]), "median": int(m[2]), "max": int(m[3])} if m else None


def c2c_text(c2c):
    return "%d/%d/%d ns" % (c2c["min"], c2c["median"], c2c["max"]) if c2c else "not measured"


def to_json(args, benches, subs, cells):
    res = {}
    for b in benches:
        base = cells[(b.name, subs[0].name)]
        res[b.name] = {"title": b.title, "unit": b.unit, "lower_is_better": b.lower_is_better,
                       "substrates": {}}
        ref = cells.get((b.name, getattr(b, "reference", None)))
        if base.skipped:
            res[b.name]["skipped"] = base.skipped
        if ref is not None:
            res[b.name]["reference"] = {
                "name": b.reference, "samples": ref.samples, "median": ref.median(),
                "errors": ref.errors, "commands": ref.commands or []}
        for s in subs:
            c = cells[(b.name, s.name)]
            res[b.name]["substrates"][s.name] = {
                "samples": c.samples, "median": c.median(),
                "ratio_to_kernel": ratio(c, base), "errors": c.errors,
                "commands": c.commands or []}
            if ref is not None:
                res[b.name]["substrates"][s.name]["ratio_to_reference"] = ratio(c, ref)
    host = host_info()
    host["c2c_before"], host["c2c_after"] = args.c2c
    return {"host": host, "mode": args.mode, "params": args.params,
            "substrates": [s.name for s in subs], "results": res}


def write_markdown(path, args, rows, benches, subs, cells):
    p = args.params
    with open(path, "w") as f:
        f.write("# ulsock benchmark\n\n")
        h = host_info()
        f.write("%s, %s CPUs (%s), Linux %s. Median of %d runs per cell, substrates "
                "interleaved; ratio = ulsock / kernel TCP.\n\n"
                % (h["date"], h["cpus"], h.get("cpu", "?"), h["kernel"], p["repeats"]))
        f.write("Cache-line round trip between CPU 0 and 1 (`uls-c2c`, min/median/max): "
                "%s before the run, %s after.\n\n" % (c2c_text(args.c2c[0]),
                                                        c2c_text(args.c2c[1])))
        f.write(format_markdown(rows) + "\n\n## Commands\n\n")
        f.write("Each server runs on a fresh free loopback port (PORT below was the first "
                "run's). ulsock wraps both ends with `ulsock run --profile P --`.\n\n")
        for b in benches:
            f.write("### %s\n\n```\n" % b.title)
            for s in subs:
                if (b.name, s.name) not in cells:
                    continue
                f.write("# %s\n" % s.name)
                if cells[(b.name, s.name)].skipped:
                    f.write("(skipped: %s)\n" % cells[(b.name, s.name)].skipped)
                for line in cells[(b.name, s.name)].commands or ["(did not start)"]:
                    f.write("%s\n" % line)
            f.write("```\n\n")


def plot(args, data):
    """Runs tools/plot_bench.py, which finds a Python with matplotlib by itself."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(data, f)
        tmp = f.name
    try:
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plot_bench.py")
        subprocess.run([sys.executable, script, tmp, args.plot], timeout=120, check=True)
        log("plot written to %s" % args.plot)
    except (subprocess.SubprocessError, OSError) as e:
        log("plot failed: %s" % e)
    finally:
        os.unlink(tmp)


def main():
    args = parse_args()
    if args.list:
        for b in benchlib.BENCHMARKS:
            print("%-9s %s (%s)" % (b.name, b.title, b.unit))
        return 0
    benchlib.install_signal_handlers()
    subs = [Substrate(None, args.params["build_dir"])]
    subs += [Substrate(p, args.params["build_dir"]) for p in args.profile_list]
    if args.baseline_build:
        base = os.path.abspath(args.baseline_build)
        for p in args.profile_list:
            s = Substrate(p, base)
            s.name = "base-" + p
            subs.append(s)
    log("bench: %s mode, %d repeats, %s; substrates %s"
        % (args.mode, args.params["repeats"], ",".join(args.names),
           ",".join(s.name for s in subs)))

    if args.smoke:
        # The smoke test checks the tool, not the machine: skip what is not installed.
        missing = [n for n in args.names
                   if any(not shutil.which(p) for p in benchlib.benchmark(n).programs)]
        for n in missing:
            log("bench: skipping %s: %s not installed"
                % (n, ", ".join(benchlib.benchmark(n).programs)))
        args.names = [n for n in args.names if n not in missing]
        if not args.names:
            return 77

    probe_s = 1 if args.smoke else 3
    before = c2c_probe(args.params["build_dir"], probe_s)
    benches, cells, cols = run_all(args, subs)
    args.c2c = (before, c2c_probe(args.params["build_dir"], probe_s))
    rows = table_rows(benches, cols, cells, args.params["repeats"])
    print(format_text(rows))
    print("\nmedian of %d runs; (xR) = ulsock / kernel TCP, (.., xF REF) = ulsock / REF"
          % args.params["repeats"])
    for b in benches:
        if cells[(b.name, subs[0].name)].skipped:
            print("skipped %s: %s" % (b.name, cells[(b.name, subs[0].name)].skipped))
    print("cache-line round trip CPU 0 <-> 1 (min/median/max): %s before, %s after"
          % (c2c_text(args.c2c[0]), c2c_text(args.c2c[1])))

    data = to_json(args, benches, subs, cells)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
    if args.markdown:
        write_markdown(args.markdown, args, rows, benches, cols, cells)
    if args.plot:
        plot(args, data)

    ran = [c for c in cells.values() if not c.skipped]
    if args.smoke:
        return 1 if any(c.errors for c in ran) else 0
    return 1 if any(not c.samples for c in ran) else 0


if __name__ == "__main__":
    projenv.use()
    sys.exit(main())
