"""A JVM program (OpenJDK 17), unmodified, over ulsock: tests/programs/java/JvmEcho.java.

The JVM calls libc's socket functions from its own native code, runs many threads,
installs its own handlers for SIGSEGV, SIGBUS and others, and, once a socket has a read
timeout, waits on it with poll from each thread that uses it. JvmEcho's client opens
four connections and streams 8 MiB on each from a writer thread while a reader thread
takes the echo; the server is either a thread per connection with blocking
java.net.Socket streams or one thread on an NIO Selector. Both ends check SHA-256 of
what went each way (see the Java file). A second case closes a socket that another
thread is blocked reading, as Java code does to stop such a thread, while another
connection streams. A crash of either JVM leaves an hs_err file, which fails the test
with its contents. No timing is asserted.

javac compiles the program once per session, into pytest's temporary directory.
"""

import os
import subprocess

import pytest

from modes import MODES, check_paths, pair
from proglib import closed_connections, free_port, require

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java", "JvmEcho.java")
CONNECTIONS = 4
BYTES = 8 << 20


@pytest.fixture(scope="session")
def classes(tmp_path_factory):
    """A directory holding the compiled JvmEcho classes (javac runs once a session)."""
    require("java")
    javac = require("javac")
    out = tmp_path_factory.mktemp("java-classes")
    r = subprocess.run([javac, "-Xlint:all", "-Werror", "-d", str(out), SOURCE],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert r.returncode == 0, "javac failed:\n%s" % r.stdout.decode("utf-8", "replace")[-3000:]
    return str(out)


def java(classes, tmp_path, *args):
    # Small heap, quick start; no hsperfdata files in /tmp; a crash log in tmp_path.
    return ["java", "-XX:+UseSerialGC", "-Xmx256m", "-XX:TieredStopAtLevel=1",
            "-XX:-UsePerfData", "-XX:ErrorFile=%s/hs_err_pid%%p.log" % tmp_path,
            "-cp", classes, "JvmEcho"] + [str(a) for a in args]


def crash_logs(tmp_path):
    """The JVM's fatal error logs, whole, for the failure message."""
    logs = sorted(tmp_path.glob("hs_err_pid*.log"))
    return "\n".join("--- %s\n%s" % (p, p.read_text(errors="replace")) for p in logs)


@pytest.mark.parametrize("server", ["threads", "nio"])
@pytest.mark.parametrize("mode", MODES)
def test_echo(harness, make_end, classes, tmp_path, mode, server):
    server_end, client_end = pair(make_end, mode)
    port = free_port()
    srv = harness.start_server(server_end, java(classes, tmp_path, "server", server, port,
                                                CONNECTIONS), port, tag="jvm-server")
    rc, out = harness.run(client_end, java(classes, tmp_path, "client", port, CONNECTIONS,
                                           BYTES, 12), timeout=120, tag="jvm-client")
    text = out.decode("utf-8", "replace")
    src = srv.wait(60)
    stext = srv.text()
    assert not crash_logs(tmp_path), "a JVM crashed:\n%s" % crash_logs(tmp_path)
    assert rc == 0, "client exited %s:\n%s\n--- server:\n%s" % (rc, text[-3000:],
                                                               stext[-3000:])
    assert text.strip() == "client ok %d connections %d bytes" % (
        CONNECTIONS, CONNECTIONS * BYTES), text[-3000:]
    assert src == 0, "server exited %s:\n%s" % (src, stext[-3000:])
    assert stext.strip() == "server done %d" % CONNECTIONS, stext[-3000:]

    check_paths(mode, server_end, client_end)
    if mode == "ulsock":
        # Every byte went through the rings: the header and data up, the echo and
        # the digest down, on each connection.
        for end, up, down in ((client_end, "sent", "received"),
                              (server_end, "received", "sent")):
            closes = closed_connections(end)
            assert len(closes) == CONNECTIONS, "%s: %s" % (end, closes)
            for c in closes:
                assert (c[up], c[down]) == (8 + BYTES, BYTES + 32), "%s: %s" % (end, c)


@pytest.mark.parametrize("mode", MODES)
def test_close_blocked_reader(harness, make_end, classes, tmp_path, mode):
    """Java stops a thread blocked reading a socket by closing the socket from another
    thread (the JDK replaces the descriptor with dup2 and signals the reader), while a
    second connection streams. The read must fail with "Socket closed", the other
    connection must be right, and neither JVM may crash."""
    server_end, client_end = pair(make_end, mode)
    port = free_port()
    srv = harness.start_server(server_end, java(classes, tmp_path, "server", "threads", port,
                                                2), port, tag="jvm-server")
    rc, out = harness.run(client_end, java(classes, tmp_path, "closer", port, BYTES, 13),
                          timeout=120, tag="jvm-closer")
    text = out.decode("utf-8", "replace")
    src = srv.wait(60)
    stext = srv.text()
    assert not crash_logs(tmp_path), "a JVM crashed:\n%s" % crash_logs(tmp_path)
    assert rc == 0 and text.strip() == "closer ok", "closer exited %s:\n%s" % (rc, text)
    assert src == 0 and stext.strip() == "server done 2", "server exited %s:\n%s" % (
        src, stext[-3000:])
    check_paths(mode, server_end, client_end)
    if mode == "ulsock":
        closes = sorted((c["sent"], c["received"]) for c in closed_connections(client_end))
        assert closes == [(0, 0), (8 + BYTES, BYTES + 32)], closes
