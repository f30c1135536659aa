/*
 * calls_poll: poll, ppoll, select and pselect on TCP streams between two processes:
 * readability, writability, hang-up reporting, POLLNVAL, many sockets at once, timeouts,
 * signal masks and EINTR. Usage: calls_poll CASE.
 */
#include "calls_common.h"

#include <sys/select.h>

#define SEED 41u

static int poll1(int fd, short events, int ms, short *revents)
{
	struct pollfd p = {.fd = fd, .events = events};
	int r = poll(&p, 1, ms);

	*revents = p.revents;
	return r;
}

/* POLLIN: a timeout when idle (and it is respected), readiness when data arrives. */
static void case_poll_in(CALLS_ARGS)
{
	short ev;
	char buf[8];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_sleep_ms(200);
		calls_write_all(p.fd, "data", 4);
		calls_pair_close(&p);
	}
	long long t0 = calls_now_ms();
	CHECK_EQ(poll1(p.fd, POLLIN, 150, &ev), 0);
	long long dt = calls_now_ms() - t0;
	CHECK(dt >= 140 && dt < 2000);
	CHECK_EQ(ev, 0);
	CHECK_EQ(poll1(p.fd, POLLIN, 0, &ev), 0);
	calls_post(&p, 'g');
	t0 = calls_now_ms();
	CHECK_EQ(poll1(p.fd, POLLIN | POLLOUT, -1, &ev), 1);
	CHECK(ev & POLLOUT);
	CHECK_EQ(poll1(p.fd, POLLIN, 5000, &ev), 1);
	CHECK_EQ(ev, POLLIN);
	CHECK(calls_now_ms() - t0 < 5000);
	calls_read_exact(p.fd, buf, 4);
	CHECK_EQ(memcmp(buf, "data", 4), 0);
	/* Readable again at EOF. */
	CHECK_EQ(poll1(p.fd, POLLIN, 5000, &ev), 1);
	CHECK(ev & POLLIN);
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/* POLLOUT: writable when fresh, not while the buffer is full, writable again once drained. */
static void case_poll_out(CALLS_ARGS)
{
	short ev;
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		uint64_t n = 0;
		CHECK_EQ(read(p.sync_rd, &n, sizeof(n)), sizeof(n));
		calls_recv_pat(p.fd, 0, n, SEED);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	CHECK_EQ(poll1(p.fd, POLLOUT, 0, &ev), 1);
	CHECK_EQ(ev, POLLOUT);
	uint64_t n = calls_fill(p.fd, 0, SEED);
	/* Not writable while full, for a whole 200 ms timeout. */
	calls_expect_unwritable(p.fd, &n, SEED, 200);
	CHECK_EQ(write(p.sync_wr, &n, sizeof(n)), sizeof(n));
	CHECK_EQ(poll1(p.fd, POLLOUT, 5000, &ev), 1);
	CHECK(ev & POLLOUT);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

/*
 * Hang-ups: the peer's SHUT_WR gives POLLIN|POLLRDHUP without POLLHUP; once this side has
 * shut its writing side too, POLLHUP, which is reported even when not asked for.
 */
static void case_poll_hup(CALLS_ARGS)
{
	short ev;
	char buf[8];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_write_all(p.fd, "bye", 3);
		CHECK(shutdown(p.fd, SHUT_WR) == 0);
		CHECK_EQ(poll1(p.fd, POLLIN | POLLRDHUP, 5000, &ev), 1);
		CHECK(ev & POLLIN);
		CHECK(ev & POLLRDHUP);
		calls_expect_eof(p.fd);
		CHECK_EQ(poll1(p.fd, 0, 0, &ev), 1);
		CHECK(ev & POLLHUP);
		calls_pair_close(&p);
	}
	long long end = calls_now_ms() + 5000;
	do {
		CHECK_EQ(poll1(p.fd, POLLIN | POLLRDHUP, 5000, &ev), 1);
	} while (!(ev & POLLRDHUP) && calls_now_ms() < end);
	CHECK(ev & POLLIN);
	CHECK(ev & POLLRDHUP);
	CHECK(!(ev & POLLHUP));
	CHECK(!(ev & POLLERR));
	calls_read_exact(p.fd, buf, 3);
	CHECK_EQ(memcmp(buf, "bye", 3), 0);
	calls_expect_eof(p.fd);
	CHECK_EQ(poll1(p.fd, POLLIN | POLLRDHUP | POLLOUT, 0, &ev), 1);
	CHECK_EQ(ev, POLLIN | POLLRDHUP | POLLOUT);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	CHECK_EQ(poll1(p.fd, 0, 0, &ev), 1);
	CHECK(ev & POLLHUP);
	CHECK_EQ(poll1(p.fd, POLLIN, 0, &ev), 1);
	CHECK(ev & POLLHUP);
	CHECK(ev & POLLIN);
	calls_pair_close(&p);
}

/*
 * The peer closes completely: POLLIN|POLLRDHUP and EOF, still writable. Writing then draws
 * a reset (the peer is gone): POLLHUP and POLLERR follow, and writes fail with EPIPE. (The
 * kernel accepts that first write; failing it with EPIPE at once is tolerated.)
 */
static void case_poll_peer_close(CALLS_ARGS)
{
	short ev;
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_write_all(p.fd, "last", 4);
		calls_pair_close(&p);
	}
	char buf[8];
	calls_read_exact(p.fd, buf, 4);
	CHECK_EQ(memcmp(buf, "last", 4), 0);
	long long end = calls_now_ms() + 5000;
	do {
		CHECK_EQ(poll1(p.fd, POLLIN | POLLRDHUP | POLLOUT, 5000, &ev), 1);
	} while (!(ev & POLLRDHUP) && calls_now_ms() < end);
	CHECK_EQ(ev, POLLIN | POLLRDHUP | POLLOUT);
	calls_expect_eof(p.fd);
	/* The peer process has exited: its end is gone, so this byte draws a reset. */
	calls_wait_child(p.child);
	p.child = -1;
	ssize_t r = send(p.fd, "x", 1, MSG_NOSIGNAL);
	CHECK(r == 1 || (r == -1 && errno == EPIPE));
	end = calls_now_ms() + 5000;
	do {
		CHECK_EQ(poll1(p.fd, POLLIN, 1000, &ev), 1);
	} while (!(ev & POLLHUP) && calls_now_ms() < end);
	CHECK(ev & POLLHUP);
	CHECK(ev & POLLERR);
	CHECK_ERR(send(p.fd, "x", 1, MSG_NOSIGNAL), EPIPE);
	close(p.fd);
	close(p.sync_wr);
	close(p.sync_rd);
}

/* A closed descriptor gives POLLNVAL; a negative one is ignored. */
static void case_poll_nval(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_write_all(p.fd, "x", 1);
		calls_pair_close(&p);
	}
	int keep = dup(p.fd);
	CHECK(keep >= 0);
	struct pollfd pf[3] = {{.fd = p.fd, .events = POLLIN}, {.fd = -1, .events = POLLIN},
			       {.fd = keep, .events = POLLIN}};
	CHECK(close(p.fd) == 0);
	p.fd = -1;
	/* POLLNVAL alone would end the poll at once: let the byte arrive first. */
	CHECK(calls_wait_for(keep, POLLIN, 5000) & POLLIN);
	CHECK_EQ(poll(pf, 3, 5000), 2);
	CHECK_EQ(pf[0].revents, POLLNVAL);
	CHECK_EQ(pf[1].revents, 0);
	CHECK(pf[2].revents & POLLIN);
	char c;
	calls_read_exact(keep, &c, 1);
	CHECK_EQ(c, 'x');
	calls_expect_eof(keep);
	close(keep);
	calls_pair_close(&p);
}

/* ---- many connections at once ------------------------------------------------------------ */

#define MANY 8

/* Child: opens MANY connections, tagging each with its index, then writes on request. */
static void many_child(const struct calls_addr *server, int rd, int wr)
{
	int fds[MANY];
	char idx;

	for (int i = 0; i < MANY; i++) {
		fds[i] = calls_connect(server);
		idx = (char)i;
		calls_write_all(fds[i], &idx, 1);
	}
	while (read(rd, &idx, 1) == 1) {
		CHECK(idx >= 0 && idx < MANY);
		calls_write_all(fds[(int)idx], "m", 1);
	}
	for (int i = 0; i < MANY; i++)
		close(fds[i]);
	CHECK_EQ(write(wr, "d", 1), 1);
	_exit(0);
}

/* poll over several sockets and a pipe reports exactly the ready ones. */
static void case_poll_many(CALLS_ARGS)
{
	struct calls_addr server;
	int to_child[2], from_child[2], extra[2];
	int fds[MANY];
	struct pollfd pf[MANY + 1];

	int lfd = calls_listen(AF_INET, &server, "shm");
	CHECK(pipe(to_child) == 0 && pipe(from_child) == 0 && pipe(extra) == 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		calls_child_setup();
		close(lfd);
		close(to_child[1]);
		close(from_child[0]);
		many_child(&server, to_child[0], from_child[1]);
	}
	close(to_child[0]);
	close(from_child[1]);
	for (int i = 0; i < MANY; i++) {
		char idx;
		int fd = calls_accept(lfd);
		calls_read_exact(fd, &idx, 1);
		CHECK(idx >= 0 && idx < MANY);
		fds[(int)idx] = fd;
	}
	close(lfd);
	for (int i = 0; i < MANY; i++)
		pf[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
	pf[MANY] = (struct pollfd){.fd = extra[0], .events = POLLIN};
	CHECK_EQ(poll(pf, MANY + 1, 100), 0);

	const char rounds[3][3] = {{5, -1, -1}, {2, 7, -1}, {0, 1, 6}};
	for (int r = 0; r < 3; r++) {
		int want = 0;
		for (int j = 0; j < 3 && rounds[r][j] >= 0; j++, want++)
			CHECK_EQ(write(to_child[1], &rounds[r][j], 1), 1);
		if (r == 2) {
			CHECK_EQ(write(extra[1], "p", 1), 1);
			want++;
		}
		/* Wait until all the expected ones are ready. */
		long long end = calls_now_ms() + 5000;
		int n;
		do {
			n = poll(pf, MANY + 1, 5000);
			CHECK(n >= 1);
		} while (n < want && calls_now_ms() < end);
		CHECK_EQ(n, want);
		for (int i = 0; i < MANY; i++) {
			int expected = 0;
			for (int j = 0; j < 3; j++)
				expected |= rounds[r][j] == i;
			CHECK_EQ(pf[i].revents, expected ? POLLIN : 0);
			if (expected) {
				char c;
				calls_read_exact(fds[i], &c, 1);
				CHECK_EQ(c, 'm');
			}
		}
		CHECK_EQ(pf[MANY].revents, r == 2 ? POLLIN : 0);
	}
	close(to_child[1]);
	char c;
	CHECK_EQ(read(from_child[0], &c, 1), 1);
	for (int i = 0; i < MANY; i++) {
		calls_expect_eof(fds[i]);
		close(fds[i]);
	}
	calls_wait_child(pid);
}

/* ---- ppoll, select, pselect ------------------------------------------------------------------ */

/*
 * ppoll: timespec timeouts are respected; readiness is reported; a signal blocked outside and
 * unblocked by ppoll's mask interrupts it with EINTR after running the handler.
 */
static void case_ppoll(CALLS_ARGS)
{
	struct calls_pair p;
	struct pollfd pf;
	sigset_t block, empty, old;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_write_all(p.fd, "x", 1);
		calls_pair_close(&p);
	}
	pf = (struct pollfd){.fd = p.fd, .events = POLLIN};
	struct timespec ts = {.tv_nsec = 150 * 1000000};
	long long t0 = calls_now_ms();
	CHECK_EQ(ppoll(&pf, 1, &ts, NULL), 0);
	CHECK(calls_now_ms() - t0 >= 140);

	calls_on_signal(SIGUSR1, 0);
	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	sigemptyset(&empty);
	CHECK(pthread_sigmask(SIG_BLOCK, &block, &old) == 0);
	CHECK(raise(SIGUSR1) == 0);
	CHECK_EQ(calls_sig_count, 0);
	ts = (struct timespec){.tv_sec = 5};
	t0 = calls_now_ms();
	CHECK_ERR(ppoll(&pf, 1, &ts, &empty), EINTR);
	CHECK_EQ(calls_sig_count, 1);
	CHECK(calls_now_ms() - t0 < 2000);
	/* The original mask is back: another raise stays pending. */
	CHECK(raise(SIGUSR1) == 0);
	CHECK_EQ(calls_sig_count, 1);
	CHECK(pthread_sigmask(SIG_SETMASK, &old, NULL) == 0);
	CHECK_EQ(calls_sig_count, 2);

	calls_post(&p, 'g');
	ts = (struct timespec){.tv_sec = 5};
	CHECK_EQ(ppoll(&pf, 1, &ts, &empty), 1);
	CHECK_EQ(pf.revents, POLLIN);
	char c;
	calls_read_exact(p.fd, &c, 1);
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/*
 * select: a timeout leaves the sets empty and (Linux) the timeval at zero; data arriving
 * before the timeout wakes it with the remaining time written back; writability and EOF.
 */
static void case_select(CALLS_ARGS)
{
	struct calls_pair p;
	fd_set r, w;
	struct timeval tv;

	calls_pair_open(&p, AF_INET);
	CHECK(p.fd < FD_SETSIZE);
	if (p.child == 0) {
		calls_await(&p);
		calls_sleep_ms(100);
		calls_write_all(p.fd, "s", 1);
		calls_pair_close(&p);
	}
	FD_ZERO(&r);
	FD_SET(p.fd, &r);
	tv = (struct timeval){.tv_usec = 150000};
	long long t0 = calls_now_ms();
	CHECK_EQ(select(p.fd + 1, &r, NULL, NULL, &tv), 0);
	CHECK(calls_now_ms() - t0 >= 140);
	CHECK(!FD_ISSET(p.fd, &r));
	CHECK_EQ(tv.tv_sec, 0);
	CHECK_EQ(tv.tv_usec, 0);

	FD_ZERO(&w);
	FD_SET(p.fd, &w);
	tv = (struct timeval){.tv_sec = 0};
	CHECK_EQ(select(p.fd + 1, NULL, &w, NULL, &tv), 1);
	CHECK(FD_ISSET(p.fd, &w));

	calls_post(&p, 'g');
	FD_ZERO(&r);
	FD_SET(p.fd, &r);
	tv = (struct timeval){.tv_sec = 5};
	CHECK_EQ(select(p.fd + 1, &r, NULL, NULL, &tv), 1);
	CHECK(FD_ISSET(p.fd, &r));
	CHECK(tv.tv_sec < 5);
	CHECK(tv.tv_sec >= 2);
	char c;
	calls_read_exact(p.fd, &c, 1);
	CHECK_EQ(c, 's');
	/* EOF is readable; both sets report in one call. */
	CHECK(calls_wait_for(p.fd, POLLIN, 5000) & POLLIN);
	FD_ZERO(&r);
	FD_SET(p.fd, &r);
	FD_ZERO(&w);
	FD_SET(p.fd, &w);
	tv = (struct timeval){.tv_sec = 5};
	CHECK_EQ(select(p.fd + 1, &r, &w, NULL, &tv), 2);
	CHECK(FD_ISSET(p.fd, &r) && FD_ISSET(p.fd, &w));
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/* pselect: timeout respected, mask swapped in for the call (EINTR), readiness. */
static void case_pselect(CALLS_ARGS)
{
	struct calls_pair p;
	fd_set r;
	sigset_t block, empty, old;

	calls_pair_open(&p, AF_INET);
	CHECK(p.fd < FD_SETSIZE);
	if (p.child == 0) {
		calls_await(&p);
		calls_write_all(p.fd, "s", 1);
		calls_pair_close(&p);
	}
	FD_ZERO(&r);
	FD_SET(p.fd, &r);
	struct timespec ts = {.tv_nsec = 150 * 1000000};
	long long t0 = calls_now_ms();
	CHECK_EQ(pselect(p.fd + 1, &r, NULL, NULL, &ts, NULL), 0);
	CHECK(calls_now_ms() - t0 >= 140);

	calls_on_signal(SIGUSR1, 0);
	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	sigemptyset(&empty);
	CHECK(pthread_sigmask(SIG_BLOCK, &block, &old) == 0);
	CHECK(raise(SIGUSR1) == 0);
	FD_ZERO(&r);
	FD_SET(p.fd, &r);
	ts = (struct timespec){.tv_sec = 5};
	CHECK_ERR(pselect(p.fd + 1, &r, NULL, NULL, &ts, &empty), EINTR);
	CHECK_EQ(calls_sig_count, 1);
	CHECK(pthread_sigmask(SIG_SETMASK, &old, NULL) == 0);

	calls_post(&p, 'g');
	FD_ZERO(&r);
	FD_SET(p.fd, &r);
	ts = (struct timespec){.tv_sec = 5};
	CHECK_EQ(pselect(p.fd + 1, &r, NULL, NULL, &ts, &empty), 1);
	CHECK(FD_ISSET(p.fd, &r));
	char c;
	calls_read_exact(p.fd, &c, 1);
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/*
 * poll, ppoll and select are never restarted after a signal handler, even with SA_RESTART
 * (signal(7)): each returns -1/EINTR.
 */
static void case_poll_eintr(CALLS_ARGS)
{
	struct calls_pair p;
	struct calls_kick k;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	calls_on_signal(SIGUSR1, SA_RESTART);
	for (int how = 0; how < 3; how++) {
		struct pollfd pf = {.fd = p.fd, .events = POLLIN};
		struct timespec ts = {.tv_sec = 10};
		fd_set r;
		FD_ZERO(&r);
		FD_SET(p.fd, &r);
		calls_sig_count = 0;
		calls_kick_start(&k, SIGUSR1, 100, 100, -1);
		if (how == 0)
			CHECK_ERR(poll(&pf, 1, -1), EINTR);
		else if (how == 1)
			CHECK_ERR(ppoll(&pf, 1, &ts, NULL), EINTR);
		else
			CHECK_ERR(select(p.fd + 1, &r, NULL, NULL, NULL), EINTR);
		calls_kick_stop(&k);
		CHECK(calls_sig_count >= 1);
	}
	calls_pair_close(&p);
}

static const struct calls_case cases[] = {
	{"poll_in", case_poll_in},
	{"poll_out", case_poll_out},
	{"poll_hup", case_poll_hup},
	{"poll_peer_close", case_poll_peer_close},
	{"poll_nval", case_poll_nval},
	{"poll_many", case_poll_many},
	{"ppoll", case_ppoll},
	{"select", case_select},
	{"pselect", case_pselect},
	{"poll_eintr", case_poll_eintr},
	{NULL, NULL},
};

int main(int argc, char **argv)
{
	return calls_main(argc, argv, cases);
}
