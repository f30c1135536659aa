#!/usr/bin/env python3
"""ulsock-bench driver (`make ubench`): the seeds' micro-benchmarks on every substrate.

Runs build/bin/ulsock-bench on each substrate (kernel TCP, ulsock with each profile,
kernel Unix domain sockets through --unix), interleaved: repeat r rotates the order of
the substrates, so slow drifts of the machine hit all of them alike. Each figure is the
median over the repeats, with its ratio to kernel TCP. Where installed, libfabric's
fi_pingpong (shm and tcp providers) adds latency peers, and sockperf, iperf3 and qperf
run as cross-checks on kernel TCP and ulsock (tools/benchlib.py starts and bounds them).

Progress goes to stderr. The results go to --json (every sample and command), and
--report DIR writes the Markdown report and its PNG plots (tools/ubench_report.py).

Exit status 1 when some cell has no successful run at all, 0 otherwise.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import benchlib  # noqa: E402
from benchlib import BenchError, Substrate  # noqa: E402
import projenv  # noqa: E402
import ubench_report  # noqa: E402

PROFILES = ["latency", "balanced", "efficient"]
TESTS = ["latency", "bw", "bibw", "multistream", "hotspot", "fanin", "fanout", "connect",
         "ganglia", "overhead"]
# Unix domain sockets have no preload to measure: overhead is kernel TCP's business.
UNIX_TESTS = [t for t in TESTS if t != "overhead"]

# Arguments of ulsock-bench per mode; repeats and lengths of the peers and cross-checks
# (--quick runs those once, and only the short cross-checks, to stay under a minute).
MODES = {
    "full": dict(repeats=5, bench_args=[], fi_sizes=[1, 64, 1024, 16384, 65536, 1048576],
                 fi_iters=2000, seconds=2, extra_repeats=5, checks=None),
    "quick": dict(repeats=5, bench_args=["--quick", "--time", "0.03", "--sizes", "64,64K",
                                         "--clients", "1,4"],
                  fi_sizes=[64], fi_iters=500, seconds=1, extra_repeats=1,
                  checks=["iperf3", "qperf_tcp_lat", "qperf_tcp_bw"]),
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class UnixSubstrate(Substrate):
    """Kernel Unix domain stream sockets: plain processes, ulsock-bench --unix."""

    def __init__(self, build_dir):
        super().__init__(None, build_dir)
        self.name = "unix"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="two sizes, 1 and 4 clients, 30 ms rows (under a minute)")
    ap.add_argument("--repeats", type=int, help="runs per cell (default 5)")
    ap.add_argument("--tests", help="comma-separated ulsock-bench tests (default all)")
    ap.add_argument("--profiles", default=",".join(PROFILES),
                    help="ulsock profiles beside kernel TCP (default %(default)s)")
    ap.add_argument("--no-unix", action="store_true", help="leave out Unix domain sockets")
    ap.add_argument("--no-peers", action="store_true", help="leave out fi_pingpong")
    ap.add_argument("--no-crosscheck", action="store_true",
                    help="leave out sockperf, iperf3 and qperf")
    ap.add_argument("--bench-args", default="",
                    help="extra ulsock-bench arguments, e.g. '--sizes 1,64,1K'")
    ap.add_argument("--build", default=benchlib.default_build_dir(),
                    help="build directory (default %(default)s)")
    ap.add_argument("--json", metavar="FILE", help="write every sample and command here")
    ap.add_argument("--report", metavar="DIR",
                    help="write report.md, the plots and results.json into DIR")
    ap.add_argument("--note", default="", help="a line for the report's header")
    args = ap.parse_args(argv)
    args.mode = "quick" if args.quick else "full"
    args.params = dict(MODES[args.mode])
    if args.repeats is not None:
        if args.repeats < 1:
            ap.error("--repeats must be at least 1")
        args.params["repeats"] = args.repeats
    args.tests = [t.strip() for t in (args.tests or ",".join(TESTS)).split(",") if t.strip()]
    bad = [t for t in args.tests if t not in TESTS]
    if bad:
        ap.error("unknown test %s; choose from %s" % (", ".join(bad), ", ".join(TESTS)))
    args.profile_list = [p.strip() for p in args.profiles.split(",") if p.strip()]
    bad = [p for p in args.profile_list if p not in PROFILES]
    if bad:
        ap.error("unknown profile %s; choose from %s" % (", ".join(bad), ", ".join(PROFILES)))
    args.build = os.path.abspath(args.build)
    return args


def bench_command(args, sub, tests, tmpdir):
    prog = os.path.join(args.build, "bin", "ulsock-bench")
    argv = [prog] + tests + args.params["bench_args"] + shlex.split(args.bench_args)
    argv += ["--json-lines", "--label", sub.name]
    if isinstance(sub, UnixSubstrate):
        argv += ["--unix", os.path.join(tmpdir, "ubench.sock")]
    return sub.wrap(argv)


def run_bench(args, sub, tmpdir):
    """One ulsock-bench run on one substrate: (rows, command line)."""
    tests = UNIX_TESTS if isinstance(sub, UnixSubstrate) else TESTS
    tests = [t for t in args.tests if t in tests]
    if not tests:
        return [], ""
    sub.check()
    cmd = bench_command(args, sub, tests, tmpdir)
    out = benchlib.run(cmd, sub.env(), timeout=600)
    rows = []
    for line in out.splitlines():
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except ValueError:
                raise BenchError("bad JSON line from ulsock-bench: %r" % line)
    return rows, benchlib.shell_line(cmd)


def fi_pingpong(provider, size, iters, record):
    """Half round trip in microseconds of libfabric's fi_pingpong (rdm endpoints)."""
    benchlib.need("fi_pingpong")
    port = benchlib.free_port()
    base = ["fi_pingpong", "-p", provider, "-e", "rdm", "-S", str(size), "-I", str(iters)]
    server = base + ["-B", str(port)]
    client = base + ["-P", str(port), "127.0.0.1"]
    record(server)
    record(client)
    with benchlib.Proc(server, dict(os.environ)) as srv:
        benchlib.wait_listening(port, srv)
        out = benchlib.run(client, dict(os.environ), 60)
    m = re.findall(r"^\s*\d+[kKmMgG]?\s+\S+\s+\S+\s+\S+\s+\S+\s+([0-9.]+)\s+([0-9.]+)\s+[0-9.]+\s*$",
                   out, re.M)
    if not m:
        raise BenchError("no fi_pingpong result in:\n%s" % out[-800:])
    return float(m[-1][1])


def qperf_test(test):
    def fn(sub, params, record):
        benchlib.need("qperf")
        port = benchlib.free_port()
        srv = sub.wrap(["qperf", "-lp", str(port)])
        cli = sub.wrap(["qperf", "-lp", str(port), "127.0.0.1", "-t",
                        str(params["seconds"]), test])
        record(srv)
        record(cli)
        with benchlib.Proc(srv, sub.env()) as p:
            benchlib.wait_listening(port, p)
            out = benchlib.run(cli, sub.env(), params["seconds"] + 60)
        m = re.search(r"(latency|bw)\s*=\s*([0-9.]+)\s*(\S+)", out)
        if not m:
            raise BenchError("no qperf result in:\n%s" % out[-800:])
        scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "KB/sec": 1e-3, "MB/sec": 1.0,
                 "GB/sec": 1e3}.get(m.group(3), 1.0)
        return float(m.group(2)) * scale
    return fn


def crosschecks():
    """(name, title, unit, lower_is_better, fn) of every cross-check."""
    return [
        ("sockperf_pp64", "sockperf ping-pong 64 B, half round trip", "us", True,
         benchlib.sockperf_pp(64)),
        ("sockperf_tp64", "sockperf throughput 64 B", "msg/s", False, benchlib.sockperf_tp(64)),
        ("iperf3", "iperf3 one stream, 128 KiB writes", "Gbit/s", False,
         benchlib.iperf3_stream),
        ("qperf_tcp_lat", "qperf tcp_lat (64 B)", "us", True, qperf_test("tcp_lat")),
        ("qperf_tcp_bw", "qperf tcp_bw", "MB/s", False, qperf_test("tcp_bw")),
    ]


class Collector:
    """Samples by (row key, metric, substrate), errors and the commands seen."""

    def __init__(self):
        self.rows = {}
        self.commands = {}
        self.errors = []
        self.extra = {}

    def add_rows(self, sub, rows):
        for r in rows:
            key = ubench_report.row_key(r)
            cell = self.rows.setdefault(key, {})
            for metric in ubench_report.METRICS:
                if metric in r:
                    cell.setdefault(metric, {}).setdefault(sub, []).append(r[metric])
            cell.setdefault("verified", {}).setdefault(sub, []).append(r.get("verified"))

    def add_extra(self, name, meta, sub, value, err=None, cmds=None):
        cell = self.extra.setdefault(name, dict(meta, substrates={}))
        s = cell["substrates"].setdefault(sub, {"samples": [], "errors": [], "commands": []})
        if value is not None:
            s["samples"].append(value)
        if err:
            s["errors"].append(err)
        if cmds and not s["commands"]:
            s["commands"] = [benchlib.shell_line(c) for c in cmds]


def step_log(step, total, what, sub, rep, t0, result):
    log("[%3d/%d] %-22s %-17s rep %d: %s (%.1f s)"
        % (step, total, what, sub, rep + 1, result, time.monotonic() - t0))


def run_matrix(args, subs, col):
    repeats = args.params["repeats"]
    peers = [] if args.no_peers or not shutil.which("fi_pingpong") else ["shm", "tcp"]
    checks = [] if args.no_crosscheck else [
        c for c in crosschecks() if args.params["checks"] is None or c[0] in args.params["checks"]]
    tcp_subs = [s for s in subs if not isinstance(s, UnixSubstrate)]
    extra = min(repeats, args.params["extra_repeats"])
    total = repeats * len(subs) + extra * (len(peers) * len(args.params["fi_sizes"])
                                           + len(checks) * len(tcp_subs))
    step = 0
    with tempfile.TemporaryDirectory(prefix="ubench-") as tmp:
        for rep in range(repeats):
            order = subs[rep % len(subs):] + subs[:rep % len(subs)]
            for s in order:
                step += 1
                t0 = time.monotonic()
                try:
                    rows, cmd = run_bench(args, s, tmp)
                    col.add_rows(s.name, rows)
                    col.commands.setdefault(s.name, cmd)
                    bad = sum(1 for r in rows if not r.get("verified"))
                    step_log(step, total, "ulsock-bench", s.name, rep, t0,
                             "%d rows%s" % (len(rows), ", %d NOT verified" % bad if bad else ""))
                except BenchError as e:
                    col.errors.append("%s rep %d: %s" % (s.name, rep + 1, e))
                    step_log(step, total, "ulsock-bench", s.name, rep, t0,
                             "FAILED: " + str(e).splitlines()[0])
            if rep >= extra:
                continue
            for prov in peers:
                for size in args.params["fi_sizes"]:
                    step += 1
                    run_peer(col, prov, size, args.params["fi_iters"], rep, step, total)
            for name, title, unit, lower, fn in checks:
                for s in tcp_subs[rep % len(tcp_subs):] + tcp_subs[:rep % len(tcp_subs)]:
                    step += 1
                    run_check(col, args, (name, title, unit, lower, fn), s, rep, step, total)


def run_peer(col, prov, size, iters, rep, step, total):
    t0 = time.monotonic()
    cmds = []
    meta = {"title": "fi_pingpong %s provider, half round trip" % prov, "unit": "us",
            "lower_is_better": True, "size": size, "kind": "peer"}
    name = "fi_pingpong_%s_%d" % (prov, size)
    try:
        v = fi_pingpong(prov, size, iters, cmds.append)
        col.add_extra(name, meta, "fi-" + prov, v, cmds=cmds)
        res = "%.2f us" % v
    except BenchError as e:
        col.add_extra(name, meta, "fi-" + prov, None, str(e), cmds)
        res = "FAILED: " + str(e).splitlines()[0]
    step_log(step, total, "fi_pingpong %s %d B" % (prov, size), "fi-" + prov, rep, t0, res)


def run_check(col, args, check, sub, rep, step, total):
    name, title, unit, lower, fn = check
    t0 = time.monotonic()
    cmds = []
    meta = {"title": title, "unit": unit, "lower_is_better": lower, "kind": "crosscheck"}
    params = {"seconds": args.params["seconds"], "iperf_seconds": args.params["seconds"]}
    try:
        sub.check()
        v = fn(sub, params, cmds.append)
        col.add_extra(name, meta, sub.name, v, cmds=cmds)
        res = "%s %s" % (benchlib.fmt_value(v), unit)
    except BenchError as e:
        col.add_extra(name, meta, sub.name, None, str(e), cmds)
        res = "FAILED: " + str(e).splitlines()[0]
    step_log(step, total, name, sub.name, rep, t0, res)


def host_info():
    """tools/bench.py's host description, plus the host name the plots print."""
    info = bench.host_info()
    info["hostname"] = os.uname().nodename
    return info


def main(argv=None):
    args = parse_args(argv)
    benchlib.install_signal_handlers()
    subs = [Substrate(None, args.build)] + [Substrate(p, args.build) for p in args.profile_list]
    if not args.no_unix:
        subs.append(UnixSubstrate(args.build))
    if not os.access(os.path.join(args.build, "bin", "ulsock-bench"), os.X_OK):
        log("ubench: %s/bin/ulsock-bench not built (run make build)" % args.build)
        return 1
    command = "python3 tools/ubench.py " + " ".join(shlex.quote(a) for a in
                                                   (argv if argv is not None else sys.argv[1:]))
    log("ubench: %s mode, %d repeats, substrates %s"
        % (args.mode, args.params["repeats"], ",".join(s.name for s in subs)))
    col = Collector()
    run_matrix(args, subs, col)
    data = ubench_report.fold(col.rows, [s.name for s in subs], col.extra)
    data.update(host=host_info(), mode=args.mode, repeats=args.params["repeats"],
                command=command, note=args.note, commands=col.commands, errors=col.errors)
    print(ubench_report.text_summary(data))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
    if args.report:
        paths = ubench_report.write_report(data, args.report)
        log("ubench: report written: %s" % ", ".join(paths))
    empty = [k for k, v in data["rows"].items()
             for m in v["metrics"].values() for s, c in m.items() if not c["samples"]]
    return 1 if col.errors and not data["rows"] else (1 if empty else 0)


if __name__ == "__main__":
    projenv.use()
    sys.exit(main())
