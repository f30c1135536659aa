#!/usr/bin/env python3
"""How far short connections can go (docs/PERFORMANCE.md, "Short connections: the floor
under a kernel TCP connection"): uls-connrate's modes on kernel TCP, Unix domain sockets
and under ulsock, interleaved, each cell a fork of server and client, medians as ratios
to kernel TCP with a byte each way.

    tools/connfloor.py --build build               # 5 rounds of 20,000 connections
    tools/connfloor.py --build build --rounds 7 --json floor.json

A cell's figure is the connections per second the client prints. The rounds run the
cells in the table's order; nothing else should run on the machine, or say what did:
the answer depends on what a wake-up between the two processes costs.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import projenv  # noqa: E402

# (label, the uls-connrate flags, how it runs: plain, ulsock, or the library loaded
# with nothing accelerated)
CELLS = [
    ("kernel TCP, a byte each way", [], "plain"),
    ("kernel TCP, no byte (-e)", ["-e"], "plain"),
    ("Unix domain, a byte each way (-u)", ["-u"], "plain"),
    ("Unix domain, no byte (-u -e)", ["-u", "-e"], "plain"),
    ("ulsock, a byte each way", [], "ulsock"),
    ("ulsock, no byte (-e)", ["-e"], "ulsock"),
    ("library loaded, nothing accelerated", [], "disabled"),
]


def run_cell(build, flags, how, count, seconds):
    prog = [os.path.join(build, "bin", "uls-connrate")] + flags + \
        ["-n", str(count), "-t", str(seconds)]
    env = dict(os.environ)
    if how != "plain":
        prog = [os.path.join(build, "bin", "ulsock"), "run", "--"] + prog
    if how == "disabled":
        env["ULSOCK_DISABLE"] = "1"
    out = subprocess.run(prog, capture_output=True, text=True, env=env,
                         timeout=seconds + 120, check=True).stdout
    m = re.search(r"conn_per_sec=([0-9.]+)", out)
    if not m:
        raise RuntimeError(f"no rate in the output of {' '.join(prog)}: {out!r}")
    return float(m.group(1)), ("ULSOCK_DISABLE=1 " if how == "disabled" else "") + " ".join(prog)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(projenv.ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-n", "--count", type=int, default=20000)
    ap.add_argument("-t", "--seconds", type=float, default=2)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    samples = {label: [] for label, _, _ in CELLS}
    commands = {}
    for r in range(args.rounds):
        for label, flags, how in CELLS:
            rate, cmd = run_cell(args.build, flags, how, args.count, args.seconds)
            samples[label].append(rate)
            commands[label] = cmd
            print(f"round {r + 1}: {label}: {rate:.0f} conn/s", flush=True)
    base = statistics.median(samples[CELLS[0][0]])
    print(f"\n{'cell':<40} {'median conn/s':>14} {'ratio':>7}")
    for label, _, _ in CELLS:
        med = statistics.median(samples[label])
        print(f"{label:<40} {med:>14.0f} {med / base:>7.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": args.rounds, "samples": samples, "commands": commands},
                      f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    projenv.use()
    sys.exit(main())
