/*
 * calls_epoll: epoll_create/epoll_create1/epoll_ctl/epoll_wait/epoll_pwait/epoll_pwait2 with
 * TCP streams between two processes: level- and edge-triggered readiness, EPOLLONESHOT,
 * EPOLLRDHUP, a set mixing sockets with pipes, eventfd, timerfd, UDP and a kernel-path TCP
 * socket, one socket in several sets, nested epoll, registrations that outlive a closed
 * descriptor, fairness with small maxevents, timeouts, signal masks, EINTR and errors.
 * Usage: calls_epoll CASE [ARGS]; `mixed` takes the port of a plain echo peer (calls_peer).
 */
#include "calls_common.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>

#define SEED 51u

static void ep_add(int ep, int fd, uint32_t events, uint64_t u64)
{
	struct epoll_event ev = {.events = events, .data.u64 = u64};

	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0);
}

static void ep_mod(int ep, int fd, uint32_t events, uint64_t u64)
{
	struct epoll_event ev = {.events = events, .data.u64 = u64};

	CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev) == 0);
}

/* epoll_wait that retries EINTR (from nothing in particular) and checks for errors. */
static int ep_wait(int ep, struct epoll_event *ev, int max, int ms)
{
	int n;

	do {
		n = epoll_wait(ep, ev, max, ms);
	} while (n == -1 && errno == EINTR);
	CHECK(n >= 0 && n <= max);
	return n;
}

/* Exactly one event, for u64, with exactly these events; a failure names the caller's line. */
static void ep_expect_one_at(int line, int ep, uint64_t u64, uint32_t events, int ms)
{
	struct epoll_event ev[4];
	int n = ep_wait(ep, ev, 4, ms);

	if (n != 1)
		calls_fail_eq(__FILE__, line, "ep_wait(ep, ev, 4, ms)", "1", n, 1, errno);
	if (ev[0].data.u64 != u64)
		calls_fail_eq(__FILE__, line, "ev[0].data.u64", "u64", (long long)ev[0].data.u64,
			      (long long)u64, 0);
	if (ev[0].events != events)
		calls_fail_eq(__FILE__, line, "ev[0].events", "events", ev[0].events, events, 0);
}
#define ep_expect_one(...) ep_expect_one_at(__LINE__, __VA_ARGS__)

static void ep_expect_none_at(int line, int ep, int ms)
{
	struct epoll_event ev[4];
	int n = ep_wait(ep, ev, 4, ms);

	if (n != 0)
		calls_fail_eq(__FILE__, line, "ep_wait(ep, ev, 4, ms)", "0", n, 0, errno);
}
#define ep_expect_none(...) ep_expect_none_at(__LINE__, __VA_ARGS__)

/* Reads (non-blocking) until EAGAIN; returns the count. */
static size_t drain(int fd)
{
	char buf[4096];
	size_t total = 0;

	for (;;) {
		ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (r == -1) {
			CHECK_EQ(errno, EAGAIN);
			return total;
		}
		CHECK(r > 0);
		total += (size_t)r;
	}
}

/* Creation: flags and the size argument are checked as the kernel checks them. */
static void case_create(CALLS_ARGS)
{
	int ep = epoll_create(1);

	CHECK(ep >= 0);
	CHECK_EQ(fcntl(ep, F_GETFD) & FD_CLOEXEC, 0);
	close(ep);
	ep = epoll_create(1000);
	CHECK(ep >= 0);
	close(ep);
	CHECK_ERR(epoll_create(0), EINVAL);
	CHECK_ERR(epoll_create(-1), EINVAL);
	ep = epoll_create1(0);
	CHECK(ep >= 0);
	CHECK_EQ(fcntl(ep, F_GETFD) & FD_CLOEXEC, 0);
	close(ep);
	ep = epoll_create1(EPOLL_CLOEXEC);
	CHECK(ep >= 0);
	CHECK(fcntl(ep, F_GETFD) & FD_CLOEXEC);
	close(ep);
	CHECK_ERR(epoll_create1(0x40), EINVAL);
}

/* epoll_ctl and epoll_wait errors with a connected socket, as the kernel reports them. */
static void case_ctl_errors(CALLS_ARGS)
{
	struct calls_pair p;
	struct epoll_event ev = {.events = EPOLLIN};
	int pfd[2];

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	int ep = epoll_create1(0);
	CHECK(ep >= 0);
	CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_MOD, p.fd, &ev), ENOENT);
	CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_DEL, p.fd, &ev), ENOENT);
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, p.fd, &ev) == 0);
	CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_ADD, p.fd, &ev), EEXIST);
	CHECK_ERR(epoll_ctl(ep, 99, p.fd, &ev), EINVAL);
	CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_ADD, ep, &ev), EINVAL);
	CHECK_ERR(epoll_ctl(p.fd, EPOLL_CTL_ADD, ep, &ev), EINVAL);
	CHECK(pipe(pfd) == 0);
	close(pfd[1]);
	CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_ADD, pfd[1], &ev), EBADF);
	CHECK_ERR(epoll_ctl(pfd[1], EPOLL_CTL_ADD, p.fd, &ev), EBADF);
	CHECK_ERR(epoll_wait(ep, &ev, 0, 0), EINVAL);
	CHECK_ERR(epoll_wait(p.fd, &ev, 1, 0), EINVAL);
	CHECK_ERR(epoll_wait(pfd[0], &ev, 1, 0), EINVAL);
	CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, p.fd, NULL) == 0);
	CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_DEL, p.fd, NULL), ENOENT);
	close(pfd[0]);
	close(ep);
	calls_pair_close(&p);
}

/* Level-triggered: reported while unread data remains; data.u64 comes back exactly. */
static void case_lt(CALLS_ARGS)
{
	const uint64_t tag = 0xdeadbeefcafef00dull;
	char buf[16];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_write_all(p.fd, "0123456789", 10);
		calls_await(&p);
		calls_pair_close(&p);
	}
	int ep = epoll_create1(EPOLL_CLOEXEC);
	CHECK(ep >= 0);
	ep_add(ep, p.fd, EPOLLIN, tag);
	long long t0 = calls_now_ms();
	ep_expect_none(ep, 150);
	long long dt = calls_now_ms() - t0;
	CHECK(dt >= 140 && dt < 2000);
	calls_post(&p, 'g');
	ep_expect_one(ep, tag, EPOLLIN, 5000);
	CHECK_EQ(calls_wait_fionread(p.fd, 10, 5000), 10);
	ep_expect_one(ep, tag, EPOLLIN, 0);
	calls_read_exact(p.fd, buf, 5);
	ep_expect_one(ep, tag, EPOLLIN, 0);
	calls_read_exact(p.fd, buf + 5, 5);
	CHECK_EQ(memcmp(buf, "0123456789", 10), 0);
	ep_expect_none(ep, 0);
	/* Writability is level-triggered too; MOD changes events and data. */
	ep_mod(ep, p.fd, EPOLLIN | EPOLLOUT, tag + 1);
	ep_expect_one(ep, tag + 1, EPOLLOUT, 0);
	ep_expect_one(ep, tag + 1, EPOLLOUT, 0);
	ep_mod(ep, p.fd, EPOLLIN, tag);
	ep_expect_none(ep, 50);
	/* EOF is readable, level-triggered. */
	calls_post(&p, 'c');
	ep_expect_one(ep, tag, EPOLLIN, 5000);
	ep_expect_one(ep, tag, EPOLLIN, 0);
	calls_expect_eof(p.fd);
	close(ep);
	calls_pair_close(&p);
}

/*
 * Edge-triggered: one event per arrival. No new event without new data, even after a partial
 * read; after draining to EAGAIN a new write from the peer gives a new event.
 */
static void case_et(CALLS_ARGS)
{
	const uint64_t tag = 0x0123456789abcdefull;
	char buf[16];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		for (int i = 0; i < 3; i++) {
			calls_await(&p);
			calls_write_all(p.fd, "0123456789", 10);
		}
		calls_await(&p);
		calls_pair_close(&p);
	}
	int ep = epoll_create1(0);
	CHECK(ep >= 0);
	ep_add(ep, p.fd, EPOLLIN | EPOLLET, tag);
	ep_expect_none(ep, 50);
	for (int round = 0; round < 3; round++) {
		calls_post(&p, 'g');
		ep_expect_one(ep, tag, EPOLLIN, 5000);
		CHECK_EQ(calls_wait_fionread(p.fd, 10, 5000), 10);
		calls_sleep_ms(20);
		/* The arrival may have been split: collect (at most) one more edge. */
		struct epoll_event ev[4];
		int n = ep_wait(ep, ev, 4, 0);
		CHECK(n == 0 || (n == 1 && ev[0].data.u64 == tag));
		ep_expect_none(ep, 100);
		calls_read_exact(p.fd, buf, 4);
		ep_expect_none(ep, 100);
		CHECK_EQ(drain(p.fd), 6);
		ep_expect_none(ep, 100);
	}
	/*
	 * EOF is one more edge. Linux wakes the socket twice for a FIN (tcp_fin's state
	 * change, then the data-ready call), and an epoll_wait that ran on the other CPU
	 * between the two reports a second edge: at most one more is collected, then none.
	 * (A plain run failed once on an unexpected second edge, 4 helpers at once beside 2
	 * fuzzers on 2 vCPUs; which wait saw it was not recorded, and the FIN is the one
	 * double wake-up known here. Failures now name the caller's line.)
	 */
	calls_post(&p, 'c');
	ep_expect_one(ep, tag, EPOLLIN, 5000);
	calls_sleep_ms(20);
	struct epoll_event ev[4];
	int n = ep_wait(ep, ev, 4, 0);
	CHECK(n == 0 || (n == 1 && ev[0].data.u64 == tag && ev[0].events == EPOLLIN));
	ep_expect_none(ep, 100);
	calls_expect_eof(p.fd);
	close(ep);
	calls_pair_close(&p);
}

/* Edge-triggered EPOLLOUT: once when writable, not again while full, again once drained. */
static void case_et_out(CALLS_ARGS)
{
	const uint64_t tag = 77;
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		uint64_t n = 0;
		CHECK_EQ(read(p.sync_rd, &n, sizeof(n)), sizeof(n));
		calls_recv_pat(p.fd, 0, n, SEED);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	int ep = epoll_create1(0);
	CHECK(ep >= 0);
	ep_add(ep, p.fd, EPOLLOUT | EPOLLET, tag);
	ep_expect_one(ep, tag, EPOLLOUT, 1000);
	ep_expect_none(ep, 100);
	uint64_t n = calls_fill(p.fd, 0, SEED);
	/* Silence while full. An edge produced while filling, or by room freed late, is
	 * collected and the socket filled again. */
	struct epoll_event ev[4];
	int quiet = 0;
	for (int i = 0; i < 20 && !quiet; i++) {
		ep_wait(ep, ev, 4, 0);
		calls_expect_unwritable(p.fd, &n, SEED, 0);
		if (ep_wait(ep, ev, 4, 200) == 0)
			quiet = 1;
		else
			n += calls_fill(p.fd, n, SEED);
	}
	CHECK(quiet);
	CHECK_EQ(write(p.sync_wr, &n, sizeof(n)), sizeof(n));
	ep_expect_one(ep, tag, EPOLLOUT, 5000);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	close(ep);
	calls_pair_close(&p);
}

/* EPOLLONESHOT: one event, then nothing (even with more data) until EPOLL_CTL_MOD re-arms. */
static void case_oneshot(CALLS_ARGS)
{
	const uint64_t tag = 0xfeedull << 40;
	char buf[32];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_write_all(p.fd, "one", 3);
		calls_await(&p);
		calls_write_all(p.fd, "two", 3);
		calls_pair_close(&p);
	}
	int ep = epoll_create1(0);
	CHECK(ep >= 0);
	ep_add(ep, p.fd, EPOLLIN | EPOLLONESHOT, tag);
	calls_post(&p, 'g');
	ep_expect_one(ep, tag, EPOLLIN, 5000);
	ep_expect_none(ep, 100);
	calls_post(&p, 'g');
	CHECK_EQ(calls_wait_fionread(p.fd, 6, 5000), 6);
	ep_expect_none(ep, 100);
	ep_mod(ep, p.fd, EPOLLIN | EPOLLONESHOT, tag + 2);
	ep_expect_one(ep, tag + 2, EPOLLIN, 0);
	ep_expect_none(ep, 100);
	calls_read_exact(p.fd, buf, 6);
	CHECK_EQ(memcmp(buf, "onetwo", 6), 0);
	/* Re-armed with nothing to read: silent, then EOF fires it once. */
	ep_mod(ep, p.fd, EPOLLIN | EPOLLONESHOT, tag + 3);
	ep_expect_one(ep, tag + 3, EPOLLIN, 5000);
	ep_expect_none(ep, 100);
	calls_expect_eof(p.fd);
	close(ep);
	calls_pair_close(&p);
}

/*
 * EPOLLRDHUP on the peer's SHUT_WR (without EPOLLHUP); EPOLLHUP once both directions are shut,
 * reported even when not requested; EPOLLERR|EPOLLHUP after a reset.
 */
static void case_rdhup(CALLS_ARGS)
{
	const uint64_t tag = 5;
	struct epoll_event ev[4];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		CHECK(shutdown(p.fd, SHUT_WR) == 0);
		calls_await(&p);
		/* Reset the connection. */
		struct linger lg = {.l_onoff = 1, .l_linger = 0};
		CHECK(setsockopt(p.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0);
		close(p.fd);
		p.fd = -1;
		calls_post(&p, 'r');
		calls_pair_close(&p);
	}
	int ep = epoll_create1(0);
	CHECK(ep >= 0);
	ep_add(ep, p.fd, EPOLLIN | EPOLLRDHUP, tag);
	ep_expect_one(ep, tag, EPOLLIN | EPOLLRDHUP, 5000);
	calls_expect_eof(p.fd);
	ep_mod(ep, p.fd, 0, tag);
	ep_expect_none(ep, 50);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	ep_expect_one(ep, tag, EPOLLHUP, 1000);
	ep_mod(ep, p.fd, EPOLLIN | EPOLLRDHUP | EPOLLOUT, tag);
	CHECK_EQ(ep_wait(ep, ev, 4, 0), 1);
	CHECK(ev[0].events & EPOLLHUP);
	CHECK(ev[0].events & EPOLLRDHUP);
	CHECK(ev[0].events & EPOLLIN);
	/* Once the peer resets: EPOLLERR as well. */
	calls_post(&p, 'g');
	calls_await(&p);
	long long end = calls_now_ms() + 5000;
	do {
		CHECK_EQ(ep_wait(ep, ev, 4, 1000), 1);
	} while (!(ev[0].events & EPOLLERR) && calls_now_ms() < end);
	close(ep);
	calls_pair_close(&p);
}

/* ---- mixed: every kind of fd in one set ---------------------------------------------------- */

enum { M_SHM, M_PIPE, M_EVENTFD, M_TIMERFD, M_UDP, M_KERNEL_TCP, M_LOCAL_TCP, M_COUNT };

static uint64_t mixed_tag(int i)
{
	return 0xa5a5000000000000ull | ((uint64_t)i << 32) | (uint64_t)(i * 0x1111);
}

/* A connection within this process: accepted by a thread. */
struct local_tcp {
	int lfd;
	int fd;
};

static void *local_accept(void *arg)
{
	struct local_tcp *l = arg;

	l->fd = calls_accept(l->lfd);
	return NULL;
}

static void case_mixed(CALLS_ARGS)
{
	struct calls_pair p;
	int fds[M_COUNT];
	int pfd[2];
	char buf[64];

	if (argc < 1) {
		dprintf(2, "mixed: needs the port of a plain calls_peer echo server\n");
		calls_die();
	}
	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_write_all(p.fd, "s", 1);
		calls_await(&p);
		calls_pair_close(&p);
	}
	int ep = epoll_create1(0);
	CHECK(ep >= 0);

	/* A regular file is refused with EPERM, and the set is not disturbed. */
	char path[] = "/tmp/calls_epoll_XXXXXX";
	int file = mkstemp(path);
	CHECK(file >= 0);
	unlink(path);
	struct epoll_event fev = {.events = EPOLLIN, .data.u64 = 1};
	CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_ADD, file, &fev), EPERM);
	close(file);

	fds[M_SHM] = p.fd;
	CHECK(pipe2(pfd, O_NONBLOCK) == 0);
	fds[M_PIPE] = pfd[0];
	fds[M_EVENTFD] = eventfd(0, EFD_NONBLOCK);
	CHECK(fds[M_EVENTFD] >= 0);
	fds[M_TIMERFD] = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
	CHECK(fds[M_TIMERFD] >= 0);
	struct calls_addr ua;
	socklen_t ul = sizeof(ua.ss);
	fds[M_UDP] = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(fds[M_UDP] >= 0);
	calls_loopback(AF_INET, &ua, 0);
	CHECK(bind(fds[M_UDP], (struct sockaddr *)&ua.ss, ua.len) == 0);
	CHECK(getsockname(fds[M_UDP], (struct sockaddr *)&ua.ss, &ul) == 0);
	ua.len = ul;
	/* The kernel-path socket: its peer is a plain process the test started. */
	struct calls_addr ka;
	calls_loopback(AF_INET, &ka, atoi(argv[0]));
	char kstr[80];
	calls_addr_str(&ka, kstr, sizeof(kstr));
	dprintf(1, "calls: expect kernel %s\n", kstr);
	fds[M_KERNEL_TCP] = calls_connect(&ka);
	/* A connection inside this process. */
	struct local_tcp lt = {.fd = -1};
	struct calls_addr la;
	pthread_t t;
	lt.lfd = calls_listen(AF_INET, &la, NULL);
	CHECK(pthread_create(&t, NULL, local_accept, &lt) == 0);
	fds[M_LOCAL_TCP] = calls_connect(&la);
	CHECK(pthread_join(t, NULL) == 0);
	close(lt.lfd);

	for (int i = 0; i < M_COUNT; i++)
		ep_add(ep, fds[i], EPOLLIN, mixed_tag(i));
	ep_expect_none(ep, 100);

	/* Make every one readable. */
	calls_post(&p, 'g');
	CHECK_EQ(write(pfd[1], "p", 1), 1);
	CHECK(eventfd_write(fds[M_EVENTFD], 3) == 0);
	struct itimerspec its = {.it_value = {.tv_nsec = 50 * 1000000}};
	CHECK(timerfd_settime(fds[M_TIMERFD], 0, &its, NULL) == 0);
	CHECK_EQ(sendto(fds[M_UDP], "u", 1, 0, (struct sockaddr *)&ua.ss, ua.len), 1);
	calls_write_all(fds[M_KERNEL_TCP], "k", 1);
	calls_write_all(lt.fd, "l", 1);

	int seen[M_COUNT] = {0};
	int nseen = 0;
	long long end = calls_now_ms() + 5000;
	while (nseen < M_COUNT && calls_now_ms() < end) {
		struct epoll_event ev[16];
		int n = ep_wait(ep, ev, 16, 1000);
		for (int j = 0; j < n; j++) {
			int hit = -1;
			for (int i = 0; i < M_COUNT; i++)
				if (ev[j].data.u64 == mixed_tag(i))
					hit = i;
			CHECK(hit >= 0);
			CHECK_EQ(ev[j].events, EPOLLIN);
			if (!seen[hit])
				nseen++;
			seen[hit] = 1;
		}
	}
	for (int i = 0; i < M_COUNT; i++)
		if (!seen[i])
			dprintf(2, "calls: mixed: no event for member %d\n", i);
	CHECK_EQ(nseen, M_COUNT);

	/* Consume everything; the set goes quiet. */
	uint64_t v = 0;
	calls_read_exact(fds[M_SHM], buf, 1);
	CHECK_EQ(buf[0], 's');
	CHECK_EQ(read(fds[M_PIPE], buf, sizeof(buf)), 1);
	CHECK(eventfd_read(fds[M_EVENTFD], &v) == 0);
	CHECK_EQ(v, 3);
	CHECK_EQ(read(fds[M_TIMERFD], &v, sizeof(v)), sizeof(v));
	CHECK_EQ(v, 1);
	CHECK_EQ(recv(fds[M_UDP], buf, sizeof(buf), 0), 1);
	CHECK_EQ(buf[0], 'u');
	calls_read_exact(fds[M_KERNEL_TCP], buf, 1);
	CHECK_EQ(buf[0], 'k');
	calls_read_exact(fds[M_LOCAL_TCP], buf, 1);
	CHECK_EQ(buf[0], 'l');
	ep_expect_none(ep, 100);

	/* And each can fire again on its own. */
	calls_write_all(fds[M_KERNEL_TCP], "K", 1);
	ep_expect_one(ep, mixed_tag(M_KERNEL_TCP), EPOLLIN, 5000);
	calls_read_exact(fds[M_KERNEL_TCP], buf, 1);
	CHECK_EQ(buf[0], 'K');
	ep_expect_none(ep, 50);

	for (int i = 1; i < M_COUNT; i++)
		close(fds[i]);
	close(pfd[1]);
	close(lt.fd);
	close(ep);
	calls_post(&p, 'c');
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/* One socket in two sets: each reports it with its own data; removing it from one leaves the other. */
static void case_multi_set(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_write_all(p.fd, "m", 1);
		calls_await(&p);
		calls_pair_close(&p);
	}
	int a = epoll_create1(0), b = epoll_create1(0);
	CHECK(a >= 0 && b >= 0);
	ep_add(a, p.fd, EPOLLIN, 0xaaaa);
	ep_add(b, p.fd, EPOLLIN | EPOLLET, 0xbbbb);
	calls_post(&p, 'g');
	ep_expect_one(a, 0xaaaa, EPOLLIN, 5000);
	ep_expect_one(b, 0xbbbb, EPOLLIN, 5000);
	ep_expect_one(a, 0xaaaa, EPOLLIN, 0);
	ep_expect_none(b, 50);
	CHECK(epoll_ctl(a, EPOLL_CTL_DEL, p.fd, NULL) == 0);
	ep_expect_none(a, 50);
	char c;
	calls_read_exact(p.fd, &c, 1);
	CHECK_EQ(c, 'm');
	ep_expect_none(b, 50);
	/* EOF: only b (edge) reports it. */
	calls_post(&p, 'c');
	ep_expect_one(b, 0xbbbb, EPOLLIN, 5000);
	ep_expect_none(a, 50);
	calls_expect_eof(p.fd);
	close(a);
	close(b);
	calls_pair_close(&p);
}

/* An epoll fd inside another: the outer one reports the inner one readable when the socket is. */
static void case_nested(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_write_all(p.fd, "n", 1);
		calls_await(&p);
		calls_pair_close(&p);
	}
	int inner = epoll_create1(0), outer = epoll_create1(0);
	CHECK(inner >= 0 && outer >= 0);
	ep_add(inner, p.fd, EPOLLIN, 0x1111);
	ep_add(outer, inner, EPOLLIN, 0x2222);
	ep_expect_none(outer, 100);
	calls_post(&p, 'g');
	ep_expect_one(outer, 0x2222, EPOLLIN, 5000);
	ep_expect_one(inner, 0x1111, EPOLLIN, 0);
	/* Still pending in the inner set, so still readable from outside. */
	ep_expect_one(outer, 0x2222, EPOLLIN, 0);
	char c;
	calls_read_exact(p.fd, &c, 1);
	CHECK_EQ(c, 'n');
	ep_expect_none(inner, 0);
	ep_expect_none(outer, 0);
	/* poll on the inner epoll fd agrees. */
	CHECK_EQ(calls_wait_for(inner, POLLIN, 0), 0);
	calls_post(&p, 'c');
	CHECK_EQ(calls_wait_for(inner, POLLIN, 5000), POLLIN);
	ep_expect_one(inner, 0x1111, EPOLLIN, 0);
	calls_expect_eof(p.fd);
	close(outer);
	close(inner);
	calls_pair_close(&p);
}

/*
 * poll and select on an epoll fd whose set holds the socket (no epoll_wait on it
 * anywhere): readable exactly when the socket is, a sleep in them ends with the peer's
 * bytes and with its close, and a nested set in the middle changes nothing.
 */
static void case_nested_poll(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_write_all(p.fd, "a", 1);
		calls_await(&p);
		calls_write_all(p.fd, "b", 1);
		calls_await(&p);
		calls_write_all(p.fd, "c", 1);
		calls_await(&p);
		calls_pair_close(&p);
	}
	int inner = epoll_create1(0), outer = epoll_create1(0);
	CHECK(inner >= 0 && outer >= 0);
	ep_add(inner, p.fd, EPOLLIN, 0x1111);
	ep_add(outer, inner, EPOLLIN, 0x2222);
	CHECK_EQ(calls_wait_for(inner, POLLIN, 0), 0);
	CHECK_EQ(calls_select_readable(inner, 0), 0);
	char c;
	/* poll sleeps on the set until the byte comes. */
	calls_post(&p, 'g');
	CHECK_EQ(calls_wait_for(inner, POLLIN, 5000), POLLIN);
	CHECK_EQ(calls_wait_for(outer, POLLIN, 0), POLLIN);
	calls_read_exact(p.fd, &c, 1);
	CHECK_EQ(c, 'a');
	CHECK_EQ(calls_wait_for(inner, POLLIN, 0), 0);
	CHECK_EQ(calls_wait_for(outer, POLLIN, 0), 0);
	/* select on the set, then poll on the set around it. */
	calls_post(&p, 'g');
	CHECK_EQ(calls_select_readable(inner, 5000), 1);
	CHECK_EQ(calls_select_readable(outer, 0), 1);
	calls_read_exact(p.fd, &c, 1);
	CHECK_EQ(c, 'b');
	CHECK_EQ(calls_select_readable(inner, 0), 0);
	calls_post(&p, 'g');
	CHECK_EQ(calls_wait_for(outer, POLLIN, 5000), POLLIN);
	ep_expect_one(inner, 0x1111, EPOLLIN, 0);
	calls_read_exact(p.fd, &c, 1);
	CHECK_EQ(c, 'c');
	ep_expect_none(outer, 0);
	CHECK_EQ(calls_wait_for(outer, POLLIN, 0), 0);
	/* The peer's close. */
	calls_post(&p, 'c');
	CHECK_EQ(calls_wait_for(inner, POLLIN, 5000), POLLIN);
	ep_expect_one(inner, 0x1111, EPOLLIN, 0);
	calls_expect_eof(p.fd);
	close(outer);
	close(inner);
	calls_pair_close(&p);
}

/*
 * A set whose socket was deleted after a wait armed it: the peer's bytes then wake what
 * the arm named (the set's pipe, or the socket: a deleted socket ulsock keeps in the
 * kernel set, a ghost), and neither may make the set readable to poll or to an outer set.
 * Added back, the socket is reported with its bytes.
 */
static void case_nested_deleted(CALLS_ARGS)
{
	struct calls_pair p;
	char c;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_write_all(p.fd, "d", 1);
		calls_await(&p);
		calls_pair_close(&p);
	}
	int inner = epoll_create1(0), outer = epoll_create1(0);
	CHECK(inner >= 0 && outer >= 0);
	ep_add(inner, p.fd, EPOLLIN, 0x1111);
	ep_add(outer, inner, EPOLLIN, 0x2222);
	ep_expect_none(inner, 50); /* slept: the socket is armed */
	CHECK(epoll_ctl(inner, EPOLL_CTL_DEL, p.fd, NULL) == 0);
	calls_post(&p, 'g');
	/* The byte is there once the socket says so. */
	CHECK_EQ(calls_wait_for(p.fd, POLLIN, 5000), POLLIN);
	CHECK_EQ(calls_wait_for(inner, POLLIN, 0), 0);
	CHECK_EQ(calls_select_readable(inner, 0), 0);
	ep_expect_none(outer, 0);
	ep_expect_none(inner, 0);
	CHECK_EQ(calls_wait_for(outer, POLLIN, 0), 0);
	ep_add(inner, p.fd, EPOLLIN, 0x3333);
	CHECK_EQ(calls_wait_for(inner, POLLIN, 0), POLLIN);
	ep_expect_one(inner, 0x3333, EPOLLIN, 0);
	calls_read_exact(p.fd, &c, 1);
	CHECK_EQ(c, 'd');
	CHECK_EQ(calls_wait_for(inner, POLLIN, 0), 0);
	calls_post(&p, 'c');
	calls_expect_eof(p.fd);
	close(outer);
	close(inner);
	calls_pair_close(&p);
}

/* epoll_pwait: the signal mask is swapped in for the call; readiness as epoll_wait. */
static void case_pwait(CALLS_ARGS)
{
	struct calls_pair p;
	struct epoll_event ev[2];
	sigset_t block, empty, old;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_write_all(p.fd, "w", 1);
		calls_pair_close(&p);
	}
	int ep = epoll_create1(0);
	CHECK(ep >= 0);
	ep_add(ep, p.fd, EPOLLIN, 99);
	long long t0 = calls_now_ms();
	CHECK_EQ(epoll_pwait(ep, ev, 2, 150, NULL), 0);
	CHECK(calls_now_ms() - t0 >= 140);
	calls_on_signal(SIGUSR1, 0);
	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	sigemptyset(&empty);
	CHECK(pthread_sigmask(SIG_BLOCK, &block, &old) == 0);
	CHECK(raise(SIGUSR1) == 0);
	CHECK_EQ(calls_sig_count, 0);
	CHECK_ERR(epoll_pwait(ep, ev, 2, 5000, &empty), EINTR);
	CHECK_EQ(calls_sig_count, 1);
	calls_post(&p, 'g');
	CHECK_EQ(epoll_pwait(ep, ev, 2, 5000, &block), 1);
	CHECK_EQ(ev[0].data.u64, 99);
	CHECK_EQ(ev[0].events, EPOLLIN);
	CHECK(pthread_sigmask(SIG_SETMASK, &old, NULL) == 0);
	char c;
	calls_read_exact(p.fd, &c, 1);
	calls_expect_eof(p.fd);
	close(ep);
	calls_pair_close(&p);
}

/* epoll_pwait2: timespec timeouts (including NULL = forever) and readiness. */
static void case_pwait2(CALLS_ARGS)
{
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 35)
	struct calls_pair p;
	struct epoll_event ev[2];

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_sleep_ms(100);
		calls_write_all(p.fd, "2", 1);
		calls_pair_close(&p);
	}
	int ep = epoll_create1(0);
	CHECK(ep >= 0);
	ep_add(ep, p.fd, EPOLLIN, 2);
	struct timespec ts = {.tv_nsec = 150 * 1000000};
	long long t0 = calls_now_ms();
	int r = epoll_pwait2(ep, ev, 2, &ts, NULL);
	if (r == -1 && errno == ENOSYS) {
		kill(p.child, SIGKILL);
		calls_skip("epoll_pwait2: ENOSYS");
	}
	CHECK_EQ(r, 0);
	CHECK(calls_now_ms() - t0 >= 140);
	ts = (struct timespec){0};
	CHECK_EQ(epoll_pwait2(ep, ev, 2, &ts, NULL), 0);
	calls_post(&p, 'g');
	CHECK_EQ(epoll_pwait2(ep, ev, 2, NULL, NULL), 1);
	CHECK_EQ(ev[0].data.u64, 2);
	CHECK_EQ(ev[0].events, EPOLLIN);
	char c;
	calls_read_exact(p.fd, &c, 1);
	calls_expect_eof(p.fd);
	close(ep);
	calls_pair_close(&p);
#else
	calls_skip("glibc has no epoll_pwait2");
#endif
}

/* epoll_wait is never restarted after a handler, even with SA_RESTART (signal(7)). */
static void case_wait_eintr(CALLS_ARGS)
{
	struct calls_pair p;
	struct calls_kick k;
	struct epoll_event ev[2];

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	int ep = epoll_create1(0);
	CHECK(ep >= 0);
	ep_add(ep, p.fd, EPOLLIN, 1);
	calls_on_signal(SIGUSR1, SA_RESTART);
	calls_kick_start(&k, SIGUSR1, 100, 100, -1);
	CHECK_ERR(epoll_wait(ep, ev, 2, -1), EINTR);
	calls_kick_stop(&k);
	CHECK(calls_sig_count >= 1);
	close(ep);
	calls_pair_close(&p);
}

/*
 * A registration belongs to the open file, not the descriptor number: after closing the
 * registered fd while a dup keeps the socket open, events still arrive with the old data, and
 * EPOLL_CTL_DEL by the closed number fails with EBADF. Closing the last descriptor removes it.
 */
static void case_dup_close(CALLS_ARGS)
{
	struct calls_pair p;
	struct epoll_event ev = {.events = EPOLLIN};

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_write_all(p.fd, "d", 1);
		calls_await(&p);
		calls_write_all(p.fd, "e", 1);
		calls_pair_close(&p);
	}
	int ep = epoll_create1(0);
	CHECK(ep >= 0);
	int keep = dup(p.fd);
	CHECK(keep >= 0);
	ep_add(ep, p.fd, EPOLLIN, 0x5eed);
	int old = p.fd;
	CHECK(close(p.fd) == 0);
	p.fd = -1;
	calls_post(&p, 'g');
	ep_expect_one(ep, 0x5eed, EPOLLIN, 5000);
	CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_DEL, old, &ev), EBADF);
	char c;
	calls_read_exact(keep, &c, 1);
	CHECK_EQ(c, 'd');
	ep_expect_none(ep, 50);
	calls_post(&p, 'g');
	CHECK(calls_wait_for(keep, POLLIN, 5000) & POLLIN);
	CHECK_EQ(calls_wait_fionread(keep, 1, 5000), 1);
	ep_expect_one(ep, 0x5eed, EPOLLIN, 0);
	/* The last close drops the registration: nothing more, though data was pending. */
	CHECK(close(keep) == 0);
	ep_expect_none(ep, 100);
	close(ep);
	calls_pair_close(&p);
}

/*
 * The same for a descriptor whose readiness the kernel decides (a pipe): its registration
 * outlives the closed number while a dup keeps the pipe open, with the program's data.
 */
static void case_dup_close_pipe(CALLS_ARGS)
{
	struct epoll_event ev = {.events = EPOLLIN};
	int pfd[2], ep = epoll_create1(0);
	char c;

	CHECK(ep >= 0);
	CHECK(pipe(pfd) == 0);
	int keep = dup(pfd[0]);
	CHECK(keep >= 0);
	ep_add(ep, pfd[0], EPOLLIN, 0xfeed);
	int old = pfd[0];
	CHECK(close(pfd[0]) == 0);
	ep_expect_none(ep, 20);
	CHECK(write(pfd[1], "p", 1) == 1);
	ep_expect_one(ep, 0xfeed, EPOLLIN, 5000);
	CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_MOD, old, &ev), EBADF);
	CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_DEL, old, &ev), EBADF);
	ep_expect_one(ep, 0xfeed, EPOLLIN, 0); /* still there, level-triggered */
	CHECK(read(keep, &c, 1) == 1);
	ep_expect_none(ep, 20);
	CHECK(close(keep) == 0);
	CHECK(write(pfd[1], "q", 1) == 1 || errno == EPIPE);
	ep_expect_none(ep, 50);
	close(pfd[1]);
	close(ep);
}

/*
 * Delete and add again, as event loops do around every request (ulsock keeps such a
 * registration in the kernel set and hides it): a deleted socket is never reported, a
 * second DEL or a MOD gets ENOENT, an add reports what is pending with the new data, a
 * forked child and a close with a dup left open see no trace of the deleted one.
 */
static void case_readd(CALLS_ARGS)
{
	struct calls_pair p;
	struct epoll_event ev = {.events = EPOLLIN};
	char c;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		for (const char *s = "abcde"; *s; s++) {
			calls_await(&p);
			calls_write_all(p.fd, s, 1);
		}
		calls_await(&p);
		calls_pair_close(&p);
	}
	int ep = epoll_create1(0);
	CHECK(ep >= 0);
	ep_add(ep, p.fd, EPOLLIN, 0xa);
	calls_post(&p, 'g');
	ep_expect_one(ep, 0xa, EPOLLIN, 5000);
	calls_read_exact(p.fd, &c, 1);
	CHECK_EQ(c, 'a');
	CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, p.fd, NULL) == 0);
	CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_DEL, p.fd, NULL), ENOENT);
	CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_MOD, p.fd, &ev), ENOENT);
	calls_post(&p, 'g');
	CHECK_EQ(calls_wait_fionread(p.fd, 1, 5000), 1);
	ep_expect_none(ep, 100);
	ep_add(ep, p.fd, EPOLLIN, 0xb);
	CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_ADD, p.fd, &ev), EEXIST);
	ep_expect_one(ep, 0xb, EPOLLIN, 5000);
	calls_read_exact(p.fd, &c, 1);
	CHECK_EQ(c, 'b');
	/* Deleted and added at once, for writing too. */
	CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, p.fd, NULL) == 0);
	ep_add(ep, p.fd, EPOLLIN | EPOLLOUT, 0xc);
	ep_expect_one(ep, 0xc, EPOLLOUT, 5000);
	calls_post(&p, 'g');
	CHECK_EQ(calls_wait_fionread(p.fd, 1, 5000), 1);
	ep_expect_one(ep, 0xc, EPOLLIN | EPOLLOUT, 5000);
	calls_read_exact(p.fd, &c, 1);
	CHECK_EQ(c, 'c');
	/* A fork after a delete: neither process sees the socket in the set. */
	CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, p.fd, NULL) == 0);
	calls_post(&p, 'g');
	CHECK_EQ(calls_wait_fionread(p.fd, 1, 5000), 1);
	pid_t kid = fork();
	CHECK(kid >= 0);
	if (kid == 0) {
		struct epoll_event kev[4];
		_exit(epoll_wait(ep, kev, 4, 100) == 0 ? 0 : 1);
	}
	int st;
	CHECK(waitpid(kid, &st, 0) == kid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	ep_expect_none(ep, 50);
	ep_add(ep, p.fd, EPOLLIN, 0xd);
	ep_expect_one(ep, 0xd, EPOLLIN, 5000);
	calls_read_exact(p.fd, &c, 1);
	CHECK_EQ(c, 'd');
	/* Deleted, then closed while a dup keeps the socket open: not reported either. */
	CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, p.fd, NULL) == 0);
	int keep = dup(p.fd);
	CHECK(keep >= 0);
	CHECK(close(p.fd) == 0);
	p.fd = keep;
	calls_post(&p, 'g');
	CHECK_EQ(calls_wait_fionread(p.fd, 1, 5000), 1);
	ep_expect_none(ep, 100);
	ep_add(ep, p.fd, EPOLLIN, 0xe);
	ep_expect_one(ep, 0xe, EPOLLIN, 5000);
	calls_read_exact(p.fd, &c, 1);
	CHECK_EQ(c, 'e');
	calls_post(&p, 'c');
	calls_expect_eof(p.fd);
	close(ep);
	calls_pair_close(&p);
}

/*
 * Level-triggered with maxevents = 1 and several ready sockets: successive calls go round all
 * of them (the kernel moves a reported item to the back of the ready list), so none starves.
 */
static void case_maxevents(CALLS_ARGS)
{
	enum { N = 4 };
	int fds[N];
	struct epoll_event ev[N + 1];
	pid_t pid = calls_echo_open(AF_INET, N, fds);
	int ep = epoll_create1(0);

	CHECK(ep >= 0);
	for (int i = 0; i < N; i++) {
		ep_add(ep, fds[i], EPOLLIN, 1000 + (uint64_t)i);
		calls_write_all(fds[i], "e", 1);
	}
	long long end = calls_now_ms() + 5000;
	int n;
	do {
		n = ep_wait(ep, ev, N + 1, 1000);
	} while (n < N && calls_now_ms() < end);
	CHECK_EQ(n, N);
	int seen[N] = {0};
	for (int round = 0; round < N; round++) {
		CHECK_EQ(ep_wait(ep, ev, 1, 0), 1);
		CHECK(ev[0].data.u64 >= 1000 && ev[0].data.u64 < 1000 + N);
		seen[ev[0].data.u64 - 1000]++;
	}
	for (int i = 0; i < N; i++)
		CHECK_EQ(seen[i], 1);
	for (int i = 0; i < N; i++) {
		char c;
		calls_read_exact(fds[i], &c, 1);
		CHECK_EQ(c, 'e');
	}
	ep_expect_none(ep, 50);
	close(ep);
	calls_echo_close(pid, N, fds);
}

static const struct calls_case cases[] = {
	{"create", case_create},
	{"ctl_errors", case_ctl_errors},
	{"lt", case_lt},
	{"et", case_et},
	{"et_out", case_et_out},
	{"oneshot", case_oneshot},
	{"rdhup", case_rdhup},
	{"mixed", case_mixed},
	{"multi_set", case_multi_set},
	{"nested", case_nested},
	{"nested_poll", case_nested_poll},
	{"nested_deleted", case_nested_deleted},
	{"pwait", case_pwait},
	{"pwait2", case_pwait2},
	{"wait_eintr", case_wait_eintr},
	{"dup_close", case_dup_close},
	{"dup_close_pipe", case_dup_close_pipe},
	{"maxevents", case_maxevents},
	{"readd", case_readd},
	{NULL, NULL},
};

int main(int argc, char **argv)
{
	return calls_main(argc, argv, cases);
}
