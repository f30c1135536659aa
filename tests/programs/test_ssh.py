"""OpenSSH 9.2 (sshd, ssh, scp, sftp), unmodified, over ulsock.

sshd runs in the foreground on 127.0.0.1 with host keys, authorized keys and its pid
file in the test's tmp_path, public-key login as root, no PAM. For each connection the
listener forks a child that re-executes sshd (-R) with the socket, and that process forks
the privilege-separated children that speak the protocol (the pre-authentication one
chrooted, as the sshd user, under a seccomp filter), so an accelerated socket has to
survive fork and exec; it moves back to kernel TCP in place when the listener makes it
the re-executed sshd's standard input and output, and a sandbox would force that anyway
(the filter kills the process on ulsock's own system calls). Bytes are checked with SHA-256 and byte for byte: ssh feeding
8 MiB to a remote `sha256sum` and `cat`ting a file back, scp up and sftp down.

sshd needs root; the tests skip without it. No timing is asserted.
"""

import hashlib
import os
import random
import re
import stat
import subprocess

import pytest

from modes import MODES, assert_quiet_log, check_paths, pair
from proglib import closed_connections, free_port, require

SSHD = "/usr/sbin/sshd"
SIZE = 8 << 20


@pytest.fixture
def sshd_config(tmp_path):
    """Keys and an sshd_config in tmp_path; returns a dict of their paths."""
    if os.geteuid() != 0:
        pytest.skip("sshd must start as root")
    if not os.access(SSHD, os.X_OK):
        pytest.skip("%s is not installed (openssh-server)" % SSHD)
    for prog in ("ssh", "ssh-keygen", "scp", "sftp"):
        require(prog)
    # The privilege-separation directory the pre-authentication child chroots into.
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    st = os.stat("/run/sshd")
    assert st.st_uid == 0 and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    for name in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name,
                        "-f", str(tmp_path / name)], check=True, timeout=60)
    (tmp_path / "authorized_keys").write_bytes((tmp_path / "user_key.pub").read_bytes())
    sftp_server = "/usr/lib/openssh/sftp-server"
    if not os.access(sftp_server, os.X_OK):
        sftp_server = "internal-sftp"
    cfg = tmp_path / "sshd_config"
    cfg.write_text("\n".join([
        "HostKey %s" % (tmp_path / "host_key"),
        "AuthorizedKeysFile %s" % (tmp_path / "authorized_keys"),
        "PidFile %s" % (tmp_path / "sshd.pid"),
        "UsePAM no",
        "StrictModes no",
        "PermitRootLogin prohibit-password",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "Subsystem sftp %s" % sftp_server,
        "LogLevel VERBOSE",
        ""]))
    return dict(config=str(cfg), key=str(tmp_path / "user_key"), dir=tmp_path)


def start_sshd(harness, end, cfg):
    port = free_port()
    # sshd re-executes itself by the path it was started with, which must be absolute.
    cfg["server"] = harness.start_server(end, [SSHD, "-D", "-e", "-f", cfg["config"],
                                               "-p", str(port),
                                               "-o", "ListenAddress=127.0.0.1"],
                                         port, tag="sshd")
    return port


def failed(cfg, what, rc, out):
    """The message for a client that failed: its output and the server's log."""
    return "%s exited %s:\n%s\n--- sshd -e:\n%s" % (
        what, rc, out[-3000:].decode("utf-8", "replace"), cfg["server"].text()[-3000:])


def client_options(cfg):
    return ["-F", "/dev/null", "-i", cfg["key"], "-o", "IdentitiesOnly=yes",
            "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]


def ssh(harness, end, cfg, port, command, stdin_data=None):
    rc, out = harness.run(end, ["ssh"] + client_options(cfg) +
                          ["-p", str(port), "root@127.0.0.1", command],
                          stdin_data=stdin_data, timeout=90, tag="ssh")
    assert rc == 0, failed(cfg, "ssh %r" % command, rc, out)
    return out


LEFT = re.compile(r"^ulsock\[(\d+)\]: fd=\d+ \S+ -> \S+ left the fast path: (.*)$", re.M)


def check_left_rings(server_end, client_end, nconns):
    """Each connection took the fast path at its connect and left it, in place, for
    kernel TCP when sshd's listener made it the standard input and output of the sshd it
    re-executes (stdio could meet it there; a pre-authentication sandbox would force the
    move anyway: its seccomp filter kills the process on ulsock's own system calls). So:
    the listener decided shm for each connection, the client logged the move, and the
    re-executed sshd found a plain socket (README, limitations)."""
    listener = [c for c in server_end.connections() if c["fd"] > 2]
    assert len(listener) == nconns and all(c["path"] == "shm" for c in listener), (
        "the listener did not take the fast path; log:\n%s" % server_end.log_text()[-3000:])
    later = [c for c in server_end.connections() if c["fd"] <= 2]
    assert all(c["path"] == "kernel" for c in later), later
    # The client decides its path at its first call after the server attached: shm,
    # or the move already (kernel, "moved back to kernel TCP"); a move after shm is logged.
    conns = client_end.connections()
    moved = "moved back to kernel TCP"
    assert len(conns) == nconns and all(
        c["path"] == "shm" or c["reason"] == moved for c in conns), conns
    left = LEFT.findall(client_end.log_text())
    assert len(left) == sum(c["path"] == "shm" for c in conns) and all(
        r == moved for _, r in left), (
        "the clients' connections did not leave the rings; log:\n%s"
        % client_end.log_text()[-3000:])
    assert_quiet_log(server_end, client_end)


@pytest.mark.parametrize("mode", MODES)
def test_exec_channel(harness, make_end, sshd_config, mode):
    """8 MiB up through a remote sha256sum, 8 MiB down by a remote cat."""
    server_end, client_end = pair(make_end, mode)
    port = start_sshd(harness, server_end, sshd_config)
    up = random.Random(171).randbytes(SIZE)
    out = ssh(harness, client_end, sshd_config, port, "sha256sum", stdin_data=up)
    assert out.decode() == "%s  -\n" % hashlib.sha256(up).hexdigest()

    down = random.Random(172).randbytes(SIZE)
    path = sshd_config["dir"] / "down.bin"
    path.write_bytes(down)
    out = ssh(harness, client_end, sshd_config, port, "cat %s" % path)
    assert len(out) == len(down)
    assert out == down, "cat came back different"

    if mode == "ulsock":
        check_left_rings(server_end, client_end, 2)
    else:
        check_paths(mode, server_end, client_end)


@pytest.mark.parametrize("mode", MODES)
def test_scp_sftp(harness, make_end, sshd_config, mode):
    """A file up by scp (SFTP protocol, scp's default in 9.x) and another down by
    sftp in batch mode; both compared byte for byte."""
    server_end, client_end = pair(make_end, mode)
    port = start_sshd(harness, server_end, sshd_config)
    d = sshd_config["dir"]
    src = d / "up-src.bin"
    src.write_bytes(random.Random(173).randbytes(SIZE + 12345))
    rc, out = harness.run(client_end, ["scp", "-q", "-P", str(port)] +
                          client_options(sshd_config) +
                          [str(src), "root@127.0.0.1:%s" % (d / "up-dst.bin")],
                          timeout=90, tag="scp")
    assert rc == 0, failed(sshd_config, "scp", rc, out)
    assert (d / "up-dst.bin").read_bytes() == src.read_bytes()

    remote = d / "down-src.bin"
    remote.write_bytes(random.Random(174).randbytes(SIZE - 777))
    batch = d / "sftp.batch"
    batch.write_text("get %s %s\n" % (remote, d / "down-dst.bin"))
    rc, out = harness.run(client_end, ["sftp", "-q", "-b", str(batch), "-P", str(port)] +
                          client_options(sshd_config) + ["root@127.0.0.1"],
                          timeout=90, tag="sftp")
    assert rc == 0, failed(sshd_config, "sftp", rc, out)
    assert (d / "down-dst.bin").read_bytes() == remote.read_bytes()

    if mode == "ulsock":
        check_left_rings(server_end, client_end, 2)
    else:
        check_paths(mode, server_end, client_end)
