"""Configuration: every ULSOCK_* variable is checked when it is read.

Loaded directly (LD_PRELOAD, no `ulsock run`), the library gives each bad value exactly one
warning, `ulsock[PID]: VAR='VALUE' PROBLEM: using ...`, at the default log level, and goes
on with what that line says; at ULSOCK_LOG=debug its `config:` line shows the values in
force. `ulsock run` refuses a bad value outright: one line, exit status 2, and the program
never starts. Good values are taken without a word.

The program under the library is `true` (nothing but the library's start) or `touch
MARKER` (to see whether `ulsock run` started it); the ULSOCK_LOG case also runs a
net_server/net_client pair, whose connection logs its path at level info only.
"""

import os
import re
import shutil
import subprocess

import pytest

from conftest import PLAIN, TIMEOUT, ULSOCK_BIN, ULSOCK_LIB, clean_env, kv, run_net_client, \
    start_net_server

WARN_RE = re.compile(r"^ulsock\[\d+\]: (ULSOCK_\w+)='(.*)' (.*): ([^:]*)$")
CONFIG_RE = re.compile(r"^ulsock\[\d+\]: config: (.*)$")
REFUSE_RE = re.compile(r"^ulsock run: (ULSOCK_\w+)='(.*)' (.*): refusing to run (\S+)$")

# The problem each variable's bad values get, as the warning words it.
PROBLEM = {
    "ULSOCK_PROFILE": "is not latency, balanced or efficient",
    "ULSOCK_SPIN_US": "is not a number of microseconds from 0 to 10000000, or -1 for no limit",
    "ULSOCK_RX_PACE_NS": "is not a number of nanoseconds up to 100000 (0 or less: off)",
    "ULSOCK_RING_SIZE": "is not a power of two from 4096 to 67108864 (bytes)",
    "ULSOCK_LOG": "is not error, warn, info or debug",
    "ULSOCK_LOG_FILE": "cannot be opened (No such file or directory)",
    "ULSOCK_DISABLE": "is not 1 (disable) or 0",
    "ULSOCK_SHORT_CALLS": "is not a count of calls from 0 to 1000 (0: off)",
    "ULSOCK_TRUST_UIDS": "is not a comma-separated list of up to 16 uids",
    "ULSOCK_FABRIC_WAIT_MS": "is not a count of milliseconds from 100 to 600000",
    "ULSOCK_FABRIC_UNTAGGED": "is not 1 (untagged) or 0 (tagged)",
}

# (variable, bad value, what the warning says is used, the `config:` fields that show it).
# {tmp} in a value is the test's own directory.
BAD = [
    ("ULSOCK_PROFILE", "bogus", "using balanced", {"profile": "balanced", "spin_us": "20"}),
    ("ULSOCK_PROFILE", "Latency", "using balanced", {"profile": "balanced"}),
    ("ULSOCK_SPIN_US", "abc", "using 20 (the balanced profile's)", {"spin_us": "20"}),
    ("ULSOCK_SPIN_US", "-2", "using 20 (the balanced profile's)", {"spin_us": "20"}),
    ("ULSOCK_SPIN_US", "10us", "using 20 (the balanced profile's)", {"spin_us": "20"}),
    ("ULSOCK_SPIN_US", "99999999999", "using 20 (the balanced profile's)", {"spin_us": "20"}),
    ("ULSOCK_RX_PACE_NS", "fast", "using 1000", {"rx_pace_ns": "1000"}),
    ("ULSOCK_RX_PACE_NS", "500000", "using 100000", {"rx_pace_ns": "100000"}),
    ("ULSOCK_RING_SIZE", "12345", "using 16384", {"ring_size": "16384"}),
    ("ULSOCK_RING_SIZE", "1024", "using 4096", {"ring_size": "4096"}),
    ("ULSOCK_RING_SIZE", "134217728", "using 67108864", {"ring_size": "67108864"}),
    ("ULSOCK_RING_SIZE", "1M", "using 1048576", {"ring_size": "1048576"}),
    ("ULSOCK_RING_SIZE", " 4096", "using 1048576", {"ring_size": "1048576"}),
    ("ULSOCK_LOG", "verbose", "using warn", None),
    ("ULSOCK_LOG", "INFO", "using warn", None),
    ("ULSOCK_LOG_FILE", "{tmp}/no-such-dir/ulsock.log", "logging to standard error",
     {"log_file": "-"}),
    ("ULSOCK_DISABLE", "yes", "using 1 (every connection stays on kernel TCP)",
     {"disable": "1"}),
    ("ULSOCK_SHORT_CALLS", "-1", "using 8", {"short_calls": "8"}),
    ("ULSOCK_SHORT_CALLS", "1001", "using 8", {"short_calls": "8"}),
    ("ULSOCK_SHORT_CALLS", "few", "using 8", {"short_calls": "8"}),
    ("ULSOCK_TRUST_UIDS", "1000,bob", "trusting no other user", {"trust_uids": "-"}),
    ("ULSOCK_TRUST_UIDS", "1000,,1001", "trusting no other user", {"trust_uids": "-"}),
    ("ULSOCK_TRUST_UIDS", "4294967295", "trusting no other user", {"trust_uids": "-"}),
    ("ULSOCK_TRUST_UIDS", ",".join(str(1000 + i) for i in range(17)), "trusting no other user",
     {"trust_uids": "-"}),
    ("ULSOCK_FABRIC_WAIT_MS", "99", "using 10000", {"fabric_wait_ms": "10000"}),
    ("ULSOCK_FABRIC_WAIT_MS", "600001", "using 10000", {"fabric_wait_ms": "10000"}),
    ("ULSOCK_FABRIC_WAIT_MS", "2s", "using 10000", {"fabric_wait_ms": "10000"}),
    ("ULSOCK_FABRIC_UNTAGGED", "no", "using 1", {"fabric_untagged": "1"}),
    ("ULSOCK_FABRIC_UNTAGGED", "2", "using 1", {"fabric_untagged": "1"}),
]

# (variable, good value, the `config:` fields that show it taken; None: not visible there).
GOOD = [
    ("ULSOCK_PROFILE", "latency", {"profile": "latency", "spin_us": "-1"}),
    ("ULSOCK_PROFILE", "efficient", {"profile": "efficient", "spin_us": "0", "rx_pace_ns": "0"}),
    ("ULSOCK_PROFILE", "", {"profile": "balanced"}),
    ("ULSOCK_SPIN_US", "-1", {"spin_us": "-1"}),
    ("ULSOCK_SPIN_US", "0", {"spin_us": "0", "rx_pace_ns": "0"}),
    ("ULSOCK_SPIN_US", "250", {"spin_us": "250"}),
    ("ULSOCK_RX_PACE_NS", "0", {"rx_pace_ns": "0"}),
    ("ULSOCK_RX_PACE_NS", "-5", {"rx_pace_ns": "0"}),
    ("ULSOCK_RX_PACE_NS", "100000", {"rx_pace_ns": "100000"}),
    ("ULSOCK_RING_SIZE", "4096", {"ring_size": "4096"}),
    ("ULSOCK_RING_SIZE", "67108864", {"ring_size": "67108864"}),
    ("ULSOCK_RING_SIZE", "0x10000", {"ring_size": "65536"}),
    ("ULSOCK_LOG", "error", None),
    ("ULSOCK_LOG", "warn", None),
    ("ULSOCK_LOG", "info", None),
    ("ULSOCK_LOG", "debug", {"log": "debug"}),
    ("ULSOCK_DISABLE", "1", {"disable": "1"}),
    ("ULSOCK_DISABLE", "0", {"disable": "0"}),
    ("ULSOCK_SHORT_CALLS", "0", {"short_calls": "0"}),
    ("ULSOCK_SHORT_CALLS", "1000", {"short_calls": "1000"}),
    ("ULSOCK_SHORT_CALLS", "", {"short_calls": "8"}),
    ("ULSOCK_TRUST_UIDS", "0,65534", {"trust_uids": "0,65534"}),
    ("ULSOCK_TRUST_UIDS", "1000", {"trust_uids": "1000"}),
    ("ULSOCK_FABRIC_WAIT_MS", "100", {"fabric_wait_ms": "100"}),
    ("ULSOCK_FABRIC_WAIT_MS", "600000", {"fabric_wait_ms": "600000"}),
    ("ULSOCK_FABRIC_WAIT_MS", "", {"fabric_wait_ms": "10000"}),
    ("ULSOCK_FABRIC_UNTAGGED", "0", {"fabric_untagged": "0"}),
    ("ULSOCK_FABRIC_UNTAGGED", "1", {"fabric_untagged": "1"}),
]


def case_id(case):
    return "%s=%s" % (case[0][len("ULSOCK_"):], case[1].replace("{tmp}", "T")[:24] or "empty")


def run(argv, env, cwd):
    res = subprocess.run(argv, env=clean_env(env), cwd=cwd, capture_output=True,
                         timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    return res.returncode, res.stdout.decode(errors="replace"), \
        res.stderr.decode(errors="replace")


def program(name):
    path = shutil.which(name)
    if not path:
        pytest.skip("%s is not installed" % name)
    return path


def require_library():
    if PLAIN:
        pytest.skip("ULSOCK_TEST_PLAIN=1: no library to check")
    for path in (ULSOCK_BIN, ULSOCK_LIB):
        if not os.access(path, os.R_OK):
            pytest.fail("%s is missing: build the tree" % path)


def under_library(tmp_path, env):
    """Runs `true` with the library preloaded directly; returns stderr's lines."""
    true = program("true")
    plain = run([true], env, tmp_path)
    assert plain == (0, "", ""), plain
    rc, out, err = run([true], dict(env, LD_PRELOAD=str(ULSOCK_LIB)), tmp_path)
    assert rc == 0 and out == "", (rc, out, err)
    return err.splitlines()


def config_fields(lines):
    """The fields of the one `config:` line among LINES."""
    found = [m.group(1) for m in map(CONFIG_RE.match, lines) if m]
    assert len(found) == 1, lines
    return dict(tok.split("=", 1) for tok in found[0].split())


def expect_one_warning(lines, var, value, used):
    warnings = [ln for ln in lines if re.search(r"ULSOCK_\w+='", ln)]
    assert len(warnings) == 1, lines
    m = WARN_RE.match(warnings[0])
    assert m, warnings[0]
    assert m.groups() == (var, value, PROBLEM[var], used), warnings[0]


# Each bad value at the default level, at warn and at debug (a bad ULSOCK_LOG at its own).
BAD_AT_LEVELS = [pytest.param(case, level, id="%s-%s" % (case_id(case), level or "default"))
                 for case in BAD for level in (None, "warn", "debug")
                 if case[0] != "ULSOCK_LOG" or level is None]


@pytest.mark.parametrize("case,level", BAD_AT_LEVELS)
def test_bad_value_warns_once(tmp_path, case, level):
    """Exactly one warning at the default level, at warn and at debug; at debug the
    configuration in force is what the warning says is used."""
    require_library()
    var, value, used, fields = case
    value = value.replace("{tmp}", str(tmp_path))
    env = {var: value}
    if level:
        env["ULSOCK_LOG"] = level
    lines = under_library(tmp_path, env)
    expect_one_warning(lines, var, value, used)
    if level == "debug":
        got = config_fields(lines)
        assert {k: got[k] for k in fields} == fields, lines
    else:
        assert len(lines) == 1, lines


@pytest.mark.parametrize("case", BAD, ids=case_id)
def test_ulsock_run_refuses_bad_value(tmp_path, case):
    """`ulsock run` prints one line, exits 2 and never starts the program (which,
    started plain, does run)."""
    require_library()
    var, value, _, _ = case
    value = value.replace("{tmp}", str(tmp_path))
    touch = program("touch")
    marker = tmp_path / "ran"
    assert run([touch, str(marker)], {var: value}, tmp_path) == (0, "", "")
    assert marker.exists()
    marker.unlink()
    rc, out, err = run([str(ULSOCK_BIN), "run", "--", touch, str(marker)], {var: value},
                       tmp_path)
    assert rc == 2 and out == "", (rc, out, err)
    lines = err.splitlines()
    assert len(lines) == 1, lines
    m = REFUSE_RE.match(lines[0])
    assert m and m.groups() == (var, value, PROBLEM[var], touch), lines[0]
    assert not marker.exists()


@pytest.mark.parametrize("case", GOOD, ids=case_id)
def test_good_value_taken_silently(tmp_path, case):
    """No line at the default level; at debug, no warning and the value in force."""
    require_library()
    var, value, fields = case
    lines = under_library(tmp_path, {var: value})
    if value != "debug":
        assert lines == []
    if fields is None:
        return
    env = {var: value}
    if var != "ULSOCK_LOG":
        env["ULSOCK_LOG"] = "debug"
    lines = under_library(tmp_path, env)
    assert not [ln for ln in lines if re.search(r"ULSOCK_\w+='", ln)], lines
    got = config_fields(lines)
    assert {k: got[k] for k in fields} == fields, lines


@pytest.mark.parametrize("case", GOOD, ids=case_id)
def test_ulsock_run_accepts_good_value(tmp_path, case):
    require_library()
    var, value, _ = case
    touch = program("touch")
    marker = tmp_path / "ran"
    assert run([touch, str(marker)], {var: value}, tmp_path) == (0, "", "")
    marker.unlink()
    rc, out, err = run([str(ULSOCK_BIN), "run", "--", touch, str(marker)], {var: value},
                       tmp_path)
    assert rc == 0 and out == "", (rc, out, err)
    assert err == "" if value != "debug" else "config: " in err, err
    assert marker.exists()


def test_log_file_good_and_warning_goes_there(tmp_path):
    """With a log file that opens, the warning and the debug lines go there, not to
    stderr; a missing file is created."""
    require_library()
    log = tmp_path / "sub.log"
    lines = under_library(tmp_path, {"ULSOCK_LOG_FILE": str(log), "ULSOCK_LOG": "debug",
                                     "ULSOCK_RING_SIZE": "5000"})
    assert lines == []
    text = log.read_text().splitlines()
    expect_one_warning(text, "ULSOCK_RING_SIZE", "5000", "using 8192")
    assert config_fields(text)["log_file"] == str(log)
    assert config_fields(text)["ring_size"] == "8192"
    marker = tmp_path / "ran"
    rc, out, err = run([str(ULSOCK_BIN), "run", "--", program("touch"), str(marker)],
                       {"ULSOCK_LOG_FILE": str(tmp_path / "run.log")}, tmp_path)
    assert (rc, out, err) == (0, "", "") and marker.exists()


def test_several_bad_values_one_warning_each(tmp_path):
    require_library()
    env = {"ULSOCK_PROFILE": "bogus", "ULSOCK_RING_SIZE": "12345", "ULSOCK_SPIN_US": "abc",
           "ULSOCK_LOG": "verbose"}
    lines = under_library(tmp_path, env)
    assert sorted(WARN_RE.match(ln).group(1) for ln in lines) == sorted(env), lines
    rc, out, err = run([str(ULSOCK_BIN), "run", "--", program("true")], env, tmp_path)
    assert rc == 2
    assert sorted(REFUSE_RE.match(ln).group(1) for ln in err.splitlines()) == sorted(env), err


def test_error_level_silences_warnings(tmp_path):
    """ULSOCK_LOG=error asks for errors only: a bad value is still replaced, quietly."""
    require_library()
    assert under_library(tmp_path, {"ULSOCK_LOG": "error", "ULSOCK_PROFILE": "bogus"}) == []


def test_profile_option_replaces_bad_variable(tmp_path):
    """`ulsock run --profile P` sets ULSOCK_PROFILE itself: a bad one in the environment
    is replaced, not refused."""
    require_library()
    marker = tmp_path / "ran"
    rc, out, err = run([str(ULSOCK_BIN), "run", "--profile", "latency", "--",
                        program("touch"), str(marker)], {"ULSOCK_PROFILE": "bogus"}, tmp_path)
    assert (rc, out, err) == (0, "", "") and marker.exists()


@pytest.mark.parametrize("value,why", [("{tmp}/missing.so", "No such file or directory"),
                                       ("{tmp}", "Is a directory")])
def test_ulsock_run_refuses_bad_library(tmp_path, value, why):
    """ULSOCK_LIBRARY is read by `ulsock run` only: one that cannot be read is refused; a
    good one (relative, even) is used."""
    require_library()
    value = value.replace("{tmp}", str(tmp_path))
    marker = tmp_path / "ran"
    touch = program("touch")
    rc, out, err = run([str(ULSOCK_BIN), "run", "--", touch, str(marker)],
                       {"ULSOCK_LIBRARY": value}, tmp_path)
    assert rc == 2 and out == "", (rc, out, err)
    assert err == "ulsock run: ULSOCK_LIBRARY='%s' cannot be read (%s): refusing to run %s\n" \
        % (value, why, touch), err
    assert not marker.exists()
    rel = os.path.relpath(ULSOCK_LIB, tmp_path)
    rc, out, err = run([str(ULSOCK_BIN), "run", "--", touch, str(marker)],
                       {"ULSOCK_LIBRARY": rel, "ULSOCK_LOG": "debug"}, tmp_path)
    assert rc == 0 and marker.exists(), (rc, out, err)
    assert config_fields(err.splitlines())["profile"] == "balanced"


@pytest.mark.parametrize("level,logs_paths", [("verbose", False), ("info", True)])
def test_bad_log_level_used_as_warn(uls, level, logs_paths):
    """A bad ULSOCK_LOG is warned about once and the level is warn: a connection's path
    line (level info) is not logged, where ULSOCK_LOG=info logs it. Plain first."""
    require_library()
    server, port = start_net_server(uls, "--max-conns", "1", ulsock=False, name="plain_server")
    client = run_net_client(uls, port, "--conns", "1", ulsock=False, name="plain_client")
    assert kv(client.output(), "OK")["failed"] == "0"
    server.wait()
    assert server.stderr() == "" and client.stderr() == ""

    env = {"LD_PRELOAD": str(ULSOCK_LIB), "ULSOCK_LOG": level}
    server, port = start_net_server(uls, "--max-conns", "1", ulsock=False, env=env)
    client = run_net_client(uls, port, "--conns", "1", ulsock=False, env=env)
    assert kv(client.output(), "OK")["failed"] == "0"
    server.wait()
    for proc in (server, client):
        lines = proc.stderr().splitlines()
        paths = [ln for ln in lines if " path=" in ln]
        warnings = [ln for ln in lines if re.search(r"ULSOCK_\w+='", ln)]
        if logs_paths:
            assert len(paths) == 1 and " path=shm" in paths[0] and not warnings, lines
        else:
            assert paths == [], lines
            expect_one_warning(lines, "ULSOCK_LOG", level, "using warn")
