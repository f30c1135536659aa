"""Shared by test_postgres.py, test_ssh.py and test_jvm.py: the four ways a pair of
ends runs, and the checks of the ulsock logs that follow from each.

Modes, in the order the tests run them (plain first, so that a failure of the program
itself shows before any ulsock run):
  plain         both ends on kernel TCP, no ulsock at all: the baseline
  ulsock        both ends under ulsock: every connection on the fast path
  server_plain  the server plain, the client under ulsock: the client logs kernel
  client_plain  the server under ulsock, the client plain: the server logs kernel
"""

import re

from proglib import CLOSE_LINE, LOG_LINE, assert_fast_path, assert_kernel_path

MODES = ["plain", "ulsock", "server_plain", "client_plain"]


def server_accelerated(mode):
    return mode in ("ulsock", "client_plain")


def client_accelerated(mode):
    return mode in ("ulsock", "server_plain")


def pair(make_end, mode):
    """(server end, client end) for mode, from conftest's make_end."""
    return (make_end("server", server_accelerated(mode)),
            make_end("client", client_accelerated(mode)))


# ulsock[PID]: fd=N LOCAL -> PEER left the fast path: REASON (a connection moved back to
# kernel TCP in place after its path was logged).
LEFT_LINE = re.compile(r"^ulsock\[\d+\]: fd=\d+ \S+ -> \S+ left the fast path: .+$")


def assert_quiet_log(*ends):
    """At level info ulsock logs only path decisions, their changes and closes; any other
    line is a warning or an error."""
    for end in ends:
        if not end.accelerated:
            continue
        other = [line for line in end.log_text().splitlines()
                 if not LOG_LINE.match(line.strip()) and not CLOSE_LINE.match(line.strip())
                 and not LEFT_LINE.match(line.strip())]
        assert not other, "%s logged warnings or errors:\n%s" % (end, "\n".join(other[-30:]))


def check_paths(mode, server_end, client_end):
    """The paths the ends logged are the ones mode promises, with nothing else logged."""
    if mode == "ulsock":
        assert_fast_path(server_end, client_end)
    elif mode == "server_plain":
        assert_kernel_path(client_end)
    elif mode == "client_plain":
        assert_kernel_path(server_end)
    assert_quiet_log(server_end, client_end)
