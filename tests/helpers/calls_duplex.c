/*
 * calls_duplex: one socket used by two threads at once, a writer and a reader, each waiting
 * its own way, streaming DUPLEX_MIB MiB through an echo server and checking every byte that
 * comes back. Runtimes give sockets with timeouts exactly this shape: the descriptor is
 * non-blocking and each thread waits in poll (or its own epoll set, or select) before its
 * call, the writer for POLLOUT, the reader for POLLIN. Usage: calls_duplex CASE.
 *
 * The echo server is the accepting process: one thread, blocking read and write. The client
 * is the connecting (forked) process. A wait that sees no progress for DUPLEX_STALL_MS fails
 * the case and reports how many bytes each thread had moved.
 */
#include "calls_common.h"

#include <sys/epoll.h>
#include <sys/select.h>

#define DUPLEX_MIB 64
#define DUPLEX_BYTES ((uint64_t)DUPLEX_MIB << 20)
#define DUPLEX_STALL_MS 5000
/* The whole case, hung or not, ends by then (the transfer takes well under a second plain). */
#define DUPLEX_WATCHDOG_S 15
#define SEED_DUPLEX 81u

enum wait_kind {
	WAIT_POLL,	/* non-blocking socket, poll before each call */
	WAIT_EPOLL,	/* non-blocking socket, each thread its own level-triggered epoll set */
	WAIT_SELECT,	/* non-blocking socket, select before each call */
	WAIT_TIMEO,	/* blocking socket, SO_RCVTIMEO and SO_SNDTIMEO */
	WAIT_BLOCK,	/* blocking socket, no timeouts (the control) */
	WAIT_MIXED,	/* blocking socket: the writer polls and sends with MSG_DONTWAIT */
};

struct duplex {
	int fd;
	enum wait_kind kind;
	uint64_t sent;		/* written by the writer, read by the reporters */
	uint64_t received;	/* written by the reader, read by the reporters */
	long long wait_since[2]; /* when the writer [0] / reader [1] entered its current wait
				  * or call, in calls_now_ms() time */
	unsigned waits[2];	/* waits each thread made */
	unsigned refused[2];	/* calls that moved nothing (EAGAIN after a wait said ready) */
};

/* The client's transfer, for the watchdog's report. */
static struct duplex *duplex_current;

/*
 * The watchdog of the client: a wait that never returned (poll with a timeout that does not
 * end, a blocking call) shows up here with how long each thread has been in its call.
 */
static void duplex_watchdog_fire(int sig)
{
	struct duplex *d = duplex_current;
	long long now = calls_now_ms();
	char msg[256];
	int n;

	(void)sig;
	n = snprintf(msg, sizeof(msg),
		     "calls[%d] %s: FAIL watchdog expired: sent %llu, received %llu of %llu "
		     "bytes; the writer has been in its call for %lld ms, the reader for %lld ms; "
		     "waits %u/%u, refused calls %u/%u (writer/reader)\n",
		     (int)getpid(), calls_case_name,
		     (unsigned long long)__atomic_load_n(&d->sent, __ATOMIC_RELAXED),
		     (unsigned long long)__atomic_load_n(&d->received, __ATOMIC_RELAXED),
		     (unsigned long long)DUPLEX_BYTES,
		     now - __atomic_load_n(&d->wait_since[0], __ATOMIC_RELAXED),
		     now - __atomic_load_n(&d->wait_since[1], __ATOMIC_RELAXED),
		     __atomic_load_n(&d->waits[0], __ATOMIC_RELAXED),
		     __atomic_load_n(&d->waits[1], __ATOMIC_RELAXED),
		     __atomic_load_n(&d->refused[0], __ATOMIC_RELAXED),
		     __atomic_load_n(&d->refused[1], __ATOMIC_RELAXED));
	if (n > 0) {
		ssize_t r = write(2, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
		(void)r;
	}
	_exit(3);
}

static __attribute__((noreturn)) void stalled(struct duplex *d, const char *who, const char *how)
{
	dprintf(2,
		"calls[%d] %s: FAIL the %s stalled (%s, no progress for %d ms): sent %llu, "
		"received %llu of %llu bytes\n",
		(int)getpid(), calls_case_name, who, how, DUPLEX_STALL_MS,
		(unsigned long long)__atomic_load_n(&d->sent, __ATOMIC_RELAXED),
		(unsigned long long)__atomic_load_n(&d->received, __ATOMIC_RELAXED),
		(unsigned long long)DUPLEX_BYTES);
	calls_die();
}

/*
 * Waits until the socket is ready for `events` (POLLIN or POLLOUT) the way this case's kind
 * does it; ep is the thread's own epoll set for WAIT_EPOLL. Kinds that wait inside the call
 * itself return at once.
 */
static void wait_ready(struct duplex *d, int ep, short events, const char *who)
{
	int r;

	__atomic_store_n(&d->wait_since[events == POLLIN], calls_now_ms(), __ATOMIC_RELAXED);
	__atomic_fetch_add(&d->waits[events == POLLIN], 1, __ATOMIC_RELAXED);

	switch (d->kind) {
	case WAIT_POLL:
	case WAIT_MIXED: {
		if (d->kind == WAIT_MIXED && events == POLLIN)
			return;
		struct pollfd pf = {.fd = d->fd, .events = events};
		do {
			r = poll(&pf, 1, DUPLEX_STALL_MS);
		} while (r == -1 && errno == EINTR);
		CHECK(r >= 0);
		if (r == 0)
			stalled(d, who, "poll timed out");
		/* The end of the stream may add POLLHUP; an error never comes. */
		CHECK_EQ(pf.revents & (POLLERR | POLLNVAL), 0);
		return;
	}
	case WAIT_EPOLL: {
		struct epoll_event ev;
		do {
			r = epoll_wait(ep, &ev, 1, DUPLEX_STALL_MS);
		} while (r == -1 && errno == EINTR);
		CHECK(r >= 0);
		if (r == 0)
			stalled(d, who, "epoll_wait timed out");
		CHECK_EQ(ev.events & EPOLLERR, 0);
		return;
	}
	case WAIT_SELECT: {
		fd_set set;
		struct timeval tv = {.tv_sec = DUPLEX_STALL_MS / 1000};
		CHECK(d->fd < FD_SETSIZE);
		FD_ZERO(&set);
		FD_SET(d->fd, &set);
		do {
			r = select(d->fd + 1, events == POLLIN ? &set : NULL,
				   events == POLLOUT ? &set : NULL, NULL, &tv);
		} while (r == -1 && errno == EINTR);
		CHECK(r >= 0);
		if (r == 0)
			stalled(d, who, "select timed out");
		CHECK(FD_ISSET(d->fd, &set));
		return;
	}
	case WAIT_TIMEO:
	case WAIT_BLOCK:
		return;
	}
}

/*
 * After a wait that said ready: the stream must have moved within DUPLEX_STALL_MS. A wait
 * that reports ready only when its timeout runs out (a wake-up that never came, found by a
 * last look) is a stall as much as one that times out.
 */
static void check_progress(struct duplex *d, const char *who, long long idle_since)
{
	char how[64];
	long long now = calls_now_ms();

	if (now - idle_since <= DUPLEX_STALL_MS)
		return;
	snprintf(how, sizeof(how), "a wait said ready after %lld ms",
		 now - __atomic_load_n(&d->wait_since[who[0] == 'r'], __ATOMIC_RELAXED));
	stalled(d, who, how);
}

/* A non-blocking call that found nothing to do, or a timed-out blocking one. */
static void call_refused(struct duplex *d, const char *who, long long *idle_since)
{
	CHECK(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
	__atomic_fetch_add(&d->refused[who[0] == 'r'], 1, __ATOMIC_RELAXED);
	if (d->kind == WAIT_TIMEO)
		stalled(d, who, "the call timed out");
	/* Readiness that never turns into progress is a stall too (a busy one). */
	if (calls_now_ms() - *idle_since > DUPLEX_STALL_MS)
		stalled(d, who, "ready but the call keeps refusing");
}

static int thread_epoll(struct duplex *d, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.u64 = 1};
	int ep;

	if (d->kind != WAIT_EPOLL)
		return -1;
	ep = epoll_create1(EPOLL_CLOEXEC);
	CHECK(ep >= 0);
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, d->fd, &ev) == 0);
	return ep;
}

/* Chunk sizes vary from 1 byte to 64 KiB so that writes split and merge everywhere. */
static size_t chunk_len(uint64_t off, uint64_t left)
{
	size_t n = 1 + (size_t)((off * 2654435761u) >> 7) % 65536;

	return n < left ? n : (size_t)left;
}

static void *writer_main(void *arg)
{
	struct duplex *d = arg;
	static unsigned char buf[65536];
	int ep = thread_epoll(d, EPOLLOUT);
	int flags = MSG_NOSIGNAL | (d->kind == WAIT_MIXED ? MSG_DONTWAIT : 0);
	uint64_t off = 0;
	long long idle_since = calls_now_ms();

	while (off < DUPLEX_BYTES) {
		size_t n = chunk_len(off, DUPLEX_BYTES - off);
		calls_pat_fill(buf, off, n, SEED_DUPLEX);
		wait_ready(d, ep, POLLOUT, "writer");
		check_progress(d, "writer", idle_since);
		ssize_t r = send(d->fd, buf, n, flags);
		if (r == -1) {
			call_refused(d, "writer", &idle_since);
			continue;
		}
		CHECK(r > 0);
		off += (uint64_t)r;
		__atomic_store_n(&d->sent, off, __ATOMIC_RELAXED);
		idle_since = calls_now_ms();
	}
	CHECK(shutdown(d->fd, SHUT_WR) == 0);
	if (ep >= 0)
		close(ep);
	return NULL;
}

static void *reader_main(void *arg)
{
	struct duplex *d = arg;
	static unsigned char buf[65536];
	int ep = thread_epoll(d, EPOLLIN);
	uint64_t off = 0;
	long long idle_since = calls_now_ms();

	for (;;) {
		wait_ready(d, ep, POLLIN, "reader");
		check_progress(d, "reader", idle_since);
		ssize_t r = recv(d->fd, buf, sizeof(buf), 0);
		if (r == 0)
			break;
		if (r == -1) {
			call_refused(d, "reader", &idle_since);
			continue;
		}
		CHECK_PAT(buf, off, (size_t)r, SEED_DUPLEX);
		off += (uint64_t)r;
		__atomic_store_n(&d->received, off, __ATOMIC_RELAXED);
		idle_since = calls_now_ms();
	}
	CHECK_EQ(off, DUPLEX_BYTES);
	if (ep >= 0)
		close(ep);
	return NULL;
}

/* The client: sets the socket up for its kind, runs both threads, checks the totals. */
static void duplex_client(int fd, enum wait_kind kind)
{
	struct duplex d = {.fd = fd, .kind = kind};
	pthread_t w, r;
	char note[160];

	d.wait_since[0] = d.wait_since[1] = calls_now_ms();
	duplex_current = &d;
	calls_set_handler(SIGALRM, duplex_watchdog_fire, 0);
	alarm(DUPLEX_WATCHDOG_S);

	if (kind == WAIT_POLL || kind == WAIT_EPOLL || kind == WAIT_SELECT)
		calls_set_nonblock(fd, 1);
	if (kind == WAIT_TIMEO) {
		struct timeval tv = {.tv_sec = DUPLEX_STALL_MS / 1000};
		CHECK(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0);
		CHECK(setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == 0);
	}
	CHECK(pthread_create(&r, NULL, reader_main, &d) == 0);
	CHECK(pthread_create(&w, NULL, writer_main, &d) == 0);
	CHECK(pthread_join(w, NULL) == 0);
	CHECK(pthread_join(r, NULL) == 0);
	CHECK_EQ(d.sent, DUPLEX_BYTES);
	CHECK_EQ(d.received, DUPLEX_BYTES);
	snprintf(note, sizeof(note), "%llu bytes each way", (unsigned long long)DUPLEX_BYTES);
	calls_note(note);
}

/* The echo server: blocking read and write in one thread until the client's EOF. */
static void echo_server(int fd)
{
	static unsigned char buf[65536];
	uint64_t total = 0;

	for (;;) {
		ssize_t r = read(fd, buf, sizeof(buf));
		if (r == -1 && errno == EINTR)
			continue;
		CHECK(r >= 0);
		if (r == 0)
			break;
		calls_write_all(fd, buf, (size_t)r);
		total += (uint64_t)r;
	}
	CHECK_EQ(total, DUPLEX_BYTES);
}

static void duplex_case(enum wait_kind kind)
{
	struct calls_pair p;

	/* The client's watchdog, which reports how far the threads got, fires first. */
	alarm(DUPLEX_WATCHDOG_S + 5);
	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		duplex_client(p.fd, kind);
		calls_pair_close(&p);
	}
	echo_server(p.fd);
	calls_pair_close(&p);
}

static void case_duplex_poll(CALLS_ARGS)
{
	duplex_case(WAIT_POLL);
}

static void case_duplex_epoll(CALLS_ARGS)
{
	duplex_case(WAIT_EPOLL);
}

static void case_duplex_select(CALLS_ARGS)
{
	duplex_case(WAIT_SELECT);
}

static void case_duplex_timeo(CALLS_ARGS)
{
	duplex_case(WAIT_TIMEO);
}

static void case_duplex_blocking(CALLS_ARGS)
{
	duplex_case(WAIT_BLOCK);
}

static void case_duplex_mixed(CALLS_ARGS)
{
	duplex_case(WAIT_MIXED);
}

static const struct calls_case cases[] = {
	{"duplex_poll", case_duplex_poll},
	{"duplex_epoll", case_duplex_epoll},
	{"duplex_select", case_duplex_select},
	{"duplex_timeo", case_duplex_timeo},
	{"duplex_blocking", case_duplex_blocking},
	{"duplex_mixed", case_duplex_mixed},
	{NULL, NULL},
};

int main(int argc, char **argv)
{
	return calls_main(argc, argv, cases);
}
