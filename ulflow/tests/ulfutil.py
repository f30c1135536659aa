"""Helpers of the ulflow pytest suites: where the build is, layouts written from a short
description, runs of the `ulflow` command, and the checks every suite makes (the view
filter's reports, no process of the run left behind)."""

import os
import re
import subprocess
import time
from pathlib import Path

REPO = Path(os.environ.get("ULSOCK_SOURCE") or Path(__file__).resolve().parents[2])
BUILD = Path(os.environ.get("ULSOCK_BUILD") or REPO / "build").resolve()
ULFLOW = BUILD / "bin" / "ulflow"
ULSOCK = BUILD / "bin" / "ulsock"
# An ASan build (make asan) runs these suites too; its preload library needs libasan
# first in LD_PRELOAD, which `ulsock run` does not arrange.
SANITIZED = ULFLOW.exists() and b"__asan_init" in ULFLOW.read_bytes()


def vis_layout(path, procs, stages=2, copies=2, image="1M", chunk="16K", works=None,
               placement=None, extra="", policies=("dd", "rr"), timeout=10, coord=None):
    """A visualization pipeline: read -> stage1..stageN (copies each) -> view.
    procs: [(name, addr)]; placement(filter, copies) -> 'on=' value."""
    place = placement or (lambda f, n: ",".join(procs[(i + 1) % len(procs)][0]
                                               for i in range(n)))
    lines = [f"block {chunk}", f"timeout {timeout}", f"set image {image}",
             f"set chunk {chunk}"]
    if coord:
        lines.append(f"coordinator {coord}")
    lines += [f"process {n} {a}" for n, a in procs]
    lines.append(f"filter read vis_read on={procs[0][0]}")
    names = [f"stage{i + 1}" for i in range(stages)]
    for s in names:
        lines.append(f"filter {s} vis_stage copies={copies} on={place(s, copies)} {extra}")
    lines.append(f"filter view vis_view on={procs[0][0]}")
    chain = ["read"] + names + ["view"]
    for i in range(len(chain) - 1):
        lines.append(f"stream {chain[i]} -> {chain[i + 1]} policy={policies[i % len(policies)]}")
    for w in works or ["1 complete", "3 partial 8", "2 zoom 4", "1 complete"]:
        lines.append(f"work {w}")
    Path(path).write_text("\n".join(lines) + "\n")
    return Path(path)


def run(args, timeout=120, env=None, prefix=()):
    t0 = time.monotonic()
    p = subprocess.run([*prefix, str(ULFLOW), *map(str, args)], capture_output=True,
                       text=True, timeout=timeout, env=env)
    p.elapsed = time.monotonic() - t0
    return p


def view_reports(stdout):
    """{uow: (chunks, bytes)} from the view filter's 'ok' reports."""
    out = {}
    for m in re.finditer(r"^report view 0 (\d+) chunks=(\d+) bytes=(\d+) ok$", stdout, re.M):
        out[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
    return out


def uow_lines(stdout):
    return [(int(m.group(1)), float(m.group(2)), m.group(3))
            for m in re.finditer(r"^uow (\d+) ([\d.]+) (.*)$", stdout, re.M)]


def leftovers(marker):
    """Live processes whose command line mentions marker (a layout's unique path)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        # Only this process is excluded: the layouts live under pytest's tmp_path, so
        # every process of a run mentions "pytest".
        if str(marker) in cmd and int(d.name) != os.getpid():
            found.append((d.name, cmd))
    return found
