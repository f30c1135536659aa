#!/usr/bin/env python3
"""Smoke test of ulsock-bench (ctest, label bench): runs every test once in --quick mode
on one substrate and checks that the JSON parses and is sane. No timing thresholds.

usage: check_ubench.py BUILD_DIR [kernel | unix | ulsock-PROFILE] [EXTRA ARGS...]
"""

import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "pylib"))
from ulstest.env import clean_env  # noqa: E402

TESTS = ["latency", "bw", "bibw", "multistream", "hotspot", "fanin", "fanout", "connect",
         "ganglia", "overhead"]
# Which figure each test must report as a positive number.
FIGURE = {"latency": "lat_median_us", "hotspot": "lat_median_us", "bw": "mb_s",
          "bibw": "mb_s", "multistream": "mb_s", "fanin": "mb_s", "fanout": "mb_s",
          "connect": "conn_s", "ganglia": "conn_s", "overhead": "ns_per_call"}


def problems(rows):
    """Every complaint about the rows, as strings (empty when all is well)."""
    bad = []
    seen = {r.get("test") for r in rows}
    bad += ["no rows for test %s" % t for t in TESTS if t not in seen]
    for r in rows:
        name = "%s %s size %s clients %s" % (r.get("test"), r.get("op", r.get("mode")),
                                            r.get("size"), r.get("clients"))
        fig = r.get(FIGURE.get(r.get("test"), ""), 0)
        if not fig or fig <= 0:
            bad.append("%s: %s missing or not positive" % (name, FIGURE.get(r.get("test"))))
        if r.get("count", 0) <= 0:
            bad.append("%s: count not positive" % name)
        if r.get("verified") is not True:
            bad.append("%s: not verified" % name)
        if r["test"] != "overhead":
            if r["bytes_sent"] != r["server_bytes_received"]:
                bad.append("%s: sent %d, server received %d"
                           % (name, r["bytes_sent"], r["server_bytes_received"]))
            if r["bytes_received"] != r["server_bytes_sent"]:
                bad.append("%s: received %d, server sent %d"
                           % (name, r["bytes_received"], r["server_bytes_sent"]))
            if r["bytes_sent"] + r["bytes_received"] <= 0:
                bad.append("%s: no bytes moved" % name)
            if not r.get("cpu_client_s", 0) > 0 and not r.get("cpu_server_s", 0) > 0:
                bad.append("%s: no CPU time recorded" % name)
    return bad


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    build = sys.argv[1]
    sub = sys.argv[2] if len(sys.argv) > 2 else "kernel"
    prog = os.path.join(build, "bin", "ulsock-bench")
    argv = [prog, "--quick", "--time", "0.05", "--json-lines", "--label", sub]
    argv += sys.argv[3:]
    tmp = None
    if sub == "unix":
        tmp = tempfile.mkdtemp(prefix="ubench-")
        argv += ["--unix", os.path.join(tmp, "sock")]
    elif sub.startswith("ulsock-"):
        ulsock = os.path.join(build, "bin", "ulsock")
        argv = [ulsock, "run", "--profile", sub[len("ulsock-"):], "--"] + argv
    env = clean_env(drop_preload=False)
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=150)
    if tmp:
        os.rmdir(tmp) if not os.listdir(tmp) else None
    sys.stderr.write(proc.stderr)
    rows = []
    for line in proc.stdout.splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            print("not JSON: %r" % line)
            return 1
    bad = problems(rows)
    if proc.returncode != 0:
        bad.append("ulsock-bench exited with status %d" % proc.returncode)
    for b in bad:
        print("FAIL: " + b)
    print("%s: %d rows, %d problems" % (sub, len(rows), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
