/*
 * calls_sockopt: getsockopt/setsockopt, getsockname/getpeername on a TCP stream between two
 * processes: SO_ERROR, buffer sizes, receive and send timeouts, SO_LINGER, TCP_NODELAY,
 * keepalive, the socket's identity options and the errors for bad arguments.
 * Usage: calls_sockopt CASE.
 */
#include "calls_common.h"

#define SEED 21u

static int get_int(int fd, int level, int opt)
{
	int v = -12345;
	socklen_t len = sizeof(v);

	CHECK(getsockopt(fd, level, opt, &v, &len) == 0);
	CHECK_EQ(len, sizeof(v));
	return v;
}

static void set_int(int fd, int level, int opt, int v)
{
	CHECK(setsockopt(fd, level, opt, &v, sizeof(v)) == 0);
}

static void set_timeo(int fd, int opt, int ms)
{
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};

	CHECK(setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof(tv)) == 0);
}

/*
 * SO_ERROR is 0 on a good connection. A refused connect reports ECONNREFUSED through SO_ERROR
 * once; reading it clears it.
 */
static void case_so_error(CALLS_ARGS)
{
	struct calls_pair p;
	struct calls_addr dead;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		CHECK_EQ(get_int(p.fd, SOL_SOCKET, SO_ERROR), 0);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	CHECK_EQ(get_int(p.fd, SOL_SOCKET, SO_ERROR), 0);

	/* A port nobody listens on: bound, then closed. */
	int l = calls_listen(AF_INET, &dead, NULL);
	close(l);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	CHECK(fd >= 0);
	int r = connect(fd, (struct sockaddr *)&dead.ss, dead.len);
	if (r == -1 && errno == EINPROGRESS) {
		short ev = calls_wait_for(fd, POLLOUT, 5000);
		CHECK(ev & (POLLERR | POLLHUP));
		CHECK_EQ(get_int(fd, SOL_SOCKET, SO_ERROR), ECONNREFUSED);
		CHECK_EQ(get_int(fd, SOL_SOCKET, SO_ERROR), 0);
	} else {
		CHECK_EQ(r, -1);
		CHECK_EQ(errno, ECONNREFUSED);
	}
	close(fd);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK_ERR(connect(fd, (struct sockaddr *)&dead.ss, dead.len), ECONNREFUSED);
	close(fd);
	calls_pair_close(&p);
}

/*
 * SO_SNDBUF/SO_RCVBUF are readable and positive; Linux stores and reports twice the value
 * set (socket(7)); the connection keeps working after resizing.
 */
static void case_bufsizes(CALLS_ARGS)
{
	const size_t n = 2u << 20;
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	CHECK(get_int(p.fd, SOL_SOCKET, SO_SNDBUF) > 0);
	CHECK(get_int(p.fd, SOL_SOCKET, SO_RCVBUF) > 0);
	set_int(p.fd, SOL_SOCKET, SO_SNDBUF, 65536);
	set_int(p.fd, SOL_SOCKET, SO_RCVBUF, 32768);
	CHECK_EQ(get_int(p.fd, SOL_SOCKET, SO_SNDBUF), 2 * 65536);
	CHECK_EQ(get_int(p.fd, SOL_SOCKET, SO_RCVBUF), 2 * 32768);
	if (p.child == 0) {
		calls_send_pat(p.fd, 0, n, SEED);
		calls_recv_pat(p.fd, 0, n, SEED + 1);
		calls_pair_close(&p);
	}
	calls_recv_pat(p.fd, 0, n, SEED);
	calls_send_pat(p.fd, 0, n, SEED + 1);
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/* SO_RCVTIMEO: reads the value back; recv/read/recvmsg on an empty socket time out with EAGAIN. */
/*
 * SO_RCVTIMEO once the connection runs on the ring in both directions (a byte each way
 * first), then the peer exits without a close while this side is in a blocking recv with
 * no timeout: the wait ends with the end of the stream.
 */
static void case_rcvtimeo_ring(CALLS_ARGS)
{
	struct calls_pair p;
	char c;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_write_all(p.fd, "a", 1);
		calls_read_exact(p.fd, &c, 1);
		calls_await(&p);
		_exit(0); /* no close */
	}
	calls_read_exact(p.fd, &c, 1);
	calls_write_all(p.fd, "b", 1);
	set_timeo(p.fd, SO_RCVTIMEO, 200);
	long long t0 = calls_now_ms();
	CHECK_ERR(recv(p.fd, &c, 1, 0), EAGAIN);
	long long dt = calls_now_ms() - t0;
	CHECK(dt >= 180);
	CHECK(dt < 3000);
	set_timeo(p.fd, SO_RCVTIMEO, 0);
	calls_post(&p, 'x');
	CHECK_EQ(recv(p.fd, &c, 1, 0), 0);
	calls_pair_close(&p);
}

static void case_rcvtimeo(CALLS_ARGS)
{
	struct calls_pair p;
	struct timeval tv;
	socklen_t len = sizeof(tv);
	char c;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_write_all(p.fd, "d", 1);
		calls_pair_close(&p);
	}
	set_timeo(p.fd, SO_RCVTIMEO, 200);
	CHECK(getsockopt(p.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &len) == 0);
	CHECK_EQ(len, sizeof(tv));
	CHECK_EQ(tv.tv_sec, 0);
	CHECK(tv.tv_usec >= 190000 && tv.tv_usec <= 210000);
	for (int i = 0; i < 3; i++) {
		struct iovec iov = {&c, 1};
		struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
		long long t0 = calls_now_ms();
		if (i == 0)
			CHECK_ERR(recv(p.fd, &c, 1, 0), EAGAIN);
		else if (i == 1)
			CHECK_ERR(read(p.fd, &c, 1), EAGAIN);
		else
			CHECK_ERR(recvmsg(p.fd, &m, 0), EAGAIN);
		long long dt = calls_now_ms() - t0;
		CHECK(dt >= 180);
		CHECK(dt < 3000);
	}
	/* Data that arrives within the timeout is returned. */
	set_timeo(p.fd, SO_RCVTIMEO, 5000);
	calls_post(&p, 'g');
	CHECK_EQ(recv(p.fd, &c, 1, 0), 1);
	CHECK_EQ(c, 'd');
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/*
 * SO_SNDTIMEO: a send into a full buffer gives up after the timeout with EAGAIN (or returns the
 * bytes it managed to copy); the peer then reads exactly the accepted bytes.
 */
static void case_sndtimeo(CALLS_ARGS)
{
	static unsigned char buf[65536];
	struct calls_pair p;
	struct timeval tv;
	socklen_t len = sizeof(tv);

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		uint64_t n = 0;
		CHECK_EQ(read(p.sync_rd, &n, sizeof(n)), sizeof(n));
		calls_recv_pat(p.fd, 0, n, SEED);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	set_timeo(p.fd, SO_SNDTIMEO, 200);
	CHECK(getsockopt(p.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &len) == 0);
	CHECK(tv.tv_sec == 0 && tv.tv_usec >= 190000 && tv.tv_usec <= 210000);
	uint64_t n = calls_fill(p.fd, 0, SEED);
	int failed = 0;
	for (int i = 0; i < 100 && !failed; i++) {
		calls_pat_fill(buf, n, sizeof(buf), SEED);
		long long t0 = calls_now_ms();
		ssize_t r = send(p.fd, buf, sizeof(buf), 0);
		long long dt = calls_now_ms() - t0;
		if (r == -1) {
			CHECK_EQ(errno, EAGAIN);
			CHECK(dt >= 180);
			CHECK(dt < 3000);
			failed = 1;
		} else {
			CHECK(r > 0);
			n += (uint64_t)r;
		}
	}
	CHECK(failed);
	CHECK_EQ(write(p.sync_wr, &n, sizeof(n)), sizeof(n));
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

/*
 * SO_LINGER reads back what was set. A close with {1, 0} resets the connection: the peer's
 * SO_ERROR or recv reports ECONNRESET.
 */
static void case_linger(CALLS_ARGS)
{
	struct calls_pair p;
	struct linger lg;
	socklen_t len = sizeof(lg);

	calls_pair_open(&p, AF_INET);
	CHECK(getsockopt(p.fd, SOL_SOCKET, SO_LINGER, &lg, &len) == 0);
	CHECK_EQ(len, sizeof(lg));
	CHECK_EQ(lg.l_onoff, 0);
	lg = (struct linger){.l_onoff = 1, .l_linger = 5};
	CHECK(setsockopt(p.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0);
	memset(&lg, 0, sizeof(lg));
	CHECK(getsockopt(p.fd, SOL_SOCKET, SO_LINGER, &lg, &len) == 0);
	CHECK(lg.l_onoff != 0);
	CHECK_EQ(lg.l_linger, 5);
	if (p.child == 0) {
		calls_send_pat(p.fd, 0, 1000, SEED);
		calls_await(&p);
		lg = (struct linger){.l_onoff = 1, .l_linger = 0};
		CHECK(setsockopt(p.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0);
		CHECK(close(p.fd) == 0);
		p.fd = -1;
		calls_post(&p, 'c');
		calls_pair_close(&p);
	}
	calls_recv_pat(p.fd, 0, 1000, SEED);
	calls_post(&p, 'g');
	calls_await(&p);
	short ev = calls_wait_for(p.fd, POLLIN, 5000);
	CHECK(ev & (POLLERR | POLLHUP));
	char c;
	CHECK_ERR(recv(p.fd, &c, 1, 0), ECONNRESET);
	CHECK_EQ(get_int(p.fd, SOL_SOCKET, SO_ERROR), 0);
	CHECK_ERR(send(p.fd, "x", 1, MSG_NOSIGNAL), EPIPE);
	calls_pair_close(&p);
}

/* TCP_NODELAY, SO_KEEPALIVE and the keepalive timings are accepted and read back. */
static void case_nodelay_keepalive(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	CHECK_EQ(get_int(p.fd, IPPROTO_TCP, TCP_NODELAY), 0);
	set_int(p.fd, IPPROTO_TCP, TCP_NODELAY, 1);
	CHECK(get_int(p.fd, IPPROTO_TCP, TCP_NODELAY) != 0);
	CHECK_EQ(get_int(p.fd, SOL_SOCKET, SO_KEEPALIVE), 0);
	set_int(p.fd, SOL_SOCKET, SO_KEEPALIVE, 1);
	CHECK(get_int(p.fd, SOL_SOCKET, SO_KEEPALIVE) != 0);
	set_int(p.fd, IPPROTO_TCP, TCP_KEEPIDLE, 30);
	set_int(p.fd, IPPROTO_TCP, TCP_KEEPINTVL, 5);
	set_int(p.fd, IPPROTO_TCP, TCP_KEEPCNT, 3);
	CHECK_EQ(get_int(p.fd, IPPROTO_TCP, TCP_KEEPIDLE), 30);
	CHECK_EQ(get_int(p.fd, IPPROTO_TCP, TCP_KEEPINTVL), 5);
	CHECK_EQ(get_int(p.fd, IPPROTO_TCP, TCP_KEEPCNT), 3);
	if (p.child == 0) {
		/* Small writes with Nagle off still arrive in order. */
		for (int i = 0; i < 100; i++)
			calls_send_pat(p.fd, (uint64_t)i * 10, 10, SEED);
		set_int(p.fd, IPPROTO_TCP, TCP_NODELAY, 0);
		CHECK_EQ(get_int(p.fd, IPPROTO_TCP, TCP_NODELAY), 0);
		calls_send_pat(p.fd, 1000, 10, SEED);
		calls_pair_close(&p);
	}
	calls_recv_pat(p.fd, 0, 1010, SEED);
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/* The socket's identity: type, domain, protocol, listening or not, TCP state. */
static void case_sockinfo(CALLS_ARGS)
{
	struct calls_pair p;
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	calls_pair_open(&p, AF_INET);
	CHECK_EQ(get_int(p.fd, SOL_SOCKET, SO_TYPE), SOCK_STREAM);
	CHECK_EQ(get_int(p.fd, SOL_SOCKET, SO_DOMAIN), AF_INET);
	CHECK_EQ(get_int(p.fd, SOL_SOCKET, SO_PROTOCOL), IPPROTO_TCP);
	CHECK_EQ(get_int(p.fd, SOL_SOCKET, SO_ACCEPTCONN), 0);
	memset(&ti, 0, sizeof(ti));
	CHECK(getsockopt(p.fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0);
	CHECK(len > 0);
	CHECK_EQ(ti.tcpi_state, TCP_ESTABLISHED);
	if (p.child == 0) {
		calls_write_all(p.fd, "k", 1);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	char c;
	calls_read_exact(p.fd, &c, 1);
	struct calls_addr a;
	int l = calls_listen(AF_INET, &a, NULL);
	CHECK_EQ(get_int(l, SOL_SOCKET, SO_ACCEPTCONN), 1);
	close(l);
	calls_pair_close(&p);
}

/* Bad arguments fail as the kernel fails them, and the connection survives. */
static void case_sockopt_errors(CALLS_ARGS)
{
	struct calls_pair p;
	int v = 1;
	socklen_t len;
	char small;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_recv_pat(p.fd, 0, 100, SEED);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	len = sizeof(v);
	CHECK_ERR(getsockopt(p.fd, SOL_SOCKET, 0x7777, &v, &len), ENOPROTOOPT);
	CHECK_ERR(setsockopt(p.fd, SOL_SOCKET, 0x7777, &v, sizeof(v)), ENOPROTOOPT);
	CHECK_ERR(setsockopt(p.fd, IPPROTO_TCP, TCP_NODELAY, &small, 1), EINVAL);
	CHECK_ERR(setsockopt(p.fd, SOL_SOCKET, SO_RCVTIMEO, &v, sizeof(v)), EINVAL);
	len = sizeof(v);
	CHECK_ERR(getsockopt(p.fd, SOL_SOCKET, SO_ERROR, NULL, &len), EFAULT);
	int pfd[2];
	CHECK(pipe(pfd) == 0);
	len = sizeof(v);
	CHECK_ERR(getsockopt(pfd[0], SOL_SOCKET, SO_TYPE, &v, &len), ENOTSOCK);
	close(pfd[0]);
	close(pfd[1]);
	calls_send_pat(p.fd, 0, 100, SEED);
	calls_pair_close(&p);
}

/*
 * getsockname/getpeername: each side's local address is the other's peer, the server's local
 * address is the listener's, and a short buffer is filled partially while the length reports
 * the full size.
 */
static void names(int family)
{
	struct calls_pair p;
	struct calls_addr local, peer, other[2];
	socklen_t sl;

	calls_pair_open(&p, family);
	local.len = sizeof(local.ss);
	peer.len = sizeof(peer.ss);
	memset(&local.ss, 0, sizeof(local.ss));
	memset(&peer.ss, 0, sizeof(peer.ss));
	CHECK(getsockname(p.fd, (struct sockaddr *)&local.ss, &local.len) == 0);
	CHECK(getpeername(p.fd, (struct sockaddr *)&peer.ss, &peer.len) == 0);
	sl = family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	CHECK_EQ(local.len, sl);
	CHECK_EQ(peer.len, sl);
	CHECK_EQ(local.ss.ss_family, family);
	CHECK_EQ(peer.ss.ss_family, family);
	/* Truncation: 4 bytes written, full length reported. */
	unsigned char shortbuf[8];
	socklen_t shortlen = 4;
	memset(shortbuf, 0xee, sizeof(shortbuf));
	CHECK(getpeername(p.fd, (struct sockaddr *)shortbuf, &shortlen) == 0);
	CHECK_EQ(shortlen, sl);
	CHECK_EQ(memcmp(shortbuf, &peer.ss, 4), 0);
	CHECK_EQ(shortbuf[4], 0xee);
	/* Swap addresses over the connection itself. */
	calls_write_all(p.fd, &local, sizeof(local));
	calls_write_all(p.fd, &peer, sizeof(peer));
	calls_read_exact(p.fd, &other[0], sizeof(other[0]));
	calls_read_exact(p.fd, &other[1], sizeof(other[1]));
	CHECK_EQ(other[0].len, peer.len);
	CHECK_EQ(memcmp(&other[0].ss, &peer.ss, peer.len), 0);
	CHECK_EQ(other[1].len, local.len);
	CHECK_EQ(memcmp(&other[1].ss, &local.ss, local.len), 0);
	if (p.child == 0) {
		CHECK_EQ(peer.len, p.server.len);
		CHECK_EQ(memcmp(&peer.ss, &p.server.ss, peer.len), 0);
		calls_pair_close(&p);
	}
	CHECK_EQ(local.len, p.server.len);
	CHECK_EQ(memcmp(&local.ss, &p.server.ss, local.len), 0);
	int u = socket(family, SOCK_STREAM, 0);
	sl = sizeof(peer.ss);
	CHECK_ERR(getpeername(u, (struct sockaddr *)&peer.ss, &sl), ENOTCONN);
	close(u);
	calls_pair_close(&p);
}

static void case_names(CALLS_ARGS)
{
	names(AF_INET);
}

static void case_names6(CALLS_ARGS)
{
	names(AF_INET6);
}

static const struct calls_case cases[] = {
	{"so_error", case_so_error},
	{"bufsizes", case_bufsizes},
	{"rcvtimeo", case_rcvtimeo},
	{"rcvtimeo_ring", case_rcvtimeo_ring},
	{"sndtimeo", case_sndtimeo},
	{"linger", case_linger},
	{"nodelay_keepalive", case_nodelay_keepalive},
	{"sockinfo", case_sockinfo},
	{"sockopt_errors", case_sockopt_errors},
	{"names", case_names},
	{"names6", case_names6},
	{NULL, NULL},
};

int main(int argc, char **argv)
{
	return calls_main(argc, argv, cases);
}
