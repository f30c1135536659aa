/*
 * Shared scaffolding for the calls_* helper programs.
 *
 * Each helper is a plain program (never linked against ulsock) made of named cases. A case
 * usually forks itself into a server (the parent, which accepts) and a client (the child,
 * which connects) over loopback, so that under `ulsock run` both ends of the connection are
 * ulsock processes. A case exits 0 only if every check passed; the first failing check
 * prints the expression, the values and errno, and exits 1. Exit 77 means skip.
 *
 * For every listener whose connections must take the fast path the helper prints
 *     calls: expect shm ADDR:PORT
 * for connections whose peer is a plain process
 *     calls: expect kernel ADDR:PORT
 * and for fast-path connections that a hand-off (SCM_RIGHTS) moves back to kernel TCP
 *     calls: expect moved ADDR:PORT
 * so that the pytest side can look for the matching `path=` lines in the ulsock log.
 *
 * Everything here is `static inline` so that a helper which does not use a function does not
 * trip -Werror=unused-function.
 */
#ifndef CALLS_COMMON_H
#define CALLS_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* No helper may run longer than this, whatever the library under test does. */
#define CALLS_WATCHDOG_S 30

static const char *calls_case_name = "?";

/* ---- checks ---------------------------------------------------------------------------- */

static inline __attribute__((noreturn)) void calls_die(void)
{
	_exit(1);
}

static inline __attribute__((noreturn)) void calls_fail(const char *file, int line,
							 const char *what, int err)
{
	dprintf(2, "calls[%d] %s: FAIL %s:%d: CHECK(%s) (errno %d: %s)\n", (int)getpid(),
		calls_case_name, file, line, what, err, strerror(err));
	calls_die();
}

static inline __attribute__((noreturn)) void
calls_fail_eq(const char *file, int line, const char *a, const char *b, long long va,
	      long long vb, int err)
{
	dprintf(2, "calls[%d] %s: FAIL %s:%d: CHECK_EQ(%s, %s): %lld != %lld (errno %d: %s)\n",
		(int)getpid(), calls_case_name, file, line, a, b, va, vb, err, strerror(err));
	calls_die();
}

static inline __attribute__((noreturn)) void calls_fail_err(const char *file, int line,
							     const char *expr, const char *want,
							     long long got, int err)
{
	dprintf(2, "calls[%d] %s: FAIL %s:%d: CHECK_ERR(%s, %s): returned %lld, errno %d (%s)\n",
		(int)getpid(), calls_case_name, file, line, expr, want, got, err, strerror(err));
	calls_die();
}

#define CHECK(cond)                                                                            \
	do {                                                                                   \
		if (!(cond))                                                                   \
			calls_fail(__FILE__, __LINE__, #cond, errno);                          \
	} while (0)

#define CHECK_EQ(a, b)                                                                         \
	do {                                                                                   \
		long long chk_a_ = (long long)(a);                                             \
		long long chk_b_ = (long long)(b);                                             \
		if (chk_a_ != chk_b_)                                                          \
			calls_fail_eq(__FILE__, __LINE__, #a, #b, chk_a_, chk_b_, errno);      \
	} while (0)

/* The call must fail with -1 and exactly this errno. */
#define CHECK_ERR(expr, want)                                                                  \
	do {                                                                                   \
		errno = 0;                                                                     \
		long long chk_r_ = (long long)(expr);                                          \
		int chk_e_ = errno;                                                            \
		if (chk_r_ != -1 || chk_e_ != (want))                                          \
			calls_fail_err(__FILE__, __LINE__, #expr, #want, chk_r_, chk_e_);      \
	} while (0)

static inline void calls_note(const char *msg)
{
	dprintf(1, "calls: note %s: %s\n", calls_case_name, msg);
}

static inline __attribute__((noreturn)) void calls_skip(const char *why)
{
	dprintf(1, "calls: skip %s: %s\n", calls_case_name, why);
	_exit(77);
}

/* ---- time ------------------------------------------------------------------------------ */

static inline long long calls_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void calls_sleep_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

/* ---- watchdog and signals ---------------------------------------------------------------- */

static inline void calls_watchdog_fire(int sig)
{
	static const char msg[] = "calls: FAIL watchdog expired (helper hung)\n";
	ssize_t r = write(2, msg, sizeof(msg) - 1);

	(void)r;
	(void)sig;
	_exit(3);
}

/* Called in main and in every forked child: alarms do not survive fork. */
static inline void calls_watchdog(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = calls_watchdog_fire;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	alarm(CALLS_WATCHDOG_S);
}

static volatile sig_atomic_t calls_sig_count;

static inline void calls_count_signal(int sig)
{
	(void)sig;
	calls_sig_count++;
}

/* Install handler for sig with the given sa_flags (0 or SA_RESTART). */
static inline void calls_set_handler(int sig, void (*handler)(int), int flags)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sa.sa_flags = flags;
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(sig, &sa, NULL) == 0);
}

/* Install the counting handler for sig with the given sa_flags (0 or SA_RESTART). */
static inline void calls_on_signal(int sig, int flags)
{
	calls_set_handler(sig, calls_count_signal, flags);
}

static inline void calls_signal_default(int sig, void (*handler)(int))
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(sig, &sa, NULL) == 0);
}

/*
 * A thread that sends `sig` to a target thread: first after first_ms, then every period_ms
 * (if nonzero) until stopped. If post_fd >= 0 it writes one byte there after the first signal,
 * which lets a peer act only once the target has surely been interrupted once.
 */
struct calls_kick {
	pthread_t target;
	pthread_t thread;
	int sig;
	int first_ms;
	int period_ms;
	int post_fd;
	int stop;
};

static inline void *calls_kick_main(void *arg)
{
	struct calls_kick *k = arg;

	calls_sleep_ms(k->first_ms);
	pthread_kill(k->target, k->sig);
	if (k->post_fd >= 0) {
		ssize_t r = write(k->post_fd, "k", 1);
		(void)r;
	}
	while (k->period_ms > 0 && !__atomic_load_n(&k->stop, __ATOMIC_ACQUIRE)) {
		calls_sleep_ms(k->period_ms);
		if (!__atomic_load_n(&k->stop, __ATOMIC_ACQUIRE))
			pthread_kill(k->target, k->sig);
	}
	return NULL;
}

static inline void calls_kick_start(struct calls_kick *k, int sig, int first_ms, int period_ms,
				    int post_fd)
{
	memset(k, 0, sizeof(*k));
	k->target = pthread_self();
	k->sig = sig;
	k->first_ms = first_ms;
	k->period_ms = period_ms;
	k->post_fd = post_fd;
	CHECK(pthread_create(&k->thread, NULL, calls_kick_main, k) == 0);
}

static inline void calls_kick_stop(struct calls_kick *k)
{
	__atomic_store_n(&k->stop, 1, __ATOMIC_RELEASE);
	CHECK(pthread_join(k->thread, NULL) == 0);
}

/* ---- byte patterns ------------------------------------------------------------------------ */

/* Byte number i of stream `seed`: position-dependent so that a lost, duplicated or reordered
 * byte anywhere is detected. */
static inline unsigned char calls_pat(uint64_t i, unsigned seed)
{
	uint32_t x = (uint32_t)(i * 2654435761u) ^ (uint32_t)(i >> 29) ^ (seed * 0x9e3779b9u);

	x ^= x >> 13;
	x *= 0x5bd1e995u;
	x ^= x >> 15;
	return (unsigned char)x;
}

static inline void calls_pat_fill(void *buf, uint64_t off, size_t n, unsigned seed)
{
	unsigned char *b = buf;

	for (size_t i = 0; i < n; i++)
		b[i] = calls_pat(off + i, seed);
}

/* -1 if buf holds bytes [off, off+n) of stream seed, else the index of the first mismatch. */
static inline long long calls_pat_find_bad(const void *buf, uint64_t off, size_t n, unsigned seed)
{
	const unsigned char *b = buf;

	for (size_t i = 0; i < n; i++)
		if (b[i] != calls_pat(off + i, seed))
			return (long long)i;
	return -1;
}

#define CHECK_PAT(buf, off, n, seed) CHECK_EQ(calls_pat_find_bad((buf), (off), (n), (seed)), -1)

/* ---- fd helpers ---------------------------------------------------------------------------- */

static inline void calls_set_nonblock(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);

	CHECK(fl >= 0);
	fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
	CHECK(fcntl(fd, F_SETFL, fl) == 0);
}

/* Writes all n bytes, tolerating short writes; fails on error. */
static inline void calls_write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n > 0) {
		ssize_t r = write(fd, p, n);
		if (r == -1 && errno == EINTR)
			continue;
		CHECK(r > 0);
		p += r;
		n -= (size_t)r;
	}
}

/* Reads exactly n bytes; an early EOF is a failure. */
static inline void calls_read_exact(int fd, void *buf, size_t n)
{
	char *p = buf;

	while (n > 0) {
		ssize_t r = read(fd, p, n);
		if (r == -1 && errno == EINTR)
			continue;
		if (r == 0)
			calls_fail(__FILE__, __LINE__, "unexpected EOF in calls_read_exact", 0);
		CHECK(r > 0);
		p += r;
		n -= (size_t)r;
	}
}

static inline void calls_expect_eof(int fd)
{
	char c;

	CHECK_EQ(read(fd, &c, 1), 0);
}

/* Sends bytes [off, off+n) of pattern stream `seed`. */
static inline void calls_send_pat(int fd, uint64_t off, size_t n, unsigned seed)
{
	static __thread unsigned char buf[65536];

	while (n > 0) {
		size_t k = n < sizeof(buf) ? n : sizeof(buf);
		calls_pat_fill(buf, off, k, seed);
		calls_write_all(fd, buf, k);
		off += k;
		n -= k;
	}
}

/* Receives and verifies bytes [off, off+n) of pattern stream `seed`. */
static inline void calls_recv_pat(int fd, uint64_t off, size_t n, unsigned seed)
{
	static __thread unsigned char buf[65536];

	while (n > 0) {
		size_t k = n < sizeof(buf) ? n : sizeof(buf);
		calls_read_exact(fd, buf, k);
		CHECK_PAT(buf, off, k, seed);
		off += k;
		n -= k;
	}
}

/*
 * Sends pattern bytes with MSG_DONTWAIT until the socket refuses (EAGAIN): the send buffer
 * and the peer's receive side are then full. Returns how many bytes were accepted.
 */
static inline size_t calls_fill(int fd, uint64_t off, unsigned seed)
{
	static __thread unsigned char buf[65536];
	size_t total = 0;
	int idle = 0;

	/* Keep going until refusals persist for a while: the kernel frees room as loopback
	 * segments are acknowledged, later than usual on a loaded machine. */
	while (idle < 8) {
		calls_pat_fill(buf, off + total, sizeof(buf), seed);
		ssize_t r = send(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r == -1) {
			CHECK(errno == EAGAIN || errno == EWOULDBLOCK);
			idle++;
			calls_sleep_ms(20);
			continue;
		}
		CHECK(r > 0);
		idle = 0;
		total += (size_t)r;
		CHECK(total < (size_t)1 << 30);
	}
	return total;
}

/*
 * Makes sure the socket refuses a further byte (flags, e.g. MSG_DONTWAIT, or 0 on an
 * O_NONBLOCK socket) with EAGAIN. A byte that is still accepted (room freed late) is
 * accounted in *off, and the socket is filled again. Stream bytes are pattern `seed`.
 */
static inline void calls_expect_full(int fd, uint64_t *off, unsigned seed, int flags)
{
	for (int i = 0; i < 50; i++) {
		unsigned char b = calls_pat(*off, seed);
		ssize_t r = send(fd, &b, 1, flags | MSG_NOSIGNAL);
		if (r == -1) {
			CHECK_EQ(errno, EAGAIN);
			return;
		}
		CHECK_EQ(r, 1);
		*off += 1;
		*off += calls_fill(fd, *off, seed);
	}
	calls_fail(__FILE__, __LINE__, "the socket never stayed full", 0);
}

/* Waits until poll reports one of `events` on fd within ms milliseconds; returns revents. */
static inline short calls_wait_for(int fd, short events, int ms)
{
	struct pollfd p = {.fd = fd, .events = events};
	int r;

	do {
		r = poll(&p, 1, ms);
	} while (r == -1 && errno == EINTR);
	CHECK(r >= 0);
	return r == 0 ? 0 : p.revents;
}

/* select on fd for reading within ms milliseconds: 1 when it reports fd readable, else 0. */
static inline int calls_select_readable(int fd, int ms)
{
	fd_set rd;
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	int r;

	CHECK(fd < FD_SETSIZE);
	FD_ZERO(&rd);
	FD_SET(fd, &rd);
	r = select(fd + 1, &rd, NULL, NULL, &tv);
	CHECK(r >= 0);
	CHECK_EQ(r, FD_ISSET(fd, &rd) ? 1 : 0);
	return r;
}

static inline int calls_fionread(int fd)
{
	int n = -1;

	CHECK(ioctl(fd, FIONREAD, &n) == 0);
	return n;
}

/*
 * Makes sure a full socket stays unwritable (no POLLOUT) for a whole ms window; if room
 * appears (freed late), fills again (accounting in *off) and retries.
 */
static inline void calls_expect_unwritable(int fd, uint64_t *off, unsigned seed, int ms)
{
	for (int i = 0; i < 20; i++) {
		long long t0 = calls_now_ms();
		if (!(calls_wait_for(fd, POLLOUT, ms) & POLLOUT)) {
			CHECK(calls_now_ms() - t0 >= ms - 10);
			return;
		}
		*off += calls_fill(fd, *off, seed);
	}
	calls_fail(__FILE__, __LINE__, "the socket never stayed unwritable", 0);
}

/* Polls FIONREAD until it equals want (or ms passes); returns the last value read. */
static inline int calls_wait_fionread(int fd, int want, int ms)
{
	long long end = calls_now_ms() + ms;
	int n;

	for (;;) {
		n = calls_fionread(fd);
		if (n == want || n > want || calls_now_ms() > end)
			return n;
		calls_sleep_ms(2);
	}
}

/* ---- addresses, listeners, connections ------------------------------------------------------- */

struct calls_addr {
	struct sockaddr_storage ss;
	socklen_t len;
};

static inline void calls_loopback(int family, struct calls_addr *a, int port)
{
	memset(a, 0, sizeof(*a));
	if (family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&a->ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_addr = in6addr_loopback;
		s6->sin6_port = htons((uint16_t)port);
		a->len = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&a->ss;
		s4->sin_family = AF_INET;
		s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		s4->sin_port = htons((uint16_t)port);
		a->len = sizeof(*s4);
	}
}

static inline int calls_addr_port(const struct calls_addr *a)
{
	if (a->ss.ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)&a->ss)->sin6_port);
	return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port);
}

/* Formats like the ulsock log does: 127.0.0.1:80 or [::1]:80. */
static inline void calls_addr_str(const struct calls_addr *a, char *out, size_t outlen)
{
	char host[INET6_ADDRSTRLEN];

	if (a->ss.ss_family == AF_INET6) {
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)&a->ss)->sin6_addr, host,
			  sizeof(host));
		snprintf(out, outlen, "[%s]:%d", host, calls_addr_port(a));
	} else {
		inet_ntop(AF_INET, &((const struct sockaddr_in *)&a->ss)->sin_addr, host,
			  sizeof(host));
		snprintf(out, outlen, "%s:%d", host, calls_addr_port(a));
	}
}

/* Skips the case when ::1 cannot be bound (no IPv6 in this sandbox). */
static inline void calls_require_family(int family)
{
	struct calls_addr a;
	int fd;

	if (family != AF_INET6)
		return;
	fd = socket(AF_INET6, SOCK_STREAM, 0);
	if (fd < 0)
		calls_skip("no AF_INET6 sockets");
	calls_loopback(AF_INET6, &a, 0);
	if (bind(fd, (struct sockaddr *)&a.ss, a.len) != 0)
		calls_skip("cannot bind ::1");
	close(fd);
}

/*
 * A loopback TCP listener on an ephemeral port. `expect` is "shm", "kernel" or NULL: what the
 * connections accepted here must show in the ulsock log.
 */
static inline int calls_listen(int family, struct calls_addr *bound, const char *expect)
{
	struct calls_addr a;
	char str[80];
	int one = 1;
	int fd = socket(family, SOCK_STREAM, 0);

	CHECK(fd >= 0);
	CHECK(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0);
	calls_loopback(family, &a, 0);
	CHECK(bind(fd, (struct sockaddr *)&a.ss, a.len) == 0);
	CHECK(listen(fd, 64) == 0);
	bound->len = sizeof(bound->ss);
	CHECK(getsockname(fd, (struct sockaddr *)&bound->ss, &bound->len) == 0);
	if (expect) {
		calls_addr_str(bound, str, sizeof(str));
		dprintf(1, "calls: expect %s %s\n", expect, str);
	}
	return fd;
}

static inline int calls_connect(const struct calls_addr *to)
{
	int fd = socket(to->ss.ss_family, SOCK_STREAM, 0);

	CHECK(fd >= 0);
	CHECK(connect(fd, (const struct sockaddr *)&to->ss, to->len) == 0);
	return fd;
}

static inline int calls_accept(int lfd)
{
	int fd;

	do {
		fd = accept(lfd, NULL, NULL);
	} while (fd == -1 && errno == EINTR);
	CHECK(fd >= 0);
	return fd;
}

/* ---- the forked pair ------------------------------------------------------------------------- */

/*
 * One TCP connection between this process (server side, after accept) and a forked child
 * (client side, after connect), plus two pipes for out-of-band synchronisation.
 */
struct calls_pair {
	int fd;	     /* this side's end of the connection */
	pid_t child; /* in the parent the child's pid; 0 in the child */
	int sync_rd; /* reads what the other side posted */
	int sync_wr; /* posts to the other side */
	struct calls_addr server;
};

static inline void calls_child_setup(void)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	calls_watchdog();
}

/*
 * One byte each way, so the connection is established and in use on both sides before the
 * case starts: the case then tests calls on a settled connection, not ulsock's negotiation
 * racing with a peer that closes at once.
 */
static inline void calls_greet(int fd)
{
	char c = 0;

	calls_write_all(fd, "G", 1);
	calls_read_exact(fd, &c, 1);
	CHECK_EQ(c, 'G');
}

/*
 * Forks the pair's client with the sync pipes in place; the child closes the listener
 * `lfd`. Returns in both processes; pair->child tells which one this is. The caller
 * connects (child) and accepts (parent).
 */
static inline void calls_pair_fork(struct calls_pair *p, int lfd)
{
	int to_child[2], to_parent[2];

	CHECK(pipe2(to_child, O_CLOEXEC) == 0);
	CHECK(pipe2(to_parent, O_CLOEXEC) == 0);
	p->child = fork();
	CHECK(p->child >= 0);
	if (p->child == 0) {
		calls_child_setup();
		close(lfd);
		close(to_child[1]);
		close(to_parent[0]);
		p->sync_rd = to_child[0];
		p->sync_wr = to_parent[1];
		return;
	}
	close(to_child[0]);
	close(to_parent[1]);
	p->sync_rd = to_parent[0];
	p->sync_wr = to_child[1];
}

/* Returns in both processes; pair->child tells which one this is. expect: the listener's
 * `calls: expect` kind. */
static inline void calls_pair_open_as(struct calls_pair *p, int family, const char *expect)
{
	int lfd;

	calls_require_family(family);
	lfd = calls_listen(family, &p->server, expect);
	calls_pair_fork(p, lfd);
	if (p->child == 0) {
		p->fd = calls_connect(&p->server);
		calls_greet(p->fd);
		return;
	}
	p->fd = calls_accept(lfd);
	close(lfd);
	calls_greet(p->fd);
}

/* Returns in both processes; the connection must take the fast path. */
static inline void calls_pair_open(struct calls_pair *p, int family)
{
	calls_pair_open_as(p, family, "shm");
}

/* A copy of the environment without LD_PRELOAD (the caller execs; nothing is freed). */
static inline char **calls_env_without_preload(void)
{
	extern char **environ;
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	env = calloc(n + 1, sizeof(*env));
	CHECK(env != NULL);
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
			env[k++] = environ[i];
	env[k] = NULL;
	return env;
}

static inline void calls_post(struct calls_pair *p, char c)
{
	CHECK_EQ(write(p->sync_wr, &c, 1), 1);
}

/* Waits for the other side's next post; fails if it died instead. */
static inline char calls_await(struct calls_pair *p)
{
	char c = 0;
	ssize_t r;

	do {
		r = read(p->sync_rd, &c, 1);
	} while (r == -1 && errno == EINTR);
	if (r == 0)
		calls_fail(__FILE__, __LINE__, "other side of the pair exited early", 0);
	CHECK_EQ(r, 1);
	return c;
}

/* Waits for a child and fails unless it exited 0. */
static inline void calls_wait_child(pid_t pid)
{
	int st = 0;
	pid_t r;

	do {
		r = waitpid(pid, &st, 0);
	} while (r == -1 && errno == EINTR);
	CHECK_EQ(r, pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		dprintf(2, "calls[%d] %s: FAIL child %d ended with %s %d\n", (int)getpid(),
			calls_case_name, (int)pid, WIFEXITED(st) ? "status" : "signal",
			WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
		calls_die();
	}
}

/* Ends the child (exit 0) or, in the parent, reaps it and checks that it passed. */
static inline void calls_pair_close(struct calls_pair *p)
{
	if (p->fd >= 0)
		close(p->fd);
	if (p->child == 0)
		_exit(0);
	close(p->sync_wr);
	calls_wait_child(p->child);
	close(p->sync_rd);
}

/* ---- several connections to one echoing child ---------------------------------------------- */

/* Child side: echoes every connection until its EOF, then shuts that one down too. */
static inline __attribute__((noreturn)) void calls_echo_child(const struct calls_addr *server,
							      int n)
{
	struct pollfd pf[64];
	int open_count = n;
	char buf[4096];

	CHECK(n > 0 && n <= 64);
	for (int i = 0; i < n; i++) {
		char idx = (char)i;
		pf[i] = (struct pollfd){.fd = calls_connect(server), .events = POLLIN};
		calls_write_all(pf[i].fd, &idx, 1);
	}
	while (open_count > 0) {
		int r = poll(pf, (nfds_t)n, -1);
		if (r == -1 && errno == EINTR)
			continue;
		CHECK(r > 0);
		for (int i = 0; i < n; i++) {
			if (pf[i].fd < 0 || !pf[i].revents)
				continue;
			ssize_t k = read(pf[i].fd, buf, sizeof(buf));
			if (k > 0) {
				calls_write_all(pf[i].fd, buf, (size_t)k);
				continue;
			}
			CHECK(k == 0 || errno == ECONNRESET);
			close(pf[i].fd);
			pf[i].fd = -1;
			open_count--;
		}
	}
	_exit(0);
}

/*
 * Opens n connections (n <= 64) from a forked echo child; fds[i] is connection i. Whatever
 * is written on fds[i] comes back on it, which makes fds[i] readable on demand; closing
 * fds[i] (or SHUT_WR) makes the child close its end. Returns the child's pid.
 */
static inline pid_t calls_echo_open(int family, int n, int *fds)
{
	struct calls_addr server;
	int lfd;
	pid_t pid;

	calls_require_family(family);
	lfd = calls_listen(family, &server, "shm");
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		calls_child_setup();
		close(lfd);
		calls_echo_child(&server, n);
	}
	for (int i = 0; i < n; i++)
		fds[i] = -1;
	for (int i = 0; i < n; i++) {
		char idx;
		int fd = calls_accept(lfd);
		calls_read_exact(fd, &idx, 1);
		CHECK(idx >= 0 && idx < n && fds[(int)idx] == -1);
		fds[(int)idx] = fd;
	}
	close(lfd);
	return pid;
}

/* Closes the connections and checks that the echo child ended cleanly. */
static inline void calls_echo_close(pid_t pid, int n, int *fds)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	calls_wait_child(pid);
}

/* ---- main ------------------------------------------------------------------------------------ */

/* A case gets the arguments after its name; most ignore them. */
#define CALLS_ARGS int argc __attribute__((unused)), char **argv __attribute__((unused))

struct calls_case {
	const char *name;
	void (*run)(int argc, char **argv);
};

static inline int calls_main(int argc, char **argv, const struct calls_case *cases)
{
	const struct calls_case *c;

	if (argc < 2) {
		dprintf(2, "usage: %s CASE [ARGS]\ncases:", argv[0]);
		for (c = cases; c->name; c++)
			dprintf(2, " %s", c->name);
		dprintf(2, "\n");
		return 2;
	}
	if (strcmp(argv[1], "list") == 0) {
		for (c = cases; c->name; c++)
			dprintf(1, "%s\n", c->name);
		return 0;
	}
	for (c = cases; c->name; c++) {
		if (strcmp(c->name, argv[1]) != 0)
			continue;
		calls_case_name = c->name;
		calls_watchdog();
		/* Lets the test confirm it ran with (or without) the preload it meant to. */
		dprintf(1, "calls: preload %s\n", getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "-");
		/* An unexpected EPIPE must show up as a failed check, not a silent death. */
		signal(SIGPIPE, SIG_IGN);
		c->run(argc - 2, argv + 2);
		dprintf(1, "calls: PASS %s\n", c->name);
		return 0;
	}
	dprintf(2, "%s: unknown case %s\n", argv[0], argv[1]);
	return 2;
}

#endif /* CALLS_COMMON_H */
