/*
 * calls_urgent: TCP urgent data between two processes.
 *
 * send(MSG_OOB) of one and of several bytes (only the last byte is urgent); recv(MSG_OOB)
 * and MSG_OOB|MSG_PEEK; the normal stream stops at the mark, then skips the urgent byte
 * (without SO_OOBINLINE) or carries it (with it); reading past the mark without taking the
 * urgent byte loses it; SIOCATMARK before, at and after the mark; select's exceptfds, poll's
 * POLLPRI and epoll's EPOLLPRI; EINVAL from recv(MSG_OOB) when there is no urgent byte to
 * take; SIGURG to the F_SETOWN owner and to nobody else. Urgent data arrives on its own
 * schedule: a receiver always waits for POLLPRI (10 s at most) before it looks.
 * Usage: calls_urgent CASE.
 */
#include "calls_common.h"

#include <sys/epoll.h>
#include <sys/select.h>

#define SEED_UP 1u   /* client -> server */
#define SEED_DOWN 2u /* server -> client */

#define WAIT_MS 10000

static int at_mark(int fd)
{
	int v = -1;

	CHECK(ioctl(fd, SIOCATMARK, &v) == 0);
	CHECK(v == 0 || v == 1);
	return v;
}

/* POLLPRI right now (no wait). */
static int pri_now(int fd)
{
	return (calls_wait_for(fd, POLLPRI, 0) & POLLPRI) != 0;
}

static void wait_pri(int fd)
{
	if (!(calls_wait_for(fd, POLLPRI, WAIT_MS) & POLLPRI))
		calls_fail(__FILE__, __LINE__, "no POLLPRI within 10 s of the urgent send", 0);
}

static void send_pat_flags(int fd, uint64_t off, size_t n, unsigned seed, int flags)
{
	unsigned char buf[8192];

	CHECK(n <= sizeof(buf));
	calls_pat_fill(buf, off, n, seed);
	CHECK_EQ(send(fd, buf, n, flags), n);
}

/*
 * The urgent exchange: stream bytes [0, pre) of pattern `seed` sent normally, [pre,
 * pre + urg) with MSG_OOB (its last byte is the urgent one), then [pre + urg, +post).
 */
struct urgent {
	size_t pre, urg, post;
	unsigned seed;
};

static void urgent_send(int fd, const struct urgent *u)
{
	send_pat_flags(fd, 0, u->pre, u->seed, 0);
	send_pat_flags(fd, u->pre, u->urg, u->seed, MSG_OOB);
	send_pat_flags(fd, u->pre + u->urg, u->post, u->seed, 0);
}

/* Reads exactly n stream bytes starting at stream offset off; no read may return more. */
static void read_upto(int fd, uint64_t off, size_t n, unsigned seed)
{
	unsigned char buf[16384];

	while (n > 0) {
		ssize_t r = recv(fd, buf, sizeof(buf), 0);
		CHECK(r > 0);
		/* The kernel never reads across the mark or past what was sent. */
		CHECK((size_t)r <= n);
		CHECK_PAT(buf, off, (size_t)r, seed);
		off += (uint64_t)r;
		n -= (size_t)r;
	}
}

/*
 * The receiver of urgent_send. take: read the urgent byte with recv(MSG_OOB) at the mark
 * (else the normal read goes past the mark and the byte is lost). oobinline: SO_OOBINLINE
 * is set, so the byte stays in the stream and recv(MSG_OOB) is EINVAL.
 */
static void urgent_recv(int fd, const struct urgent *u, int take, int oobinline)
{
	uint64_t mark = u->pre + u->urg - 1;
	unsigned char want = calls_pat(mark, u->seed);
	unsigned char c = 0;

	wait_pri(fd);
	CHECK_EQ(at_mark(fd), 0);
	if (oobinline) {
		CHECK_ERR(recv(fd, &c, 1, MSG_OOB), EINVAL);
	} else {
		CHECK_EQ(recv(fd, &c, 1, MSG_OOB | MSG_PEEK), 1);
		CHECK_EQ(c, want);
		CHECK(pri_now(fd));
	}
	read_upto(fd, 0, (size_t)mark, u->seed);
	CHECK_EQ(at_mark(fd), 1);
	if (oobinline) {
		read_upto(fd, mark, 1 + u->post, u->seed);
	} else if (take) {
		c = 0;
		CHECK_EQ(recv(fd, &c, 1, MSG_OOB), 1);
		CHECK_EQ(c, want);
		CHECK(!pri_now(fd));
		CHECK_ERR(recv(fd, &c, 1, MSG_OOB), EINVAL);
		CHECK_EQ(at_mark(fd), 1);
		read_upto(fd, mark + 1, u->post, u->seed);
	} else {
		/* At the mark a normal read steps over the urgent byte, which is then gone. */
		read_upto(fd, mark + 1, u->post, u->seed);
		CHECK_ERR(recv(fd, &c, 1, MSG_OOB), EINVAL);
	}
	CHECK_EQ(at_mark(fd), 0);
	CHECK(!pri_now(fd));
}

/* One exchange each way: the child sends first, then the parent. */
static void urgent_both(size_t pre, size_t urg, size_t post, int take, int oobinline)
{
	struct urgent up = {pre, urg, post, SEED_UP};
	struct urgent down = {pre, urg, post, SEED_DOWN};
	struct calls_pair p;
	int one = 1;

	calls_pair_open(&p, AF_INET);
	if (oobinline) {
		int v = -1;
		socklen_t len = sizeof(v);
		CHECK(getsockopt(p.fd, SOL_SOCKET, SO_OOBINLINE, &v, &len) == 0);
		CHECK_EQ(v, 0);
		CHECK(setsockopt(p.fd, SOL_SOCKET, SO_OOBINLINE, &one, sizeof(one)) == 0);
		CHECK(getsockopt(p.fd, SOL_SOCKET, SO_OOBINLINE, &v, &len) == 0);
		CHECK_EQ(v, 1);
	}
	if (p.child == 0) {
		calls_await(&p);
		urgent_send(p.fd, &up);
		urgent_recv(p.fd, &down, take, oobinline);
		CHECK(shutdown(p.fd, SHUT_WR) == 0);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	calls_post(&p, 'g');
	urgent_recv(p.fd, &up, take, oobinline);
	urgent_send(p.fd, &down);
	calls_expect_eof(p.fd);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

/* One urgent byte after 5000 normal ones, 3000 after it; taken with recv(MSG_OOB). */
static void case_oob_one(CALLS_ARGS)
{
	urgent_both(5000, 1, 3000, 1, 0);
}

/* send(MSG_OOB) of 3 bytes: the first two are normal data, the last is urgent. */
static void case_oob_several(CALLS_ARGS)
{
	urgent_both(7, 3, 3, 1, 0);
}

/* The reader never asks for the urgent byte: the stream skips it and it is lost. */
static void case_oob_skip(CALLS_ARGS)
{
	urgent_both(7, 3, 3, 0, 0);
}

/* SO_OOBINLINE: the urgent byte stays in the stream; reads still stop at the mark. */
static void case_oob_inline(CALLS_ARGS)
{
	urgent_both(5000, 4, 100, 1, 1);
}

/* ---- readiness ------------------------------------------------------------------------------- */

/* What select reports for fd in readfds and exceptfds after waiting up to ms. */
static void select_fd(int fd, int ms, int *rd, int *ex)
{
	fd_set r, e;
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	int n;

	FD_ZERO(&r);
	FD_ZERO(&e);
	FD_SET(fd, &r);
	FD_SET(fd, &e);
	do {
		n = select(fd + 1, &r, NULL, &e, &tv);
	} while (n == -1 && errno == EINTR);
	CHECK(n >= 0);
	*rd = FD_ISSET(fd, &r) != 0;
	*ex = FD_ISSET(fd, &e) != 0;
}

/* Waits until select reports fd in exceptfds (10 s at most). */
static void select_wait_except(int fd)
{
	fd_set e;
	struct timeval tv = {.tv_sec = WAIT_MS / 1000};
	int n;

	FD_ZERO(&e);
	FD_SET(fd, &e);
	do {
		n = select(fd + 1, NULL, NULL, &e, &tv);
	} while (n == -1 && errno == EINTR);
	CHECK_EQ(n, 1);
	CHECK(FD_ISSET(fd, &e));
}

static uint32_t epoll_events(int ep, int ms)
{
	struct epoll_event ev[2];
	int n;

	do {
		n = epoll_wait(ep, ev, 2, ms);
	} while (n == -1 && errno == EINTR);
	CHECK(n == 0 || n == 1);
	return n ? ev[0].events : 0;
}

/*
 * The receiving side: one normal byte makes the socket readable but not exceptional; the
 * urgent byte makes it exceptional for select, POLLPRI for poll, EPOLLPRI for epoll; once
 * the urgent byte is read none of them reports it; the normal byte is still there.
 */
static void events_recv(struct calls_pair *p, unsigned seed)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLPRI};
	struct pollfd pf = {.fd = p->fd, .events = POLLIN | POLLPRI};
	int ep = epoll_create1(EPOLL_CLOEXEC);
	int rd, ex;
	unsigned char c;

	CHECK(ep >= 0);
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, p->fd, &ev) == 0);
	CHECK_EQ(epoll_events(ep, 0), 0);
	select_fd(p->fd, 0, &rd, &ex);
	CHECK(!rd && !ex);
	calls_post(p, 'n');
	CHECK(calls_wait_for(p->fd, POLLIN, WAIT_MS) & POLLIN);
	select_fd(p->fd, 0, &rd, &ex);
	CHECK(rd && !ex);
	CHECK_EQ(poll(&pf, 1, 0), 1);
	CHECK_EQ(pf.revents, POLLIN);
	CHECK_EQ(epoll_events(ep, 0), EPOLLIN);

	calls_post(p, 'u');
	select_wait_except(p->fd);
	select_fd(p->fd, 0, &rd, &ex);
	CHECK(rd && ex);
	CHECK_EQ(poll(&pf, 1, 0), 1);
	CHECK_EQ(pf.revents, POLLIN | POLLPRI);
	CHECK_EQ(epoll_events(ep, WAIT_MS), EPOLLIN | EPOLLPRI);

	CHECK_EQ(recv(p->fd, &c, 1, MSG_OOB), 1);
	CHECK_EQ(c, calls_pat(1, seed));
	select_fd(p->fd, 0, &rd, &ex);
	CHECK(rd && !ex);
	CHECK_EQ(poll(&pf, 1, 0), 1);
	CHECK_EQ(pf.revents, POLLIN);
	CHECK_EQ(epoll_events(ep, 0), EPOLLIN);
	/* The normal byte, then the peer's EOF: the urgent one is not in the stream. */
	CHECK_EQ(recv(p->fd, &c, 1, 0), 1);
	CHECK_EQ(c, calls_pat(0, seed));
	calls_post(p, 'e');
	calls_expect_eof(p->fd);
	close(ep);
}

/* The sending side of events_recv, driven by its posts. */
static void events_send(struct calls_pair *p, unsigned seed)
{
	CHECK_EQ(calls_await(p), 'n');
	send_pat_flags(p->fd, 0, 1, seed, 0);
	CHECK_EQ(calls_await(p), 'u');
	send_pat_flags(p->fd, 1, 1, seed, MSG_OOB);
	CHECK_EQ(calls_await(p), 'e');
	CHECK(shutdown(p->fd, SHUT_WR) == 0);
}

static void case_oob_events(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		events_recv(&p, SEED_DOWN);
		events_send(&p, SEED_UP);
		calls_pair_close(&p);
	}
	events_send(&p, SEED_DOWN);
	events_recv(&p, SEED_UP);
	calls_pair_close(&p);
}

/* ---- no urgent data -------------------------------------------------------------------------- */

/*
 * recv(MSG_OOB) is EINVAL, never a wait, on an idle connection, with only normal bytes
 * queued, and at EOF; SIOCATMARK says 0; the queued bytes are untouched.
 */
static void case_oob_none(CALLS_ARGS)
{
	struct calls_pair p;
	unsigned char c;

	calls_pair_open(&p, AF_INET);
	CHECK_ERR(recv(p.fd, &c, 1, MSG_OOB), EINVAL);
	CHECK_ERR(recv(p.fd, &c, 1, MSG_OOB | MSG_DONTWAIT), EINVAL);
	CHECK_EQ(at_mark(p.fd), 0);
	CHECK(!pri_now(p.fd));
	if (p.child == 0) {
		calls_send_pat(p.fd, 0, 1000, SEED_UP);
		CHECK(shutdown(p.fd, SHUT_WR) == 0);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	CHECK_EQ(calls_wait_fionread(p.fd, 1000, WAIT_MS), 1000);
	CHECK_ERR(recv(p.fd, &c, 1, MSG_OOB), EINVAL);
	CHECK_ERR(recv(p.fd, &c, 1, MSG_OOB | MSG_PEEK), EINVAL);
	CHECK_EQ(at_mark(p.fd), 0);
	calls_recv_pat(p.fd, 0, 1000, SEED_UP);
	calls_expect_eof(p.fd);
	CHECK_ERR(recv(p.fd, &c, 1, MSG_OOB), EINVAL);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

/* ---- SIGURG ---------------------------------------------------------------------------------- */

/* Waits (10 s at most) until the SIGURG count reaches want. */
static void wait_sigurg(int want)
{
	long long end = calls_now_ms() + WAIT_MS;

	while (calls_sig_count < want) {
		if (calls_now_ms() > end)
			calls_fail(__FILE__, __LINE__, "no SIGURG within 10 s", 0);
		calls_sleep_ms(5);
	}
}

/*
 * SIGURG goes to the F_SETOWN owner when urgent data arrives, and nowhere when the socket
 * has no owner: the parent owns nothing for the first urgent byte it gets and sees POLLPRI
 * but no signal; the child owns its socket and gets one; then the parent takes ownership
 * and the next urgent byte signals it.
 */
static void case_oob_sigurg(CALLS_ARGS)
{
	struct urgent up = {100, 1, 10, SEED_UP};
	struct urgent down = {100, 1, 10, SEED_DOWN};
	struct calls_pair p;
	unsigned char c;

	calls_on_signal(SIGURG, SA_RESTART);
	calls_pair_open(&p, AF_INET);
	CHECK_EQ(fcntl(p.fd, F_GETOWN), 0);
	if (p.child == 0) {
		CHECK(fcntl(p.fd, F_SETOWN, getpid()) == 0);
		CHECK_EQ(fcntl(p.fd, F_GETOWN), getpid());
		calls_post(&p, 'o');
		wait_sigurg(1);
		CHECK_EQ(calls_sig_count, 1);
		urgent_recv(p.fd, &down, 1, 0);
		/* The parent has no owner yet. */
		urgent_send(p.fd, &up);
		CHECK_EQ(calls_await(&p), 'n');
		send_pat_flags(p.fd, up.pre + up.urg + up.post, 1, SEED_UP, MSG_OOB);
		calls_expect_eof(p.fd);
		CHECK_EQ(calls_sig_count, 1);
		calls_pair_close(&p);
	}
	CHECK_EQ(calls_await(&p), 'o');
	urgent_send(p.fd, &down);
	urgent_recv(p.fd, &up, 1, 0);
	CHECK_EQ(calls_sig_count, 0);
	CHECK(fcntl(p.fd, F_SETOWN, getpid()) == 0);
	calls_post(&p, 'n');
	wait_sigurg(1);
	wait_pri(p.fd);
	CHECK_EQ(recv(p.fd, &c, 1, MSG_OOB), 1);
	CHECK_EQ(c, calls_pat(up.pre + up.urg + up.post, SEED_UP));
	CHECK_EQ(calls_sig_count, 1);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

static const struct calls_case cases[] = {
	{"oob_one", case_oob_one},
	{"oob_several", case_oob_several},
	{"oob_skip", case_oob_skip},
	{"oob_inline", case_oob_inline},
	{"oob_events", case_oob_events},
	{"oob_none", case_oob_none},
	{"oob_sigurg", case_oob_sigurg},
	{NULL, NULL},
};

int main(int argc, char **argv)
{
	return calls_main(argc, argv, cases);
}
