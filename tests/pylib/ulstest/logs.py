"""The lines ulsock logs per connection at level info (ULSOCK_LOG=info), the contract of
docs/INTERFACES-dev.md; a harness points ULSOCK_LOG_FILE at a file and reads them back.
Matched against a line stripped of surrounding white space."""

import re

# ulsock[PID]: fd=N LOCAL -> PEER path=shm
# ulsock[PID]: fd=N LOCAL -> PEER path=kernel reason=WORDS
PATH_LINE = re.compile(
    r"^ulsock\[(?P<pid>\d+)\]: fd=(?P<fd>\d+) (?P<local>\S+) -> (?P<peer>\S+) "
    r"path=(?P<path>shm|kernel|fabric)(?: reason=(?P<reason>.*)| provider=(?P<provider>\S+))?$")

# A server's reasons for a local client that made no segment (docs/INTERFACES-dev.md): it
# looked and found none, or it did not look, since no process of its user offered one to
# its port lately (the offer board, docs/protocol.md section 3).
NO_SEGMENT = "peer made no segment (no ulsock, or short connections)"
NO_OFFER = ("no segment offered to this port by this user (no ulsock, another user, or short "
            "connections)")

# ulsock[PID]: fd=N LOCAL -> PEER closed: sent X bytes, received Y bytes in this process
CLOSE_LINE = re.compile(r"^ulsock\[(\d+)\]: fd=(\d+) (\S+) -> (\S+) closed: sent (\d+) bytes, "
                        r"received (\d+) bytes in this process$")

# ulsock[PID]: fd=N LOCAL -> PEER left the fast path: REASON (a connection moved back to
# kernel TCP in place after its path was logged).
LEFT_LINE = re.compile(r"^ulsock\[(?P<pid>\d+)\]: fd=\d+ (?P<local>\S+) -> (?P<peer>\S+) "
                       r"left the fast path: (?P<reason>.+)$")

# ulsock[PID]: LOCAL -> PEER: the socket is this process's alone again (...), at level debug:
# a socket shared by fork whose other counted holders all let it go (design.md, "Fork
# children, counted").
ALONE_LINE = re.compile(r"^ulsock\[(\d+)\]: (\S+) -> (\S+): the socket is this process's "
                        r"alone again")


def matches(text, pattern):
    """The match of PATTERN for each line of TEXT it matches, in order."""
    found = (pattern.match(line.strip()) for line in text.splitlines())
    return [m for m in found if m]
