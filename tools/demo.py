#!/usr/bin/env python3
"""ulsock demo (`make demo`): kernel TCP and ulsock side by side on two real programs.

  sockperf ping-pong, 64 B messages, 2 s: half round trip latency
  redis-benchmark GET with one client, 20000 requests: requests per second

Each runs on kernel TCP, then with both ends under `ulsock run --profile latency` and
`--profile balanced`, interleaved, three times; the table shows medians and, beside each
ulsock median, how many times faster or slower it is than kernel TCP ("297x faster"). A
cell that cannot run reads "failed" (the reason goes to stderr); servers are always
stopped.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
from benchlib import BenchError, Substrate  # noqa: E402
import projenv  # noqa: E402

PARAMS = dict(seconds=2, iperf_seconds=3, n_get1=20000, n_get50=100000, n_conn=10000)
ROWS = [("pp64", "sockperf ping-pong 64 B, latency"), ("redis1", "redis GET, 1 client")]
PROFILES = ["latency", "balanced"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def measure(subs, repeats, params):
    """Returns {(bench, substrate): [samples]} and the first error of each cell."""
    samples, errors = {}, {}
    for name, _ in ROWS:
        b = benchlib.benchmark(name)
        for rep in range(repeats):
            for s in subs[rep % len(subs):] + subs[:rep % len(subs)]:
                key = (name, s.name)
                samples.setdefault(key, [])
                try:
                    v = b.run(s, params, lambda argv: None)
                    samples[key].append(v)
                    log("  %-7s %-16s run %d: %s %s" % (name, s.name, rep + 1,
                                                        benchlib.fmt_value(v), b.unit))
                except BenchError as e:
                    errors.setdefault(key, str(e))
                    log("  %-7s %-16s run %d: failed: %s" % (name, s.name, rep + 1,
                                                             str(e).splitlines()[0]))
    return samples, errors


def factor_text(b, value, base):
    """ulsock against kernel TCP as a person reads it, the same way on every row whichever
    way the row's unit points: "297x faster", "1.4x slower" ("same" within 5%)."""
    if not value or not base or value <= 0 or base <= 0:
        return ""
    factor = max(value, base) / min(value, base)
    if factor < 1.05:
        return "same"
    better = value < base if b.lower_is_better else value > base
    return "%s %s" % (fmt_factor(factor), "faster" if better else "slower")


def fmt_factor(f):
    """297x, 29x, 1.4x: whole numbers from 10 up, one decimal below."""
    return ("%.0fx" if f >= 9.95 else "%.1fx") % f


def cell_text(b, value, base):
    if value is None:
        return "failed"
    text = "%s %s" % (benchlib.fmt_value(value), b.unit)
    factor = factor_text(b, value, base)
    if factor:
        text += "  " + factor
    return text


def print_table(subs, samples, repeats):
    head = [""] + ["kernel TCP" if s.profile is None else "ulsock " + s.profile for s in subs]
    rows = [head]
    for name, title in ROWS:
        b = benchlib.benchmark(name)
        medians = [benchlib.median(samples.get((name, s.name), [])) for s in subs]
        row = [title]
        for i, m in enumerate(medians):
            row.append(cell_text(b, m, medians[0] if i > 0 else None))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    print()
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    print("\nmedian of %d run%s. \"Nx faster\" or \"Nx slower\" compares ulsock with "
          "kernel TCP on the same row:\nN times less or more time per round trip, N times "
          "more or fewer requests per second." % (repeats, "" if repeats == 1 else "s"))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--build", default=benchlib.default_build_dir(),
                    help="build directory holding bin/ulsock (default %(default)s)")
    args = ap.parse_args()
    benchlib.install_signal_handlers()

    build = os.path.abspath(args.build)
    params = dict(PARAMS, build_dir=build)
    subs = [Substrate(None, build)] + [Substrate(p, build) for p in PROFILES]
    print("ulsock demo: kernel TCP vs ulsock (both ends wrapped with `ulsock run`), "
          "%d interleaved runs each; this takes about a minute." % args.repeats, flush=True)
    samples, errors = measure(subs, max(1, args.repeats), params)
    print_table(subs, samples, max(1, args.repeats))
    for (name, sub), err in sorted(errors.items()):
        print("%s on %s failed: %s" % (name, sub, err.splitlines()[0]))
    kernel_failed = any(not samples.get((n, subs[0].name)) for n, _ in ROWS)
    return 1 if kernel_failed else 0


if __name__ == "__main__":
    projenv.use()
    sys.exit(main())
