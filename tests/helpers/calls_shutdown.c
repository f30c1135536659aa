/*
 * calls_shutdown: shutdown(2) and close(2) on a TCP stream between two processes.
 *
 * Half-close in each direction, full shutdown, data queued before a close or shutdown still
 * arriving in full, a thread blocked in recv or send while another thread shuts the socket
 * down or closes it, and the errors shutdown reports. Usage: calls_shutdown CASE.
 */
#include "calls_common.h"

#define SEED_UP 11u
#define SEED_DOWN 12u

/* Joins t, failing if it has not ended within ms. */
static void join_within(pthread_t t, int ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	CHECK_EQ(pthread_timedjoin_np(t, NULL, &ts), 0);
}

/* SHUT_WR: the peer reads everything and then EOF (again and again), and can still answer. */
static void case_shut_wr(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_send_pat(p.fd, 0, 5000, SEED_UP);
		CHECK(shutdown(p.fd, SHUT_WR) == 0);
		CHECK_ERR(send(p.fd, "x", 1, MSG_NOSIGNAL), EPIPE);
		/* Our receive side is untouched. */
		calls_recv_pat(p.fd, 0, 300000, SEED_DOWN);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	calls_recv_pat(p.fd, 0, 5000, SEED_UP);
	short ev = calls_wait_for(p.fd, POLLIN | POLLRDHUP, 5000);
	CHECK(ev & POLLIN);
	CHECK(ev & POLLRDHUP);
	CHECK(!(ev & POLLHUP));
	calls_expect_eof(p.fd);
	calls_expect_eof(p.fd);
	CHECK(calls_wait_for(p.fd, POLLOUT, 0) & POLLOUT);
	calls_send_pat(p.fd, 0, 300000, SEED_DOWN);
	calls_pair_close(&p);
}

/*
 * A socket shut for reading with nothing left to read: recv and read return 0 at once
 * instead of blocking, and poll reports POLLIN|POLLRDHUP.
 */
static void expect_shut_rd_end(int fd)
{
	char buf[16];
	long long t0 = calls_now_ms();

	CHECK_EQ(recv(fd, buf, sizeof(buf), 0), 0);
	CHECK_EQ(read(fd, buf, sizeof(buf)), 0);
	CHECK(calls_now_ms() - t0 < 2000);
	short ev = calls_wait_for(fd, POLLIN | POLLRDHUP, 0);
	CHECK(ev & POLLIN);
	CHECK(ev & POLLRDHUP);
}

/*
 * SHUT_RD with nothing queued: recv returns 0 at once instead of blocking, poll reports
 * POLLIN|POLLRDHUP, and the socket can still send.
 */
static void case_shut_rd(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_recv_pat(p.fd, 0, 100000, SEED_DOWN);
		calls_post(&p, 'd');
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	CHECK(shutdown(p.fd, SHUT_RD) == 0);
	expect_shut_rd_end(p.fd);
	calls_send_pat(p.fd, 0, 100000, SEED_DOWN);
	calls_await(&p);
	calls_pair_close(&p);
}

/*
 * SHUT_RDWR right after a large send: everything sent first still arrives, then EOF. The
 * shut socket reads EOF, refuses to send with EPIPE, and poll reports POLLHUP.
 */
static void case_shut_rdwr(CALLS_ARGS)
{
	const size_t n = 3u << 20;
	char c;
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_recv_pat(p.fd, 0, n, SEED_DOWN);
		calls_expect_eof(p.fd);
		calls_post(&p, 'e');
		calls_pair_close(&p);
	}
	calls_send_pat(p.fd, 0, n, SEED_DOWN);
	CHECK(shutdown(p.fd, SHUT_RDWR) == 0);
	short ev = calls_wait_for(p.fd, POLLIN | POLLOUT | POLLRDHUP, 0);
	CHECK(ev & POLLHUP);
	CHECK(ev & POLLIN);
	CHECK(ev & POLLRDHUP);
	CHECK_EQ(recv(p.fd, &c, 1, 0), 0);
	CHECK_ERR(send(p.fd, "x", 1, MSG_NOSIGNAL), EPIPE);
	calls_await(&p);
	calls_pair_close(&p);
}

/*
 * SHUT_RD does not drop data on Linux: what was queued before it and what the peer sends
 * after it are still delivered; only a receive that finds nothing returns 0 at once.
 */
static void case_shut_rd_then_data(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_send_pat(p.fd, 0, 1000, SEED_UP);
		CHECK_EQ(calls_await(&p), 'r');
		calls_send_pat(p.fd, 1000, 3000, SEED_UP);
		calls_post(&p, 's');
		calls_recv_pat(p.fd, 0, 5000, SEED_DOWN);
		calls_pair_close(&p);
	}
	/* The first bytes are queued (or on the ring) before the shutdown. */
	CHECK(calls_wait_for(p.fd, POLLIN, 5000) & POLLIN);
	usleep(20000);
	CHECK(shutdown(p.fd, SHUT_RD) == 0);
	calls_post(&p, 'r');
	CHECK_EQ(calls_await(&p), 's');
	/* Every byte comes (Nagle may hold the last ones a little: a receive that finds
	 * nothing returns 0 meanwhile, and the loop tries again). */
	static unsigned char want[4000], got[4000];
	size_t have = 0;
	calls_pat_fill(want, 0, sizeof(want), SEED_UP);
	for (long long t1 = calls_now_ms(); have < sizeof(got) && calls_now_ms() - t1 < 5000;) {
		ssize_t n = recv(p.fd, got + have, sizeof(got) - have, 0);
		CHECK(n >= 0);
		if (n == 0)
			usleep(1000);
		have += (size_t)n;
	}
	CHECK_EQ(have, sizeof(got));
	CHECK(memcmp(got, want, sizeof(got)) == 0);
	expect_shut_rd_end(p.fd);
	calls_send_pat(p.fd, 0, 5000, SEED_DOWN);
	calls_pair_close(&p);
}

/*
 * The peer's side of a shutdown both ways: it saw the end (EOF) and answers it with 64
 * bytes, which are accepted; the reset is back when poll says the socket is hung up (it
 * is readable, at its end, from the FIN on). Up to 5 s.
 */
static void answer_end(int fd)
{
	char buf[64] = {0};
	short ev = 0;

	CHECK_EQ(send(fd, buf, sizeof(buf), MSG_NOSIGNAL), (ssize_t)sizeof(buf));
	for (int i = 0; i < 500 && !(ev & (POLLERR | POLLHUP)); i++) {
		ev = calls_wait_for(fd, POLLIN, 0);
		if (!(ev & (POLLERR | POLLHUP)))
			usleep(10000);
	}
	CHECK(ev & (POLLERR | POLLHUP));
}

/* The shut side after that answer: ECONNRESET once, then the end (recv and read). */
static void expect_reset_once(int fd)
{
	char buf[64];

	CHECK_ERR(recv(fd, buf, sizeof(buf), 0), ECONNRESET);
	CHECK_EQ(recv(fd, buf, sizeof(buf), 0), 0);
	CHECK_EQ(read(fd, buf, sizeof(buf)), 0);
}

/*
 * SHUT_RDWR, then the peer sends: Linux answers data that comes after a socket shut both
 * ways with a reset, so the next receive reports ECONNRESET, once, and the stream ends
 * (0) from then on. The peer, which read our FIN, sees the reset on its own next calls.
 */
static void case_shut_rdwr_then_data(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_expect_eof(p.fd);
		answer_end(p.fd);
		calls_post(&p, 's');
		calls_pair_close(&p);
	}
	CHECK(shutdown(p.fd, SHUT_RDWR) == 0);
	CHECK_EQ(calls_await(&p), 's');
	expect_reset_once(p.fd);
	calls_pair_close(&p);
}

/*
 * The same with the roles swapped: the client shuts down both ways before it sent a byte
 * (under ulsock before its switch to the rings), and the server answers the end with
 * data: the server's send is accepted and the client's kernel resets, so the client's
 * next receive reports ECONNRESET once, then 0.
 */
static void case_shut_rdwr_then_data_client(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		CHECK(shutdown(p.fd, SHUT_RDWR) == 0);
		CHECK_EQ(calls_await(&p), 's');
		expect_reset_once(p.fd);
		calls_pair_close(&p);
	}
	calls_expect_eof(p.fd);
	answer_end(p.fd);
	calls_post(&p, 's');
	calls_pair_close(&p);
}

/*
 * close() with the buffers full (the peer has not read anything yet): the peer still gets
 * every byte that send accepted, then EOF.
 */
static void case_close_flush(CALLS_ARGS)
{
	uint64_t n = 0;
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		n = calls_fill(p.fd, 0, SEED_UP);
		CHECK(close(p.fd) == 0);
		p.fd = -1;
		CHECK_EQ(write(p.sync_wr, &n, sizeof(n)), sizeof(n));
		calls_pair_close(&p);
	}
	/* Start reading only once the child has closed. */
	CHECK_EQ(read(p.sync_rd, &n, sizeof(n)), sizeof(n));
	CHECK(n > 0);
	calls_recv_pat(p.fd, 0, n, SEED_UP);
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

struct blocked {
	int fd;
	ssize_t ret;
	int err;
	char byte;
	const void *buf;
	size_t len;
};

static void *blocked_recv(void *arg)
{
	struct blocked *b = arg;

	b->ret = recv(b->fd, &b->byte, 1, 0);
	b->err = errno;
	return NULL;
}

static void *blocked_send(void *arg)
{
	struct blocked *b = arg;

	b->ret = send(b->fd, b->buf, b->len, MSG_NOSIGNAL);
	b->err = errno;
	return NULL;
}

/* shutdown(SHUT_RDWR) wakes a thread blocked in recv on the same socket: it returns 0. */
static void case_shutdown_wakes_recv(CALLS_ARGS)
{
	struct calls_pair p;
	struct blocked b = {0};
	pthread_t t;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	b.fd = p.fd;
	CHECK(pthread_create(&t, NULL, blocked_recv, &b) == 0);
	calls_sleep_ms(200);
	CHECK(shutdown(p.fd, SHUT_RDWR) == 0);
	join_within(t, 3000);
	CHECK_EQ(b.ret, 0);
	calls_pair_close(&p);
}

/*
 * shutdown(SHUT_RDWR) wakes a thread blocked in send on a full buffer: it returns -1/EPIPE,
 * or the count it had already copied. The peer then reads exactly the accepted bytes and EOF.
 */
static void case_shutdown_wakes_send(CALLS_ARGS)
{
	const size_t big = 1u << 20;
	struct calls_pair p;
	struct blocked b = {0};
	pthread_t t;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		uint64_t n = 0;
		CHECK_EQ(read(p.sync_rd, &n, sizeof(n)), sizeof(n));
		calls_recv_pat(p.fd, 0, n, SEED_DOWN);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	uint64_t n = calls_fill(p.fd, 0, SEED_DOWN);
	unsigned char *buf = malloc(big);
	CHECK(buf != NULL);
	calls_pat_fill(buf, n, big, SEED_DOWN);
	b.fd = p.fd;
	b.buf = buf;
	b.len = big;
	CHECK(pthread_create(&t, NULL, blocked_send, &b) == 0);
	calls_sleep_ms(200);
	CHECK(shutdown(p.fd, SHUT_RDWR) == 0);
	join_within(t, 3000);
	dprintf(1, "calls: note blocked send returned %zd errno %d\n", b.ret, b.err);
	if (b.ret == -1) {
		CHECK_EQ(b.err, EPIPE);
	} else {
		CHECK(b.ret > 0 && (size_t)b.ret < big);
		n += (uint64_t)b.ret;
	}
	CHECK_EQ(write(p.sync_wr, &n, sizeof(n)), sizeof(n));
	free(buf);
	calls_pair_close(&p);
}

/*
 * close() while another thread is blocked in recv on the same socket. Linux does not wake the
 * blocked call (it holds its own reference to the socket, so the connection stays up); it
 * returns once the peer sends a byte. Accepted outcomes: that byte, 0 (EOF) or -1/EBADF. The
 * blocked thread must end, and once it has, the peer sees the connection close.
 */
static void case_close_blocked(CALLS_ARGS)
{
	struct calls_pair p;
	struct blocked b = {0};
	pthread_t t;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		char c;
		ssize_t r;
		calls_await(&p);
		r = send(p.fd, "Z", 1, MSG_NOSIGNAL);
		CHECK(r == 1 || (r == -1 && (errno == EPIPE || errno == ECONNRESET)));
		struct timeval tv = {.tv_sec = 5};
		CHECK(setsockopt(p.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0);
		r = recv(p.fd, &c, 1, 0);
		CHECK(r == 0 || (r == -1 && errno == ECONNRESET));
		calls_pair_close(&p);
	}
	b.fd = p.fd;
	CHECK(pthread_create(&t, NULL, blocked_recv, &b) == 0);
	calls_sleep_ms(200);
	CHECK(close(p.fd) == 0);
	p.fd = -1;
	calls_sleep_ms(200);
	calls_post(&p, 's');
	join_within(t, 5000);
	dprintf(1, "calls: note blocked recv returned %zd errno %d\n", b.ret, b.err);
	if (b.ret == 1)
		CHECK_EQ(b.byte, 'Z');
	else if (b.ret == -1)
		CHECK_EQ(b.err, EBADF);
	else
		CHECK_EQ(b.ret, 0);
	calls_pair_close(&p);
}

/* shutdown reports the kernel's errors. */
static void case_shutdown_errors(CALLS_ARGS)
{
	struct calls_pair p;
	int pfd[2];

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		char ok[2];
		calls_read_exact(p.fd, ok, 2);
		CHECK_EQ(memcmp(ok, "ok", 2), 0);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	CHECK_ERR(shutdown(p.fd, 3), EINVAL);
	CHECK_ERR(shutdown(p.fd, -1), EINVAL);
	int u = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(u >= 0);
	CHECK_ERR(shutdown(u, SHUT_RDWR), ENOTCONN);
	close(u);
	CHECK(pipe(pfd) == 0);
	CHECK_ERR(shutdown(pfd[0], SHUT_RDWR), ENOTSOCK);
	close(pfd[0]);
	close(pfd[1]);
	CHECK_ERR(shutdown(pfd[0], SHUT_RDWR), EBADF);
	/* The connection is still intact after the refused calls. */
	CHECK_EQ(send(p.fd, "ok", 2, 0), 2);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

static const struct calls_case cases[] = {
	{"shut_wr", case_shut_wr},
	{"shut_rd", case_shut_rd},
	{"shut_rdwr", case_shut_rdwr},
	{"shut_rd_then_data", case_shut_rd_then_data},
	{"shut_rdwr_then_data", case_shut_rdwr_then_data},
	{"shut_rdwr_then_data_client", case_shut_rdwr_then_data_client},
	{"close_flush", case_close_flush},
	{"shutdown_wakes_recv", case_shutdown_wakes_recv},
	{"shutdown_wakes_send", case_shutdown_wakes_send},
	{"close_blocked", case_close_blocked},
	{"shutdown_errors", case_shutdown_errors},
	{NULL, NULL},
};

int main(int argc, char **argv)
{
	return calls_main(argc, argv, cases);
}
