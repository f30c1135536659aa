"""The ways the two ends of a client/server pair run, and the checks of the ulsock logs
that follow from each (test_postgres.py, test_ssh.py, test_jvm.py by mode;
test_asyncio.py and test_memcached.py by their ends alone).

Modes, in the order the tests run them (plain first, so that a failure of the program
itself shows before any ulsock run):
  plain         both ends on kernel TCP, no ulsock at all: the baseline
  ulsock        both ends under ulsock: every connection on the fast path
  server_plain  the server plain, the client under ulsock: the client logs kernel
  client_plain  the server under ulsock, the client plain: the server logs kernel
"""

from proglib import assert_fast_path, assert_kernel_path
from ulstest import logs

MODES = ["plain", "ulsock", "server_plain", "client_plain"]


def server_accelerated(mode):
    return mode in ("ulsock", "client_plain")


def client_accelerated(mode):
    return mode in ("ulsock", "server_plain")


def pair(make_end, mode):
    """(server end, client end) for mode, from conftest's make_end."""
    return (make_end("server", server_accelerated(mode)),
            make_end("client", client_accelerated(mode)))


def assert_pair_paths(server_end, client_end):
    """The paths the ends logged are the ones their pairing promises: the fast path when
    both run ulsock, path=kernel with a reason on the one end that does, nothing when
    neither does."""
    if server_end.accelerated and client_end.accelerated:
        assert_fast_path(server_end, client_end)
    elif client_end.accelerated:
        assert_kernel_path(client_end)
    elif server_end.accelerated:
        assert_kernel_path(server_end)


def assert_quiet_log(*ends):
    """At level info ulsock logs only path decisions, their changes and closes; any other
    line is a warning or an error."""
    known = (logs.PATH_LINE, logs.CLOSE_LINE, logs.LEFT_LINE)
    for end in ends:
        if not end.accelerated:
            continue
        other = [line for line in end.log_text().splitlines()
                 if not any(p.match(line.strip()) for p in known)]
        assert not other, "%s logged warnings or errors:\n%s" % (end, "\n".join(other[-30:]))


def check_paths(mode, server_end, client_end):
    """The paths the ends logged are the ones mode promises, with nothing else logged."""
    assert (server_end.accelerated, client_end.accelerated) == \
        (server_accelerated(mode), client_accelerated(mode)), (mode, server_end, client_end)
    assert_pair_paths(server_end, client_end)
    assert_quiet_log(server_end, client_end)
