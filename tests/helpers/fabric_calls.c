/*
 * fabric_calls - the socket calls of the test_fabric_calls suite, run between two hosts (two
 * network namespaces) so that under ulsock the connection takes the fabric transport.
 *
 *   fabric_calls CASE --role server|client --addr A --port P --ctl-port Q
 *
 * The server listens on A:P (the data connection: the tests allow-list this port, so it
 * goes on the fabric) and on A:Q (the control connection: not allow-listed, so it stays on
 * kernel TCP). The client connects to both. The control connection carries the one-byte
 * posts that order the two halves of a case, and is the kernel descriptor of the mixed
 * readiness sets. Every wait is bounded (10 s, and the 30 s watchdog of calls_common.h).
 *
 * Before the case both sides greet on the data connection, then wait in poll() on it
 * (asking for no event: the library's progress runs there) so that the fabric handshake
 * ends before the case's first byte, then greet once more. The wait lasts 300 ms, or with
 * --go-stdin until a line comes on standard input (after "GREETED" on standard output):
 * the test sends it once `ulsock stat` shows both ends on the fabric, so that no busy
 * machine can make the handshake outlast the wait. Each half of a case exits 0 only if
 * every check passed; the first failing check prints what and why and exits 1. Output:
 * "READY port=P" (server, once listening), "calls: PASS CASE".
 */
#include "calls_common.h"

#include <limits.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/select.h>

#define WAIT_MS 10000	/* how long anything expected may take to come */
#define QUIET_MS 200	/* how long a wait that must report nothing lasts */
#define SEED 7u

struct fc {
	int server;
	int fd;	 /* the data connection (fabric) */
	int ctl; /* the control connection (kernel TCP) */
};

/* ---- the control connection ---------------------------------------------------------------- */

static void ctl_wait_readable(int ctl)
{
	CHECK(calls_wait_for(ctl, POLLIN, WAIT_MS) & (POLLIN | POLLHUP | POLLERR));
}

static void ctl_post(struct fc *c, char v)
{
	calls_write_all(c->ctl, &v, 1);
}

static void ctl_await(struct fc *c, char want)
{
	char v = 0;

	ctl_wait_readable(c->ctl);
	calls_read_exact(c->ctl, &v, 1);
	CHECK_EQ(v, want);
}

static void ctl_send_u64(struct fc *c, uint64_t v)
{
	calls_write_all(c->ctl, &v, sizeof(v));
}

static uint64_t ctl_recv_u64(struct fc *c)
{
	uint64_t v = 0;

	ctl_wait_readable(c->ctl);
	calls_read_exact(c->ctl, &v, sizeof(v));
	return v;
}

/* Reads the data connection to EOF, verifying pattern SEED from offset 0; returns the count. */
static uint64_t drain_to_eof(int fd)
{
	static unsigned char buf[65536];
	uint64_t off = 0;

	for (;;) {
		CHECK(calls_wait_for(fd, POLLIN, WAIT_MS) != 0);
		ssize_t r = read(fd, buf, sizeof(buf));
		if (r == -1 && errno == EINTR)
			continue;
		CHECK(r >= 0);
		if (r == 0)
			return off;
		CHECK_PAT(buf, off, (size_t)r, SEED);
		off += (uint64_t)r;
	}
}

/* ---- readiness sets: poll, select and level-triggered epoll behind one interface ------------ */

enum mech { M_POLL, M_SELECT, M_EPOLL };

struct wset {
	enum mech m;
	int n;
	int fd[8];
	short ev[8];
	int ep;
};

static void ws_init(struct wset *w, enum mech m)
{
	memset(w, 0, sizeof(*w));
	w->m = m;
	w->ep = -1;
	if (m == M_EPOLL)
		CHECK((w->ep = epoll_create1(EPOLL_CLOEXEC)) >= 0);
}

/* Adds fd for EVENTS (POLLIN, POLLOUT, POLLRDHUP; epoll's bits have the same values). */
static int ws_add(struct wset *w, int fd, short events)
{
	int i = w->n++;

	w->fd[i] = fd;
	w->ev[i] = events;
	if (w->m == M_EPOLL) {
		struct epoll_event e = {.events = (uint32_t)(unsigned short)events, .data.u32 = (uint32_t)i};
		CHECK(epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &e) == 0);
	}
	return i;
}

static void ws_fini(struct wset *w)
{
	if (w->ep >= 0)
		close(w->ep);
}

/* Waits up to MS; rev[i] gets member i's events (select: POLLIN/POLLOUT). Returns how many
 * members reported. */
static int ws_wait(struct wset *w, int ms, short *rev)
{
	int r, ready = 0;

	memset(rev, 0, sizeof(short) * (size_t)w->n);
	if (w->m == M_POLL) {
		struct pollfd p[8];
		for (int i = 0; i < w->n; i++)
			p[i] = (struct pollfd){.fd = w->fd[i], .events = w->ev[i]};
		do
			r = poll(p, (nfds_t)w->n, ms);
		while (r == -1 && errno == EINTR);
		CHECK(r >= 0);
		for (int i = 0; i < w->n; i++)
			rev[i] = p[i].revents;
	} else if (w->m == M_SELECT) {
		fd_set rd, wr;
		struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
		int maxfd = -1;
		FD_ZERO(&rd);
		FD_ZERO(&wr);
		for (int i = 0; i < w->n; i++) {
			if (w->ev[i] & POLLIN)
				FD_SET(w->fd[i], &rd);
			if (w->ev[i] & POLLOUT)
				FD_SET(w->fd[i], &wr);
			maxfd = w->fd[i] > maxfd ? w->fd[i] : maxfd;
		}
		do
			r = select(maxfd + 1, &rd, &wr, NULL, &tv);
		while (r == -1 && errno == EINTR);
		CHECK(r >= 0);
		for (int i = 0; i < w->n; i++)
			rev[i] = (short)((FD_ISSET(w->fd[i], &rd) ? POLLIN : 0) |
					 (FD_ISSET(w->fd[i], &wr) ? POLLOUT : 0));
	} else {
		struct epoll_event e[8];
		do
			r = epoll_wait(w->ep, e, 8, ms);
		while (r == -1 && errno == EINTR);
		CHECK(r >= 0);
		for (int k = 0; k < r; k++) {
			CHECK(e[k].data.u32 < (uint32_t)w->n);
			CHECK_EQ(rev[e[k].data.u32], 0); /* one report per member */
			rev[e[k].data.u32] = (short)e[k].events;
		}
	}
	for (int i = 0; i < w->n; i++) {
		ready += rev[i] != 0;
		if (rev[i])
			dprintf(2, "calls[%d] %s: %lld wait(%d ms): member %d (fd %d) reported 0x%x\n",
				(int)getpid(), calls_case_name, calls_now_ms(), ms, i, w->fd[i], rev[i]);
	}
	return ready;
}

/* Waits (up to WAIT_MS, or nothing for QUIET_MS when ONLY is -1) and checks that member ONLY,
 * and no other, reported, with at least the events WANT. Returns its events. */
static short ws_expect(struct wset *w, int only, short want)
{
	short rev[8];
	int n = ws_wait(w, only < 0 ? QUIET_MS : WAIT_MS, rev);

	if (only < 0) {
		CHECK_EQ(n, 0);
		return 0;
	}
	CHECK_EQ(n, 1);
	CHECK_EQ(rev[only] & want, want);
	return rev[only];
}

/* Nothing in the set is ready right now (a wait of 0 ms). Where the data connection, member
 * F, reports anyway, says what a non-blocking peek finds there before failing. */
static void ws_idle(struct wset *w, int f)
{
	short rev[8];

	if (ws_wait(w, 0, rev) == 0)
		return;
	for (int i = 0; i < w->n; i++) {
		char b;
		if (!rev[i])
			continue;
		errno = 0;
		ssize_t r = recv(w->fd[i], &b, 1, MSG_PEEK | MSG_DONTWAIT);
		dprintf(2, "calls[%d] %s: %s (fd %d) reported 0x%x with nothing sent; "
			   "a non-blocking peek returns %zd (errno %d: %s)\n",
			(int)getpid(), calls_case_name, i == f ? "the data connection" : "a member",
			w->fd[i], rev[i], r, errno, strerror(errno));
	}
	calls_fail(__FILE__, __LINE__, "nothing ready in the set", 0);
}

/* ---- readiness cases, one per mechanism ------------------------------------------------------ */

/*
 * A sleeper woken by data that comes later: {fabric, pipe, kernel TCP} in one set; nothing
 * at first, then the fabric connection alone (the peer sends 100 ms after the sleeper said it
 * goes to sleep), then after reading it nothing, then the pipe alone, then the kernel
 * connection alone.
 */
static void later_cli(struct fc *c, enum mech m)
{
	struct wset w;
	int p[2];
	char x;

	CHECK(pipe2(p, O_CLOEXEC) == 0);
	ws_init(&w, m);
	int f = ws_add(&w, c->fd, POLLIN), pi = ws_add(&w, p[0], POLLIN), k = ws_add(&w, c->ctl, POLLIN);
	ws_idle(&w, f);
	ctl_post(c, 'w');
	ws_expect(&w, f, POLLIN);
	calls_recv_pat(c->fd, 0, 3000, SEED);
	ws_idle(&w, f);
	CHECK_EQ(write(p[1], "x", 1), 1);
	ws_expect(&w, pi, POLLIN);
	CHECK_EQ(read(p[0], &x, 1), 1);
	ctl_post(c, 'c');
	ws_expect(&w, k, POLLIN);
	ctl_await(c, 'C');
	ws_fini(&w);
	close(p[0]);
	close(p[1]);
}

static void later_srv(struct fc *c, enum mech m)
{
	(void)m;
	ctl_await(c, 'w');
	calls_sleep_ms(100);
	calls_send_pat(c->fd, 0, 3000, SEED);
	ctl_await(c, 'c');
	ctl_post(c, 'C');
}

/*
 * The writer's half of a full window, member F of W watching the data connection for
 * POLLOUT: fills until EAGAIN and until W stays quiet (room freed late, a return still in
 * flight, is reported and filled again; edge-triggered, it is an edge too); then the peer
 * reads and W must report F writable; one more send, SHUT_WR, and the peer's count of the
 * verified bytes must be all that was sent.
 */
static void blocked_writer(struct fc *c, struct wset *w, int f)
{
	static unsigned char buf[65536];
	uint64_t total = calls_fill(c->fd, 0, SEED);
	short rev[8];

	CHECK(total > 0);
	for (int i = 0;; i++) {
		CHECK(i < 20);
		if (ws_wait(w, QUIET_MS, rev) == 0)
			break;
		CHECK_EQ(rev[f] & POLLOUT, POLLOUT);
		total += calls_fill(c->fd, total, SEED);
	}
	ctl_post(c, 'r');
	ws_expect(w, f, POLLOUT);
	calls_pat_fill(buf, total, sizeof(buf), SEED);
	ssize_t r = send(c->fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_NOSIGNAL);
	CHECK(r > 0);
	total += (uint64_t)r;
	CHECK(shutdown(c->fd, SHUT_WR) == 0);
	CHECK_EQ(ctl_recv_u64(c), total);
}

/*
 * A writer blocked on a full window: sends until EAGAIN without the peer reading; in the set
 * {fabric for POLLOUT, pipe, kernel TCP} nothing reports; then the peer reads: POLLOUT must
 * come (and the fabric connection alone reports). The peer verifies every byte up to the
 * writer's SHUT_WR and says how many it got.
 */
static void full_cli(struct fc *c, enum mech m)
{
	struct wset w;
	int p[2];

	CHECK(pipe2(p, O_CLOEXEC) == 0);
	ws_init(&w, m);
	int f = ws_add(&w, c->fd, POLLOUT);
	ws_add(&w, p[0], POLLIN);
	ws_add(&w, c->ctl, POLLIN);
	blocked_writer(c, &w, f);
	ws_fini(&w);
	close(p[0]);
	close(p[1]);
}

static void full_srv(struct fc *c, enum mech m)
{
	(void)m;
	ctl_await(c, 'r');
	ctl_send_u64(c, drain_to_eof(c->fd));
}

/*
 * EOF readiness after the peer's shutdown(SHUT_WR): nothing, then the fabric connection
 * alone with POLLIN and POLLRDHUP (select: readable), a read of 0, still readable after it
 * (level); this side's direction still carries bytes, and after this side's own SHUT_WR too
 * poll and epoll say POLLHUP.
 */
static void eof_shut_cli(struct fc *c, enum mech m)
{
	short want = m == M_SELECT ? POLLIN : (short)(POLLIN | POLLRDHUP);
	struct wset w;
	int p[2];
	char x;

	CHECK(pipe2(p, O_CLOEXEC) == 0);
	ws_init(&w, m);
	int f = ws_add(&w, c->fd, (short)(POLLIN | POLLRDHUP));
	ws_add(&w, p[0], POLLIN);
	ws_add(&w, c->ctl, POLLIN);
	ws_idle(&w, f);
	ctl_post(c, 's');
	ws_expect(&w, f, want);
	CHECK_EQ(read(c->fd, &x, 1), 0);
	ws_expect(&w, f, want);
	calls_send_pat(c->fd, 0, 5000, SEED);
	CHECK(shutdown(c->fd, SHUT_WR) == 0);
	ctl_await(c, 'k');
	ws_expect(&w, f, want);
	ws_fini(&w);
	close(p[0]);
	close(p[1]);
}

static void eof_shut_srv(struct fc *c, enum mech m)
{
	(void)m;
	ctl_await(c, 's');
	CHECK(shutdown(c->fd, SHUT_WR) == 0);
	CHECK_EQ(drain_to_eof(c->fd), 5000);
	ctl_post(c, 'k');
}

/* EOF readiness after the peer's close() that follows its last bytes: the bytes, EOF, and
 * POLLIN|POLLRDHUP that stay (level). */
static void eof_close_cli(struct fc *c, enum mech m)
{
	short want = m == M_SELECT ? POLLIN : (short)(POLLIN | POLLRDHUP);
	struct wset w;

	ws_init(&w, m);
	int f = ws_add(&w, c->fd, (short)(POLLIN | POLLRDHUP));
	ws_add(&w, c->ctl, POLLIN);
	ws_idle(&w, f);
	ctl_post(c, 's');
	ws_expect(&w, f, POLLIN);
	CHECK_EQ(drain_to_eof(c->fd), 2000);
	ws_expect(&w, f, want);
	ws_expect(&w, f, want);
	ws_fini(&w);
}

static void eof_close_srv(struct fc *c, enum mech m)
{
	(void)m;
	ctl_await(c, 's');
	calls_send_pat(c->fd, 0, 2000, SEED);
	CHECK(close(c->fd) == 0);
	c->fd = -1;
}

/* Both directions shut (the peer's SHUT_WR read to EOF, then this side's own): poll and
 * epoll report POLLHUP, as the kernel does once a socket is shut both ways. */
static void hup_cli(struct fc *c, enum mech m)
{
	struct wset w;

	ws_init(&w, m);
	int f = ws_add(&w, c->fd, (short)(POLLIN | POLLRDHUP));
	ctl_post(c, 's');
	ws_expect(&w, f, (short)(POLLIN | POLLRDHUP));
	calls_expect_eof(c->fd);
	CHECK(shutdown(c->fd, SHUT_WR) == 0);
	ws_expect(&w, f, (short)(POLLIN | POLLRDHUP | POLLHUP));
	ws_fini(&w);
}

static void hup_srv(struct fc *c, enum mech m)
{
	(void)m;
	ctl_await(c, 's');
	CHECK(shutdown(c->fd, SHUT_WR) == 0);
	calls_expect_eof(c->fd);
}

static void poll_hup_cli(struct fc *c) { hup_cli(c, M_POLL); }
static void poll_hup_srv(struct fc *c) { hup_srv(c, M_POLL); }
static void epoll_hup_cli(struct fc *c) { hup_cli(c, M_EPOLL); }
static void epoll_hup_srv(struct fc *c) { hup_srv(c, M_EPOLL); }

#define MECH_CASES(mech, M)                                                                    \
	static void mech##_later_cli(struct fc *c) { later_cli(c, M); }                        \
	static void mech##_later_srv(struct fc *c) { later_srv(c, M); }                        \
	static void mech##_full_cli(struct fc *c) { full_cli(c, M); }                          \
	static void mech##_full_srv(struct fc *c) { full_srv(c, M); }                          \
	static void mech##_eof_shut_cli(struct fc *c) { eof_shut_cli(c, M); }                  \
	static void mech##_eof_shut_srv(struct fc *c) { eof_shut_srv(c, M); }                  \
	static void mech##_eof_close_cli(struct fc *c) { eof_close_cli(c, M); }                \
	static void mech##_eof_close_srv(struct fc *c) { eof_close_srv(c, M); }

MECH_CASES(poll, M_POLL)
MECH_CASES(select, M_SELECT)
MECH_CASES(epoll, M_EPOLL)

/* A blocking read() sleeping for bytes the peer sends 100 ms later. */
static void read_later_cli(struct fc *c)
{
	ctl_post(c, 'w');
	calls_recv_pat(c->fd, 0, 3000, SEED);
}

static void read_later_srv(struct fc *c)
{
	ctl_await(c, 'w');
	calls_sleep_ms(100);
	calls_send_pat(c->fd, 0, 3000, SEED);
}

/* ---- epoll's edge-triggered and one-shot modes ------------------------------------------------ */

static int ep_add(int ep, int fd, uint32_t events, uint32_t idx)
{
	struct epoll_event e = {.events = events, .data.u32 = idx};

	return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
}

static void ep_mod(int ep, int fd, uint32_t events, uint32_t idx)
{
	struct epoll_event e = {.events = events, .data.u32 = idx};

	CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, fd, &e) == 0);
}

/* An epoll-only wset over an existing epoll descriptor (members added with ep_add). */
static void ws_over(struct wset *w, int ep, const int *fds, int n)
{
	memset(w, 0, sizeof(*w));
	w->m = M_EPOLL;
	w->ep = ep;
	w->n = n;
	for (int i = 0; i < n; i++)
		w->fd[i] = fds[i];
}

/*
 * Edge-triggered reads, {fabric ET, pipe ET, kernel TCP LT}: the fabric connection reports
 * once per arrival: after a partial read nothing more until new bytes come; the peer's
 * SHUT_WR is one more edge, with EPOLLRDHUP.
 */
static void epoll_et_read_cli(struct fc *c)
{
	unsigned char buf[256];
	struct wset w;
	int p[2], ep;

	CHECK(pipe2(p, O_CLOEXEC) == 0);
	CHECK((ep = epoll_create1(EPOLL_CLOEXEC)) >= 0);
	CHECK(ep_add(ep, c->fd, EPOLLIN | EPOLLRDHUP | EPOLLET, 0) == 0);
	CHECK(ep_add(ep, p[0], EPOLLIN | EPOLLET, 1) == 0);
	CHECK(ep_add(ep, c->ctl, EPOLLIN, 2) == 0);
	ws_over(&w, ep, (int[]){c->fd, p[0], c->ctl}, 3);
	ws_idle(&w, 0);
	ctl_post(c, 'a');
	ws_expect(&w, 0, EPOLLIN);
	calls_read_exact(c->fd, buf, 10);
	CHECK_PAT(buf, 0, 10, SEED);
	ws_expect(&w, -1, 0);
	CHECK_EQ(write(p[1], "xy", 2), 2);
	ws_expect(&w, 1, EPOLLIN);
	ws_expect(&w, -1, 0); /* one unread byte left in the pipe: no new edge */
	ctl_post(c, 'b');
	ws_expect(&w, 0, EPOLLIN);
	CHECK_EQ(calls_wait_fionread(c->fd, 190, WAIT_MS), 190);
	calls_read_exact(c->fd, buf, 190);
	CHECK_PAT(buf, 10, 190, SEED);
	ws_expect(&w, -1, 0);
	ctl_post(c, 'c');
	short ev = ws_expect(&w, 0, EPOLLIN | EPOLLRDHUP);
	CHECK_EQ(ev & EPOLLERR, 0);
	calls_expect_eof(c->fd);
	close(ep);
	close(p[0]);
	close(p[1]);
}

static void epoll_et_read_srv(struct fc *c)
{
	ctl_await(c, 'a');
	calls_send_pat(c->fd, 0, 100, SEED);
	ctl_await(c, 'b');
	calls_send_pat(c->fd, 100, 100, SEED);
	ctl_await(c, 'c');
	CHECK(shutdown(c->fd, SHUT_WR) == 0);
}

/*
 * Edge-triggered writes: EPOLLOUT once at first, nothing more while nothing changes, nothing
 * once the window is full, and EPOLLOUT again once the peer reads.
 */
static void epoll_et_write_srv(struct fc *c)
{
	full_srv(c, M_EPOLL);
}

static void epoll_et_write_cli(struct fc *c)
{
	struct wset w;
	int ep;

	CHECK((ep = epoll_create1(EPOLL_CLOEXEC)) >= 0);
	CHECK(ep_add(ep, c->fd, EPOLLOUT | EPOLLET, 0) == 0);
	CHECK(ep_add(ep, c->ctl, EPOLLIN, 1) == 0);
	ws_over(&w, ep, (int[]){c->fd, c->ctl}, 2);
	ws_expect(&w, 0, EPOLLOUT);
	ws_expect(&w, -1, 0);
	blocked_writer(c, &w, 0);
	close(ep);
}

/*
 * EPOLLONESHOT: one report, then none (more bytes come, the kernel connection in the same
 * set reports meanwhile) until EPOLL_CTL_MOD re-arms it, which reports the pending bytes at
 * once; re-armed with nothing pending it waits for the next arrival.
 */
static void epoll_oneshot_cli(struct fc *c)
{
	unsigned char buf[256];
	struct wset w;
	int ep;

	CHECK((ep = epoll_create1(EPOLL_CLOEXEC)) >= 0);
	CHECK(ep_add(ep, c->fd, EPOLLIN | EPOLLONESHOT, 0) == 0);
	CHECK(ep_add(ep, c->ctl, EPOLLIN, 1) == 0);
	ws_over(&w, ep, (int[]){c->fd, c->ctl}, 2);
	ctl_post(c, 'a');
	ws_expect(&w, 0, EPOLLIN);
	ctl_post(c, 'b');
	ws_expect(&w, 1, EPOLLIN);
	ctl_await(c, 'B');
	CHECK_EQ(calls_wait_fionread(c->fd, 200, WAIT_MS), 200);
	ws_expect(&w, -1, 0);
	ep_mod(ep, c->fd, EPOLLIN | EPOLLONESHOT, 0);
	ws_expect(&w, 0, EPOLLIN);
	ws_expect(&w, -1, 0);
	calls_read_exact(c->fd, buf, 200);
	CHECK_PAT(buf, 0, 200, SEED);
	ep_mod(ep, c->fd, EPOLLIN | EPOLLONESHOT, 0);
	ws_expect(&w, -1, 0);
	ctl_post(c, 'c');
	ws_expect(&w, 0, EPOLLIN);
	calls_read_exact(c->fd, buf, 100);
	CHECK_PAT(buf, 200, 100, SEED);
	close(ep);
}

static void epoll_oneshot_srv(struct fc *c)
{
	ctl_await(c, 'a');
	calls_send_pat(c->fd, 0, 100, SEED);
	ctl_await(c, 'b');
	calls_send_pat(c->fd, 100, 100, SEED);
	ctl_post(c, 'B');
	ctl_await(c, 'c');
	calls_send_pat(c->fd, 200, 100, SEED);
}

/* ---- data integrity with odd call shapes ------------------------------------------------------- */

/*
 * MSG_PEEK: nothing to peek is EAGAIN; a peek returns the first bytes and leaves them; with
 * all 1,000 bytes (10 sends) arrived, one peek sees all of them across the fabric messages,
 * a second one the same, then reads return exactly them.
 */
static void peek_cli(struct fc *c)
{
	unsigned char a[2000], b[2000];
	ssize_t r;

	CHECK_ERR(recv(c->fd, a, sizeof(a), MSG_PEEK | MSG_DONTWAIT), EAGAIN);
	ctl_post(c, 'a');
	CHECK((r = recv(c->fd, a, sizeof(a), MSG_PEEK)) > 0);
	CHECK_PAT(a, 0, (size_t)r, SEED);
	CHECK_EQ(calls_wait_fionread(c->fd, 1000, WAIT_MS), 1000);
	CHECK_EQ(recv(c->fd, a, sizeof(a), MSG_PEEK), 1000);
	CHECK_PAT(a, 0, 1000, SEED);
	CHECK_EQ(recv(c->fd, b, 7, MSG_PEEK), 7);
	CHECK_PAT(b, 0, 7, SEED);
	CHECK_EQ(read(c->fd, b, 300), 300);
	CHECK_PAT(b, 0, 300, SEED);
	CHECK_EQ(recv(c->fd, a, sizeof(a), MSG_PEEK | MSG_DONTWAIT), 700);
	CHECK_PAT(a, 300, 700, SEED);
	CHECK_EQ(read(c->fd, b, sizeof(b)), 700);
	CHECK_PAT(b, 300, 700, SEED);
	CHECK_ERR(recv(c->fd, a, sizeof(a), MSG_PEEK | MSG_DONTWAIT), EAGAIN);
}

static void peek_srv(struct fc *c)
{
	ctl_await(c, 'a');
	calls_sleep_ms(50);
	for (int i = 0; i < 10; i++)
		calls_send_pat(c->fd, (uint64_t)i * 100, 100, SEED);
}

/* MSG_WAITALL for 1 MiB (four connection windows) sent as 1,000-byte writes: one recv
 * returns all of it, exact; the receiver must return window while it waits. */
static void waitall_cli(struct fc *c)
{
	size_t n = 1 << 20;
	unsigned char *buf = malloc(n);

	CHECK(buf != NULL);
	ctl_post(c, 'a');
	for (int round = 0; round < 2; round++) {
		CHECK_EQ(recv(c->fd, buf, n, MSG_WAITALL), (long long)n);
		CHECK_PAT(buf, (uint64_t)round * n, n, SEED);
	}
	free(buf);
}

static void waitall_srv(struct fc *c)
{
	ctl_await(c, 'a');
	for (uint64_t off = 0; off < 2u << 20; off += 1000) {
		uint64_t k = (2u << 20) - off < 1000 ? (2u << 20) - off : 1000;
		calls_send_pat(c->fd, off, (size_t)k, SEED);
	}
}

/* writev and readv with IOV_MAX iovecs of uneven sizes (0 to 301 bytes), each side its own
 * shape, both directions, 8 rounds: the stream is exact. */
#define IOV_N 1024

/* Iovecs of shape SALT over buf, TOTAL bytes in all (0: the shape's own total); returns it. */
static size_t iov_setup(struct iovec *iov, unsigned char *buf, unsigned salt, size_t total)
{
	size_t at = 0;

	for (int i = 0; i < IOV_N; i++) {
		size_t len = (i % 17 == 0) ? 0 : 1 + (i * 37u + salt * 101u) % 301;
		if (i == IOV_N - 1 && total)
			len = total - at;
		else if (total && len > total - at)
			len = total - at;
		iov[i] = (struct iovec){.iov_base = buf + at, .iov_len = len};
		at += len;
	}
	return at;
}

/* readv or writev of every iovec, short transfers resumed where they stopped. */
static void iov_all(int fd, struct iovec *iov, int out)
{
	int first = 0;

	while (first < IOV_N) {
		ssize_t r = out ? writev(fd, iov + first, IOV_N - first)
				: readv(fd, iov + first, IOV_N - first);
		if (r == -1 && errno == EINTR)
			continue;
		CHECK(r > 0);
		while (first < IOV_N && (size_t)r >= iov[first].iov_len) {
			r -= (ssize_t)iov[first].iov_len;
			first++;
		}
		if (first < IOV_N) {
			iov[first].iov_base = (char *)iov[first].iov_base + r;
			iov[first].iov_len -= (size_t)r;
		}
	}
}

static void iov_run(struct fc *c, unsigned sends_odd)
{
	static unsigned char buf[IOV_N * 302];
	struct iovec iov[IOV_N];
	uint64_t off = 0;

	for (unsigned round = 0; round < 8; round++) {
		size_t total = iov_setup(iov, buf, round, 0);
		CHECK(total > IOV_N * 100);
		if ((round & 1) == sends_odd) {
			calls_pat_fill(buf, off, total, SEED);
			iov_all(c->fd, iov, 1);
		} else {
			memset(buf, 0, total);
			CHECK_EQ(iov_setup(iov, buf, round + 5, total), total);
			iov_all(c->fd, iov, 0);
			CHECK_PAT(buf, off, total, SEED);
		}
		off += total;
	}
}

static void iov_cli(struct fc *c) { iov_run(c, 0); }
static void iov_srv(struct fc *c) { iov_run(c, 1); }

/* 20,000 sendmsg calls of one byte each; the peer reads them with recvmsg into 3 iovecs. */
static void sendmsg1_cli(struct fc *c)
{
	for (uint64_t i = 0; i < 20000; i++) {
		unsigned char b = calls_pat(i, SEED);
		struct iovec iov = {.iov_base = &b, .iov_len = 1};
		struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
		CHECK_EQ(sendmsg(c->fd, &m, MSG_NOSIGNAL), 1);
	}
	ctl_await(c, 'k');
}

static void sendmsg1_srv(struct fc *c)
{
	unsigned char a[100], b[1], d[900];
	unsigned char flat[1001];
	uint64_t off = 0;

	while (off < 20000) {
		struct iovec iov[3] = {{a, sizeof(a)}, {b, sizeof(b)}, {d, sizeof(d)}};
		struct msghdr m = {.msg_iov = iov, .msg_iovlen = 3};
		CHECK(calls_wait_for(c->fd, POLLIN, WAIT_MS) & POLLIN);
		ssize_t r = recvmsg(c->fd, &m, 0);
		CHECK(r > 0);
		CHECK_EQ(m.msg_flags & MSG_TRUNC, 0);
		memcpy(flat, a, sizeof(a));
		memcpy(flat + 100, b, 1);
		memcpy(flat + 101, d, sizeof(d));
		CHECK_PAT(flat, off, (size_t)r, SEED);
		off += (uint64_t)r;
	}
	CHECK_EQ(off, 20000);
	ctl_post(c, 'k');
}

/* One blocking send() of 4 MiB (16 connection windows) returns 4 MiB; the peer reads it with
 * reads of 1 to 4,000 bytes, exact. */
static void big_send_cli(struct fc *c)
{
	size_t n = 4 << 20;
	unsigned char *buf = malloc(n);

	CHECK(buf != NULL);
	calls_pat_fill(buf, 0, n, SEED);
	CHECK_EQ(send(c->fd, buf, n, MSG_NOSIGNAL), (long long)n);
	free(buf);
	ctl_await(c, 'k');
}

static void big_send_srv(struct fc *c)
{
	unsigned char buf[4000];
	uint64_t off = 0, n = 4 << 20;

	while (off < n) {
		size_t want = 1 + (size_t)(off * 7919 % sizeof(buf));
		if (want > n - off)
			want = (size_t)(n - off);
		ssize_t r = read(c->fd, buf, want);
		if (r == -1 && errno == EINTR)
			continue;
		CHECK(r > 0);
		CHECK_PAT(buf, off, (size_t)r, SEED);
		off += (uint64_t)r;
	}
	ctl_post(c, 'k');
}

/* FIONREAD once the peer's sends of a round have all arrived equals what one read returns
 * (and what a peek sees), for rounds from 1 byte to 100,000 (several fabric messages). */
static const size_t fionread_sizes[] = {1, 100, 4000, 20000, 100000};

static void fionread_cli(struct fc *c)
{
	static unsigned char buf[200000];
	uint64_t off = 0;

	CHECK_EQ(calls_fionread(c->fd), 0);
	for (size_t i = 0; i < sizeof(fionread_sizes) / sizeof(fionread_sizes[0]); i++) {
		size_t n = fionread_sizes[i];
		ctl_post(c, 'a');
		ctl_await(c, 's');
		CHECK_EQ(calls_wait_fionread(c->fd, (int)n, WAIT_MS), (long long)n);
		CHECK_EQ(recv(c->fd, buf, sizeof(buf), MSG_PEEK), (long long)n);
		CHECK_EQ(calls_fionread(c->fd), (long long)n);
		CHECK_EQ(read(c->fd, buf, sizeof(buf)), (long long)n);
		CHECK_PAT(buf, off, n, SEED);
		CHECK_EQ(calls_fionread(c->fd), 0);
		off += n;
	}
}

static void fionread_srv(struct fc *c)
{
	uint64_t off = 0;

	for (size_t i = 0; i < sizeof(fionread_sizes) / sizeof(fionread_sizes[0]); i++) {
		size_t n = fionread_sizes[i];
		ctl_await(c, 'a');
		calls_send_pat(c->fd, off, n, SEED);
		ctl_post(c, 's');
		off += n;
	}
}

/*
 * SO_RCVLOWAT 10 on the fabric: with 5 bytes there (FIONREAD says so) poll and epoll
 * report nothing readable for 200 ms and a non-blocking recv returns the 5; with 5 more
 * sent, then a blocking recv(100) started with 5 there returns once 10 or more came, never
 * the 5 alone (the peer sends its second 5 only when the receiver is about to block).
 */
static void rcvlowat_cli(struct fc *c)
{
	ctl_await(c, 'a');
	calls_write_all(c->fd, "abcde", 5);
	ctl_await(c, 'b');
	calls_write_all(c->fd, "fghij", 5);
	ctl_await(c, 'c');
	calls_write_all(c->fd, "klmno", 5);
	ctl_await(c, 'd');
	calls_sleep_ms(100);
	calls_write_all(c->fd, "pqrstuvwxy", 10);
	ctl_await(c, 'k');
}

static void rcvlowat_srv(struct fc *c)
{
	int v = 10, ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN}, out;
	char buf[100];

	CHECK(ep >= 0);
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) == 0);
	CHECK(setsockopt(c->fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)) == 0);
	ctl_post(c, 'a');
	CHECK_EQ(calls_wait_fionread(c->fd, 5, WAIT_MS), 5);
	CHECK_EQ(calls_wait_for(c->fd, POLLIN, 200), 0);
	CHECK_EQ(epoll_wait(ep, &out, 1, 0), 0);
	ctl_post(c, 'b');
	CHECK_EQ(calls_wait_for(c->fd, POLLIN, WAIT_MS), POLLIN);
	CHECK_EQ(epoll_wait(ep, &out, 1, 0), 1);
	CHECK_EQ(recv(c->fd, buf, sizeof(buf), 0), 10);
	CHECK_EQ(memcmp(buf, "abcdefghij", 10), 0);
	ctl_post(c, 'c');
	CHECK_EQ(calls_wait_fionread(c->fd, 5, WAIT_MS), 5);
	ctl_post(c, 'd');
	ssize_t r = recv(c->fd, buf, sizeof(buf), 0);
	CHECK(r >= 10);
	if (r < 15)
		calls_read_exact(c->fd, buf + r, (size_t)(15 - r));
	CHECK_EQ(memcmp(buf, "klmnopqrstuvwxy", 15), 0);
	v = 1;
	CHECK(setsockopt(c->fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)) == 0);
	close(ep);
	ctl_post(c, 'k');
}

/*
 * SHUT_RD on the fabric, as on Linux: what was queued and what the peer sends after it are
 * still read; then a read that finds nothing returns 0 at once (a wait would meet the
 * watchdog), and poll says POLLIN|POLLRDHUP.
 */
static void shut_rd_cli(struct fc *c)
{
	calls_write_all(c->fd, "before", 6);
	ctl_await(c, 'r');
	calls_write_all(c->fd, "after", 5);
	ctl_post(c, 's');
	ctl_await(c, 'k');
}

static void shut_rd_srv(struct fc *c)
{
	char buf[16];
	size_t have = 0;

	CHECK_EQ(calls_wait_fionread(c->fd, 6, WAIT_MS), 6);
	CHECK(shutdown(c->fd, SHUT_RD) == 0);
	ctl_post(c, 'r');
	ctl_await(c, 's');
	/* The later bytes may still be on their way: a read that finds none returns 0. */
	for (long long t0 = calls_now_ms(); have < 11 && calls_now_ms() - t0 < WAIT_MS;) {
		ssize_t n = recv(c->fd, buf + have, sizeof(buf) - have, 0);
		CHECK(n >= 0);
		if (n == 0)
			calls_sleep_ms(1);
		have += (size_t)n;
	}
	CHECK_EQ(have, 11);
	CHECK_EQ(memcmp(buf, "beforeafter", 11), 0);
	short ev = calls_wait_for(c->fd, POLLIN | POLLRDHUP, 0);
	CHECK(ev & POLLIN);
	CHECK(ev & POLLRDHUP);
	CHECK_EQ(recv(c->fd, buf, sizeof(buf), 0), 0);
	ctl_post(c, 'k');
}

/*
 * Four threads send records of 3,000 bytes (writer id, sequence, then bytes derived from
 * both) on the one connection with blocking sends; the peer reads them in uneven pieces
 * (1 to 4,000 bytes) with pauses, so the window fills and a sender seldom finds room for
 * a whole number of records.
 * Each record arrives whole, in its writer's order, none lost: a blocking send does not
 * put part of a message this small out and leave the rest to wait behind another
 * thread's (fabric/io.c, send_fits).
 */
#define REC 3000
#define NREC 1000u
#define WRITERS 4

static void put_rec(unsigned char *b, uint32_t who, uint32_t seq)
{
	memcpy(b, &who, 4);
	memcpy(b + 4, &seq, 4);
	for (size_t i = 8; i < REC; i++)
		b[i] = (unsigned char)(who * 131u + seq * 7u + i);
}

struct rec_writer {
	int fd;
	uint32_t who;
};

static void *rec_write(void *arg)
{
	const struct rec_writer *w = arg;
	unsigned char b[REC];

	for (uint32_t i = 0; i < NREC; i++) {
		put_rec(b, w->who, i);
		CHECK_EQ(send(w->fd, b, REC, MSG_NOSIGNAL), REC);
	}
	return NULL;
}

static void threads_records_cli(struct fc *c)
{
	struct rec_writer w[WRITERS];
	pthread_t t[WRITERS];

	for (int i = 0; i < WRITERS; i++) {
		w[i] = (struct rec_writer){c->fd, (uint32_t)i + 1};
		CHECK(pthread_create(&t[i], NULL, rec_write, &w[i]) == 0);
	}
	for (int i = 0; i < WRITERS; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	ctl_await(c, 'k');
}

static void threads_records_srv(struct fc *c)
{
	uint32_t next[WRITERS + 1] = {0}, step = 0, all = 0;
	static unsigned char b[REC * 3], want[REC];
	size_t have = 0;

	while (all < WRITERS * NREC) {
		/* Now and then the reader pauses: the window fills, and reopens by odd amounts. */
		if (step % 64 == 0)
			usleep(2000);
		size_t ask = 1 + (step++ * 7919u) % 4000;
		if (ask > sizeof(b) - have)
			ask = sizeof(b) - have;
		ssize_t r = read(c->fd, b + have, ask);
		if (r == -1 && errno == EINTR)
			continue;
		CHECK(r > 0);
		have += (size_t)r;
		size_t off = 0;
		for (; have - off >= REC; off += REC) {
			uint32_t who, seq;
			memcpy(&who, b + off, 4);
			memcpy(&seq, b + off + 4, 4);
			CHECK(who >= 1 && who <= WRITERS);
			CHECK_EQ(seq, next[who]);
			put_rec(want, who, seq);
			CHECK_EQ(memcmp(b + off, want, REC), 0);
			next[who]++;
			all++;
		}
		memmove(b, b + off, have - off);
		have -= off;
	}
	CHECK_EQ(have, 0);
	ctl_post(c, 'k');
}

/* ---- main ---------------------------------------------------------------------------------- */

struct fc_case {
	const char *name;
	void (*server)(struct fc *);
	void (*client)(struct fc *);
};

#define CASE(n) {#n, n##_srv, n##_cli}
static const struct fc_case cases[] = {
    CASE(poll_later),	  CASE(poll_full),	 CASE(poll_eof_shut),	CASE(poll_eof_close),
    CASE(select_later),	  CASE(select_full),	 CASE(select_eof_shut), CASE(select_eof_close),
    CASE(epoll_later),	  CASE(epoll_full),	 CASE(epoll_eof_shut),	CASE(epoll_eof_close),
    CASE(poll_hup),	  CASE(epoll_hup),
    CASE(epoll_et_read),  CASE(epoll_et_write),	 CASE(epoll_oneshot),
    CASE(read_later),	  CASE(peek),		 CASE(waitall),		CASE(iov),
    CASE(sendmsg1),	  CASE(big_send),	 CASE(fionread),	CASE(threads_records), CASE(rcvlowat),
    CASE(shut_rd),
    {NULL, NULL, NULL},
};

static int listen_on(const char *addr, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);

	CHECK(fd >= 0);
	CHECK(inet_pton(AF_INET, addr, &a.sin_addr) == 1);
	CHECK(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0);
	CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
	CHECK(listen(fd, 4) == 0);
	return fd;
}

static int connect_to(const char *addr, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	CHECK(fd >= 0);
	CHECK(inet_pton(AF_INET, addr, &a.sin_addr) == 1);
	CHECK(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
	return fd;
}

static void usage(void)
{
	dprintf(2, "usage: fabric_calls CASE|list --role server|client --addr A --port P "
		   "--ctl-port Q [--go-stdin 1]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *role = NULL, *addr = NULL;
	int port = 0, ctl_port = 0;
	const struct fc_case *k;
	struct fc c = {.fd = -1, .ctl = -1};
	int go_stdin = 0;

	if (argc < 2)
		usage();
	if (!strcmp(argv[1], "list")) {
		for (k = cases; k->name; k++)
			dprintf(1, "%s\n", k->name);
		return 0;
	}
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--role"))
			role = argv[i + 1];
		else if (!strcmp(argv[i], "--addr"))
			addr = argv[i + 1];
		else if (!strcmp(argv[i], "--port"))
			port = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--ctl-port"))
			ctl_port = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--go-stdin"))
			go_stdin = atoi(argv[i + 1]);
		else
			usage();
	}
	if (!role || !addr || port <= 0 || ctl_port <= 0)
		usage();
	for (k = cases; k->name && strcmp(k->name, argv[1]); k++)
		;
	if (!k->name)
		usage();
	calls_case_name = k->name;
	c.server = !strcmp(role, "server");
	calls_watchdog();
	signal(SIGPIPE, SIG_IGN);
	if (c.server) {
		int ld = listen_on(addr, port), lc = listen_on(addr, ctl_port);
		dprintf(1, "READY port=%d\n", port);
		c.ctl = calls_accept(lc);
		c.fd = calls_accept(ld);
		close(lc);
		close(ld);
	} else {
		c.ctl = connect_to(addr, ctl_port);
		c.fd = connect_to(addr, port);
	}
	calls_greet(c.ctl);
	calls_greet(c.fd);
	/* The handshake ends in the library's progress, which a poll() on the connection runs. */
	if (go_stdin) {
		struct pollfd p[2] = {{.fd = c.fd, .events = 0}, {.fd = 0, .events = POLLIN}};
		char line[16];
		dprintf(1, "GREETED\n");
		do /* bounded by the watchdog */
			CHECK(poll(p, 2, 100) >= 0);
		while (!(p[1].revents & (POLLIN | POLLHUP)));
		CHECK(read(0, line, sizeof(line)) > 0);
	} else {
		struct pollfd settle = {.fd = c.fd, .events = 0};
		CHECK(poll(&settle, 1, 300) >= 0);
	}
	calls_greet(c.fd);
	(c.server ? k->server : k->client)(&c);
	/* Both halves done before either closes what is left: the client says so first, so
	 * that nothing comes on the control connection while a client half watches it. */
	if (c.server) {
		ctl_await(&c, 'z');
		ctl_post(&c, 'z');
	} else {
		ctl_post(&c, 'z');
		ctl_await(&c, 'z');
	}
	if (c.fd >= 0)
		close(c.fd);
	close(c.ctl);
	dprintf(1, "calls: PASS %s\n", k->name);
	return 0;
}
