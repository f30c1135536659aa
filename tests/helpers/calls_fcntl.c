/*
 * calls_fcntl: fcntl and ioctl on a TCP stream between two processes: O_NONBLOCK, F_DUPFD,
 * F_DUPFD_CLOEXEC, FIONBIO, FIONREAD/SIOCINQ and SIOCOUTQ. Usage: calls_fcntl CASE.
 */
#include "calls_common.h"

#include <linux/sockios.h>

#define SEED 31u

/*
 * O_NONBLOCK: recv/read on an empty socket fail with EAGAIN; send into a full buffer fails
 * with EAGAIN, and exactly the accepted bytes arrive at the peer.
 */
static void case_nonblock(CALLS_ARGS)
{
	char buf[64];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		uint64_t n = 0;
		calls_await(&p);
		calls_write_all(p.fd, "abc", 3);
		CHECK_EQ(read(p.sync_rd, &n, sizeof(n)), sizeof(n));
		calls_recv_pat(p.fd, 0, n, SEED);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	calls_set_nonblock(p.fd, 1);
	CHECK(fcntl(p.fd, F_GETFL) & O_NONBLOCK);
	CHECK_ERR(recv(p.fd, buf, sizeof(buf), 0), EAGAIN);
	CHECK_ERR(read(p.fd, buf, sizeof(buf)), EAGAIN);
	struct iovec iov = {buf, sizeof(buf)};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	CHECK_ERR(recvmsg(p.fd, &m, 0), EAGAIN);
	calls_post(&p, 'g');
	CHECK(calls_wait_for(p.fd, POLLIN, 5000) & POLLIN);
	CHECK_EQ(calls_wait_fionread(p.fd, 3, 5000), 3);
	CHECK_EQ(read(p.fd, buf, sizeof(buf)), 3);
	CHECK_EQ(memcmp(buf, "abc", 3), 0);
	CHECK_ERR(read(p.fd, buf, sizeof(buf)), EAGAIN);

	/* Fill with plain send() calls (no MSG_DONTWAIT): the flag alone makes them fail. */
	static unsigned char chunk[65536];
	uint64_t n = 0;
	int refusals = 0;
	while (refusals < 5) {
		calls_pat_fill(chunk, n, sizeof(chunk), SEED);
		ssize_t r = write(p.fd, chunk, sizeof(chunk));
		if (r == -1) {
			CHECK_EQ(errno, EAGAIN);
			refusals++;
			calls_sleep_ms(20);
			continue;
		}
		CHECK(r > 0);
		refusals = 0;
		n += (uint64_t)r;
	}
	calls_expect_full(p.fd, &n, SEED, 0);
	calls_expect_unwritable(p.fd, &n, SEED, 0);
	CHECK_EQ(write(p.sync_wr, &n, sizeof(n)), sizeof(n));
	/* Once the peer drains, the socket is writable again. */
	CHECK(calls_wait_for(p.fd, POLLOUT, 5000) & POLLOUT);
	calls_set_nonblock(p.fd, 0);
	CHECK_EQ(fcntl(p.fd, F_GETFL) & O_NONBLOCK, 0);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

/*
 * F_DUPFD gives the lowest free fd >= the argument without FD_CLOEXEC, F_DUPFD_CLOEXEC the same
 * with FD_CLOEXEC; both refer to the same connection and keep it open when the original is
 * closed.
 */
static void case_dupfd(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_recv_pat(p.fd, 0, 300, SEED);
		calls_write_all(p.fd, "r", 1);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	int d1 = fcntl(p.fd, F_DUPFD, 100);
	CHECK(d1 >= 100);
	CHECK_EQ(fcntl(d1, F_GETFD) & FD_CLOEXEC, 0);
	int d2 = fcntl(p.fd, F_DUPFD_CLOEXEC, d1);
	CHECK(d2 > d1);
	CHECK(fcntl(d2, F_GETFD) & FD_CLOEXEC);
	CHECK_EQ(fcntl(p.fd, F_GETFD) & FD_CLOEXEC, 0);
	calls_send_pat(p.fd, 0, 100, SEED);
	calls_send_pat(d1, 100, 100, SEED);
	CHECK(close(p.fd) == 0);
	p.fd = -1;
	calls_send_pat(d2, 200, 100, SEED);
	char c;
	calls_read_exact(d1, &c, 1);
	CHECK_EQ(c, 'r');
	CHECK_EQ(fcntl(d1, F_GETFL) & O_NONBLOCK, 0);
	/* F_SETFD on one descriptor does not affect the other. */
	CHECK(fcntl(d1, F_SETFD, FD_CLOEXEC) == 0);
	CHECK(fcntl(d2, F_SETFD, 0) == 0);
	CHECK(fcntl(d1, F_GETFD) & FD_CLOEXEC);
	CHECK_EQ(fcntl(d2, F_GETFD) & FD_CLOEXEC, 0);
	close(d1);
	close(d2);
	calls_pair_close(&p);
}

/*
 * File status flags belong to the open file, not the descriptor: O_NONBLOCK set through a
 * dup shows on the original and makes it non-blocking too.
 */
static void case_flags_shared(CALLS_ARGS)
{
	char c;
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	int d = dup(p.fd);
	CHECK(d >= 0);
	calls_set_nonblock(d, 1);
	CHECK(fcntl(p.fd, F_GETFL) & O_NONBLOCK);
	CHECK_ERR(recv(p.fd, &c, 1, 0), EAGAIN);
	int on = 0;
	CHECK(ioctl(p.fd, FIONBIO, &on) == 0);
	CHECK_EQ(fcntl(d, F_GETFL) & O_NONBLOCK, 0);
	close(d);
	calls_pair_close(&p);
}

/* FIONBIO switches O_NONBLOCK on and off as fcntl sees it. */
static void case_fionbio(CALLS_ARGS)
{
	char c;
	int on = 1;
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_write_all(p.fd, "q", 1);
		calls_pair_close(&p);
	}
	CHECK(ioctl(p.fd, FIONBIO, &on) == 0);
	CHECK(fcntl(p.fd, F_GETFL) & O_NONBLOCK);
	CHECK_ERR(recv(p.fd, &c, 1, 0), EAGAIN);
	on = 0;
	CHECK(ioctl(p.fd, FIONBIO, &on) == 0);
	CHECK_EQ(fcntl(p.fd, F_GETFL) & O_NONBLOCK, 0);
	calls_post(&p, 'g');
	/* Blocking again: waits for the byte. */
	CHECK_EQ(recv(p.fd, &c, 1, 0), 1);
	CHECK_EQ(c, 'q');
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/*
 * FIONREAD and SIOCINQ report the unread byte count: 0 when empty, N once the sender wrote N
 * bytes, less after partial reads, and it never counts beyond what was sent.
 */
static void case_fionread(CALLS_ARGS)
{
	const int n = 12345;
	static unsigned char buf[12345];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_send_pat(p.fd, 0, (size_t)n, SEED);
		calls_post(&p, 's');
		calls_await(&p);
		calls_send_pat(p.fd, (uint64_t)n, 1, SEED);
		calls_pair_close(&p);
	}
	CHECK_EQ(calls_fionread(p.fd), 0);
	calls_post(&p, 'g');
	calls_await(&p);
	CHECK_EQ(calls_wait_fionread(p.fd, n, 5000), n);
	calls_sleep_ms(50);
	CHECK_EQ(calls_fionread(p.fd), n);
	int inq = -1;
	CHECK(ioctl(p.fd, SIOCINQ, &inq) == 0);
	CHECK_EQ(inq, n);
	calls_read_exact(p.fd, buf, 345);
	CHECK_PAT(buf, 0, 345, SEED);
	CHECK_EQ(calls_fionread(p.fd), n - 345);
	calls_read_exact(p.fd, buf, (size_t)n - 345);
	CHECK_PAT(buf, 345, (size_t)n - 345, SEED);
	CHECK_EQ(calls_fionread(p.fd), 0);
	calls_post(&p, 'g');
	CHECK_EQ(calls_wait_fionread(p.fd, 1, 5000), 1);
	calls_read_exact(p.fd, buf, 1);
	CHECK_PAT(buf, (uint64_t)n, 1, SEED);
	calls_expect_eof(p.fd);
	/* At EOF there is nothing to read. */
	CHECK_EQ(calls_fionread(p.fd), 0);
	calls_pair_close(&p);
}

/*
 * SIOCOUTQ counts bytes sent but not yet taken by the peer: never more than was sent, and 0
 * once the peer has read everything. SIOCOUTQNSD likewise.
 */
static void case_siocoutq(CALLS_ARGS)
{
	const int n = 50000;
	struct calls_pair p;
	int outq = -1;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_recv_pat(p.fd, 0, (size_t)n, SEED);
		calls_post(&p, 'r');
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	CHECK(ioctl(p.fd, SIOCOUTQ, &outq) == 0);
	CHECK_EQ(outq, 0);
	calls_send_pat(p.fd, 0, (size_t)n, SEED);
	CHECK(ioctl(p.fd, SIOCOUTQ, &outq) == 0);
	CHECK(outq >= 0 && outq <= n);
	CHECK(ioctl(p.fd, SIOCOUTQNSD, &outq) == 0);
	CHECK(outq >= 0 && outq <= n);
	calls_post(&p, 'g');
	calls_await(&p);
	long long end = calls_now_ms() + 5000;
	do {
		CHECK(ioctl(p.fd, SIOCOUTQ, &outq) == 0);
		CHECK(outq >= 0 && outq <= n);
		if (outq == 0)
			break;
		calls_sleep_ms(2);
	} while (calls_now_ms() < end);
	CHECK_EQ(outq, 0);
	CHECK(ioctl(p.fd, SIOCOUTQNSD, &outq) == 0);
	CHECK_EQ(outq, 0);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

static const struct calls_case cases[] = {
	{"nonblock", case_nonblock},
	{"dupfd", case_dupfd},
	{"flags_shared", case_flags_shared},
	{"fionbio", case_fionbio},
	{"fionread", case_fionread},
	{"siocoutq", case_siocoutq},
	{NULL, NULL},
};

int main(int argc, char **argv)
{
	return calls_main(argc, argv, cases);
}
