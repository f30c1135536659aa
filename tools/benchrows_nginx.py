"""Benchmark rows for nginx with wrk and ab: HTTP GET of one static file, requests per
second.

nginx runs in the foreground as a master and two workers that send the file with
sendfile(2), from a temporary directory of its own; wrk opens 32 kept-alive connections
on two threads for params["seconds"] (>= 2 s in the full mode, 1 s in --smoke), or in
nginx64k_close 32 at once, each for one request (`Connection: close`: wrk reads each 64
KiB answer in pieces, README's ULSOCK_SHORT_CALLS). Both processes are wrapped by the
substrate. A run with socket errors or error statuses
fails instead of giving a number. The ab rows open a connection per request (HTTP/1.0,
one at a time), the pattern of README's ULSOCK_SHORT_CALLS: with both ends on the
substrate, and with nginx plain and only ab on it (a ulsock client of a local server
that does not run ulsock).
"""

import contextlib
import os
import tempfile

import benchlib
from benchlib import BenchError, _client, _server, free_port, parse_float

CONFIG = """\
{user}
worker_processes 2;
pid {d}/nginx.pid;
lock_file {d}/nginx.lock;
error_log {d}/error.log error;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    server {{
        listen 127.0.0.1:{port};
        root {d}/www;
    }}
}}
"""


def _user_line():
    """nginx started by root hands its workers to `nobody` unless told otherwise, and
    processes of two users never share the fast path; any other user cannot switch."""
    if os.geteuid() != 0:
        return ""
    import grp
    import pwd
    return "user %s %s;" % (pwd.getpwuid(os.geteuid()).pw_name,
                            grp.getgrgid(os.getegid()).gr_name)


@contextlib.contextmanager
def _nginx(server_sub, size, record):
    """nginx serving /file.bin of size random bytes, run as server_sub wraps it, from a
    temporary directory; yields its port."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="uls-bench-nginx-") as d:
        os.mkdir(os.path.join(d, "www"))
        with open(os.path.join(d, "www", "file.bin"), "wb") as f:
            f.write(os.urandom(size))
        conf = os.path.join(d, "nginx.conf")
        with open(conf, "w") as f:
            f.write(CONFIG.format(user=_user_line(), d=d, port=port))
        with _server(server_sub, ["nginx", "-p", d + "/", "-c", conf, "-e", d + "/error.log",
                                  "-g", "daemon off;"], port, record):
            yield port


def nginx_wrk(size, close=False):
    """CLOSE: every request on a connection of its own (`Connection: close`)."""
    def fn(sub, params, record):
        secs = max(1, int(params["seconds"]))
        extra = ["-H", "Connection: close"] if close else []
        with _nginx(sub, size, record) as port:
            out = _client(sub, ["wrk", "-t2", "-c32", "-d%ds" % secs, "--timeout", "10s"] +
                          extra + ["http://127.0.0.1:%d/file.bin" % port], record, secs + 60)
        for bad in ("Socket errors", "Non-2xx"):
            if bad in out:
                raise BenchError("wrk reported %s:\n%s" % (bad, out[-1500:]))
        return parse_float(r"Requests/sec:\s+([0-9.]+)", out, "request rate")
    return fn


def nginx_ab(server_plain):
    def fn(sub, params, record):
        secs = max(1, int(params["seconds"]))
        server = benchlib.Substrate(None, params["build_dir"]) if server_plain else sub
        with _nginx(server, 1024, record) as port:
            # -n after -t: ab's -t alone stops at 50,000 requests.
            out = _client(sub, ["ab", "-q", "-t", str(secs), "-n", "10000000", "-c", "1",
                                "http://127.0.0.1:%d/file.bin" % port], record, secs + 60)
        failed = parse_float(r"Failed requests:\s+(\d+)", out, "failed requests")
        if failed or "Non-2xx" in out:
            raise BenchError("ab reported failures:\n%s" % out[-1500:])
        return parse_float(r"Requests per second:\s+([0-9.]+)", out, "request rate")
    return fn


BENCHMARKS = [
    benchlib.Benchmark("nginx1k", "nginx + wrk GET 1 KiB, 32 connections", "req/s", False,
                       nginx_wrk(1024), ["nginx", "wrk"]),
    benchlib.Benchmark("nginx64k", "nginx + wrk GET 64 KiB, 32 connections", "req/s", False,
                       nginx_wrk(64 * 1024), ["nginx", "wrk"]),
    benchlib.Benchmark("nginx64k_close", "nginx + wrk GET 64 KiB, 32 connections at once, "
                       "a connection per request", "req/s", False,
                       nginx_wrk(64 * 1024, close=True), ["nginx", "wrk"]),
    benchlib.Benchmark("nginx_ab", "nginx + ab GET 1 KiB, a connection per request",
                       "req/s", False, nginx_ab(False), ["nginx", "ab"]),
    benchlib.Benchmark("nginx_ab_plain", "plain nginx + ab GET 1 KiB, a connection per "
                       "request", "req/s", False, nginx_ab(True), ["nginx", "ab"]),
]
