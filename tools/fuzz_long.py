#!/usr/bin/env python3
"""ulsock long fuzzing (`make fuzz-long`, and part of `make soak`): every libFuzzer target
that tests/fuzz builds, run for -runs executions each (default 10,000,000), one after the
other, each from its checked-in seeds (tests/fuzz/corpus/TARGET) and its working corpus in
the build tree (where the smoke tests leave what they found, and where this run adds).

The targets and how to run them come from the fuzz build's own ctest smoke tests (label
`fuzz`, tests/fuzz/CMakeLists.txt): the same executable, corpus directories, per-input
timeout, memory limit, crash directory and environment, with -runs=N in place of the smoke
test's time limit. A build without those tests falls back to every fuzz_* executable under
BUILD/tests/fuzz, with tests/fuzz/corpus/NAME as its seeds.

For each target it prints, and with --json FILE writes: executions, seconds, executions
per second, coverage (libFuzzer's `cov:`, edges: at start from the corpus and at the end),
features (`ft:`), corpus size, the new inputs it added, peak RSS, the exit status, the
crash, leak, timeout or out-of-memory inputs it wrote (crashes found) and the exact
command. Each run's whole output goes to BUILD/tests/fuzz/long/TARGET.log.

Exit status: 0 when every target ran its executions without finding anything, 1 when one
found something or could not run, 2 on a usage error.

    tools/fuzz_long.py --build build-fuzz                 # 10 million executions each
    tools/fuzz_long.py --build build-fuzz -runs=100000 --json fuzz-long.json
    tools/fuzz_long.py --build build-fuzz --jobs 16 --targets fuzz_segment   # 16 cores
"""

import argparse
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import projenv  # noqa: E402

ROOT = projenv.ROOT
ARTIFACT_PREFIXES = ("crash-", "leak-", "timeout-", "oom-", "slow-unit-")
# What the smoke tests set (tests/fuzz/CMakeLists.txt), for the fallback.
DEFAULT_ENV = {"ULSOCK_TRUST_UIDS": "", "ASAN_OPTIONS": "detect_leaks=1"}


def smoke_tests(build):
    """The fuzz smoke tests of the build: [(target, argv, env)], from ctest's JSON."""
    try:
        out = subprocess.run(["ctest", "--show-only=json-v1", "-L", "fuzz"], cwd=build,
                             capture_output=True, text=True, timeout=120, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for test in json.loads(out).get("tests", []):
        argv = test.get("command") or []
        env = {}
        for prop in test.get("properties", []):
            if prop.get("name") == "ENVIRONMENT":
                env.update(v.split("=", 1) for v in prop["value"] if "=" in v)
        if argv:
            found.append((os.path.basename(argv[0]), argv, env))
    return found


def scanned_targets(build):
    """The fallback: every fuzz_* executable under BUILD/tests/fuzz, as run-fuzz.sh runs."""
    where = os.path.join(build, "tests", "fuzz")
    found = []
    for name in sorted(os.listdir(where)) if os.path.isdir(where) else []:
        path = os.path.join(where, name)
        if name.startswith("fuzz_") and os.path.isfile(path) and os.access(path, os.X_OK):
            work = os.path.join(where, "corpus", name)
            crashes = os.path.join(where, "crashes", name)
            os.makedirs(work, exist_ok=True)
            os.makedirs(crashes, exist_ok=True)
            argv = [path, "-timeout=10", "-rss_limit_mb=2048", "-print_final_stats=1",
                    f"-artifact_prefix={crashes}/", work]
            seeds = os.path.join(ROOT, "tests", "fuzz", "corpus", name)
            if os.path.isdir(seeds):
                argv.append(seeds)
            found.append((name, argv, dict(DEFAULT_ENV)))
    return found


def long_argv(argv, runs, extra):
    """The smoke command with -runs=N for its time limit (and no other run limit)."""
    keep = [a for a in argv[1:] if not re.match(r"-(max_total_time|runs)=", a)]
    flags = [a for a in keep if a.startswith("-")]
    dirs = [a for a in keep if not a.startswith("-")]
    return [argv[0], f"-runs={runs}"] + flags + extra + dirs


def artifact_dir(argv):
    for a in argv:
        if a.startswith("-artifact_prefix="):
            return os.path.dirname(a.split("=", 1)[1]) or "."
    return None


def artifacts(where):
    if not where or not os.path.isdir(where):
        return set()
    return {os.path.join(where, n) for n in os.listdir(where) if n.startswith(ARTIFACT_PREFIXES)}


def parse_output(text):
    """libFuzzer's figures: the INITED and last status lines and the final stats."""
    res = {}
    status = re.findall(r"^#(\d+)\s+(\w+)\s+(.*)$", text, re.M)
    for _, what, rest in status:
        fields = dict(re.findall(r"(cov|ft|corp|exec/s|rss): (\S+)", rest))
        if what == "INITED" and "cov" in fields:
            res["cov_start"] = int(fields["cov"])
        if "cov" in fields:
            res["cov"] = int(fields["cov"])
            res["ft"] = int(fields.get("ft", 0))
            res["corpus"] = fields.get("corp")
    for key, val in re.findall(r"^stat::(\w+):\s+(\d+)", text, re.M):
        res[key] = int(val)
    done = re.search(r"^Done (\d+) runs in (\d+) second", text, re.M)
    if done:
        res["done_runs"] = int(done.group(1))
    return res


def run_target(name, argv, env, runs, extra, logdir, limit, jobs=1):
    """Runs one target for runs executions in all: one process, or jobs processes at once
    (-seed=1..jobs, runs/jobs each, the same corpus directories), figures summed."""
    per = -(-runs // jobs)
    cmds = [long_argv(argv, per, extra + ([f"-seed={i + 1}"] if jobs > 1 else []))
            for i in range(jobs)]
    logs = [os.path.join(logdir, f"{name}.log" if jobs == 1 else f"{name}.{i + 1}.log")
            for i in range(jobs)]
    where = artifact_dir(cmds[0])
    before = artifacts(where)
    full_env = dict(os.environ)
    full_env.update(env)
    env_words = [f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    print(f"fuzz_long: {name}: {runs} executions"
          + (f" in {jobs} processes" if jobs > 1 else ""), flush=True)
    start = time.monotonic()
    outs = [open(log, "w") for log in logs]
    procs = [subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=full_env,
                              cwd=os.path.dirname(cmd[0])) for cmd, out in zip(cmds, outs)]
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(1, limit - (time.monotonic() - start))))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            codes.append("timeout")
    for out in outs:
        out.close()
    seconds = time.monotonic() - start
    figs = []
    for log in logs:
        with open(log, errors="replace") as f:
            figs.append(parse_output(f.read()))
    found = sorted(artifacts(where) - before)
    execs = sum(f.get("number_of_executed_units", f.get("done_runs", 0)) for f in figs)

    def pick(key, how):
        vals = [f[key] for f in figs if f.get(key) is not None]
        return how(vals) if vals else None

    rc = next((c for c in codes if c != 0), 0)
    return {
        "target": name,
        "executions": execs,
        "processes": jobs,
        "seconds": round(seconds, 1),
        "exec_per_sec": round(execs / seconds) if seconds > 0 else 0,
        "cov_start": pick("cov_start", min),
        "cov": pick("cov", max),
        "ft": pick("ft", max),
        "corpus": figs[0].get("corpus") if jobs == 1 else None,
        "new_units": pick("new_units_added", sum),
        "peak_rss_mb": pick("peak_rss_mb", max),
        "exit_status": rc,
        "crashes": found,
        "ok": rc == 0 and not found and execs >= runs,
        "command": " ".join(env_words + [shlex.quote(a) for a in cmds[0]])
                   + (f"  (and -seed=2..{jobs}, at once)" if jobs > 1 else ""),
        "log": logs[0] if jobs == 1 else os.path.join(logdir, f"{name}.N.log"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build-fuzz"),
                    help="the fuzz build (make fuzz-build; default build-fuzz)")
    ap.add_argument("-runs", "--runs", type=int, default=10_000_000,
                    help="executions per target (default 10,000,000)")
    ap.add_argument("--targets", help="comma-separated target names (default: all)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="processes per target at once, each with its own -seed and "
                         "runs/jobs executions (default 1); the figures are summed")
    ap.add_argument("--hours", type=float, default=24.0,
                    help="stop a target that is still running after this long (default 24)")
    ap.add_argument("--json", metavar="FILE", help="write the figures and commands here")
    ap.add_argument("extra", nargs="*", metavar="-flag=value",
                    help="more libFuzzer flags for every target (after --)")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("-runs must be at least 1")
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")
    build = os.path.abspath(args.build)
    targets = smoke_tests(build) or scanned_targets(build)
    if args.targets:
        want = set(args.targets.split(","))
        missing = want - {t[0] for t in targets}
        if missing:
            ap.error(f"no such fuzz target in {build}: {', '.join(sorted(missing))}")
        targets = [t for t in targets if t[0] in want]
    if not targets:
        print(f"fuzz_long: no fuzz targets in {build} (build it with `make fuzz-build`)",
              file=sys.stderr)
        return 1
    logdir = os.path.join(build, "tests", "fuzz", "long")
    os.makedirs(logdir, exist_ok=True)
    started = datetime.datetime.now().isoformat(timespec="seconds")
    results = []
    for name, argv, env in targets:
        r = run_target(name, argv, env, args.runs, args.extra, logdir, args.hours * 3600,
                       args.jobs)
        results.append(r)
        print(f"fuzz_long: {name}: {r['executions']} executions in {r['seconds']} s "
              f"({r['exec_per_sec']}/s), cov {r['cov_start']} -> {r['cov']}, ft {r['ft']}, "
              f"exit {r['exit_status']}, {len(r['crashes'])} found"
              + "".join(f"\n    found: {c}" for c in r["crashes"]), flush=True)
        print(f"    command: {r['command']}", flush=True)
    print(f"\n{'target':<22} {'executions':>12} {'seconds':>9} {'exec/s':>8} {'cov':>7} "
          f"{'ft':>8} {'exit':>7} found")
    for r in results:
        print(f"{r['target']:<22} {r['executions']:>12} {r['seconds']:>9} "
              f"{r['exec_per_sec']:>8} {str(r['cov']):>7} {str(r['ft']):>8} "
              f"{str(r['exit_status']):>7} {len(r['crashes'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"started": started, "build": build, "runs": args.runs,
                       "targets": results}, f, indent=2)
            f.write("\n")
    failed = [r["target"] for r in results if not r["ok"]]
    if failed:
        print(f"fuzz_long: FAILED: {', '.join(failed)} (see the logs in {logdir})")
        return 1
    print("fuzz_long: passed")
    return 0


if __name__ == "__main__":
    projenv.use()
    sys.exit(main())
