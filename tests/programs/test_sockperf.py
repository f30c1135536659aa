"""sockperf, unmodified, over ulsock: ping-pong and throughput over TCP.

Both ends under ulsock must give correct results on the fast path (path=shm); with one
end plain they must still be correct, on the kernel path. No timing is asserted.
"""

import re
import signal
import time

import pytest

from proglib import (assert_fast_path, assert_kernel_path, both_ulsock, closed_connections,
                      free_port, one_plain, require)


def start_server(harness, end):
    port = free_port()
    server = harness.start_server(
        end, ["sockperf", "sr", "--tcp", "-i", "127.0.0.1", "-p", str(port)], port)
    return server, port


def stop_server(server):
    """SIGINT makes the sockperf server print its totals and exit 0."""
    rc = server.stop(signal.SIGINT, grace=10)
    return rc, server.text()


def client(harness, end, verb, port, size, seconds):
    """Runs `sockperf VERB` (pp or tp) as end against port; returns its output."""
    rc, out = harness.run(end, ["sockperf", verb, "--tcp", "-i", "127.0.0.1", "-p", str(port),
                                "-t", str(seconds), "-m", str(size),
                                # without a rate, sockperf's table of send times
                                # overflows past 600,000 round trips a second
                                "--mps", "5000000"], timeout=seconds + 60)
    text = out.decode("utf-8", "replace")
    assert rc == 0, "sockperf %s exited %s:\n%s" % (verb, rc, text[-3000:])
    return text


def ping_pong(harness, end, port, size=64, seconds=1):
    text = client(harness, end, "pp", port, size, seconds)
    latency = re.search(r"Summary: Latency is ([0-9.]+) usec", text)
    assert latency, "no latency summary:\n%s" % text[-3000:]
    assert float(latency[1]) > 0
    errs = re.search(r"# dropped messages = (\d+); # duplicated messages = (\d+); "
                     r"# out-of-order messages = (\d+)", text)
    assert errs, "no message accounting:\n%s" % text[-3000:]
    assert errs.groups() == ("0", "0", "0"), "dropped/duplicated/out-of-order: %s" % (
        errs.groups(),)
    total = re.search(r"\[Total Run\].*SentMessages=(\d+); ReceivedMessages=(\d+)", text)
    assert total, "no [Total Run] line:\n%s" % text[-3000:]
    sent, received = int(total[1]), int(total[2])
    assert sent > 0
    # The timer may end the run with one message in flight, never more.
    assert 0 <= sent - received <= 1, "sent %d, received %d" % (sent, received)


def throughput(harness, end, port, size, seconds=1):
    """Returns how many messages the client says it sent."""
    text = client(harness, end, "tp", port, size, seconds)
    rate = re.search(r"Summary: Message Rate is ([0-9.]+) \[msg/sec\]", text)
    assert rate and float(rate[1]) > 0, "no message rate:\n%s" % text[-3000:]
    sent = re.search(r"Total of (\d+) messages sent", text)
    assert sent and int(sent[1]) > 0, "no message count:\n%s" % text[-3000:]
    return int(sent[1])


def server_received(server_text):
    m = re.search(r"Total (\d+) messages received and handled", server_text)
    assert m, "server printed no totals:\n%s" % server_text[-3000:]
    return int(m[1])


@pytest.mark.parametrize("profile", ["latency", "balanced", "efficient"])
def test_ping_pong_fast_path(harness, make_end, profile):
    require("sockperf")
    server_end, client_end = both_ulsock(make_end, profile)
    server, port = start_server(harness, server_end)
    ping_pong(harness, client_end, port)
    rc, text = stop_server(server)
    assert rc == 0, "sockperf server exited %s:\n%s" % (rc, text[-3000:])
    assert_fast_path(server_end, client_end)


@pytest.mark.parametrize("size", [64, 1024, 65000])
def test_throughput_fast_path(harness, make_end, size):
    """Every byte the client's sends accepted reaches the server, as TCP delivers every
    byte before the close.

    sockperf counts a message as sent when it numbers it, before its send: a send that
    blocks on a full buffer when the timer's SIGALRM arrives (no SA_RESTART) fails with
    EINTR or stops part way, on kernel TCP too, and that one message never arrives whole.
    So the messages may differ by one; the bytes, which ulsock logs for each connection
    it closes, must match exactly."""
    require("sockperf")
    server_end, client_end = both_ulsock(make_end)
    server, port = start_server(harness, server_end)
    sent = throughput(harness, client_end, port, size)
    time.sleep(1)  # let the server drain what is still queued before SIGINT
    rc, text = stop_server(server)
    assert rc == 0, "sockperf server exited %s:\n%s" % (rc, text[-3000:])
    received = server_received(text)
    assert sent - 1 <= received <= sent, "client sent %d messages, server got %d" % (
        sent, received)
    assert_fast_path(server_end, client_end)
    tx = closed_connections(client_end)
    rx = closed_connections(server_end)
    assert len(tx) == 1 and len(rx) == 1, "close lines: client %s, server %s" % (tx, rx)
    assert tx[0]["received"] == 0 and rx[0]["sent"] == 0
    assert tx[0]["sent"] == rx[0]["received"], "client sent %d bytes, server got %d" % (
        tx[0]["sent"], rx[0]["received"])
    # Whole messages, plus at most the start of the interrupted one.
    assert received * size <= rx[0]["received"] < (received + 1) * size


@pytest.mark.parametrize("accelerated", ["server", "client"])
def test_one_end_plain(harness, make_end, accelerated):
    require("sockperf")
    server_end, client_end = one_plain(make_end, accelerated)
    server, port = start_server(harness, server_end)
    ping_pong(harness, client_end, port)
    sent = throughput(harness, client_end, port, 1024)
    time.sleep(1)
    rc, text = stop_server(server)
    assert rc == 0, "sockperf server exited %s:\n%s" % (rc, text[-3000:])
    # The server counts the ping-pong messages too, so it saw at least the tp ones.
    assert server_received(text) >= sent
    assert_kernel_path(server_end if accelerated == "server" else client_end)
