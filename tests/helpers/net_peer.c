/*
 * net_peer - one end of a single connection for the peer-death tests.
 *
 *   net_peer --listen [--addr A] [--port P] --act ACT     (prints "READY port=P pid=PID")
 *   net_peer --connect --addr A --port P --act ACT
 *
 * Once connected it prints "CONNECTED ino=N", N the inode of its socket (the client's
 * names the connection's segment in /dev/shm).
 *
 * Victims (the test kills them with SIGKILL):
 *   stall   send --prime bytes, print "STALLED total=N", then never read or write again.
 *   flood   print "FLOODING" and send the stream as fast as the peer takes it, printing
 *           "SENT total=N" after every call.
 * Survivors (they must notice the death, never hang):
 *   recv    read and verify the stream; print "BLOCKING" once --prime bytes arrived, just
 *           before it first waits, and "PROGRESS rx=N" after each MiB.  Passes on EOF or
 *           ECONNRESET.
 *   send    print "SENDING", then send until an error, printing "SENT total=N" after every
 *           call and "FULL" the first time a send finds no room (it then blocks, or waits).
 *           Passes on EPIPE or ECONNRESET.
 *   duplex  both at once: send the stream and read and verify the peer's, printing "SENT
 *           total=N" after every send, until both directions ended.  Passes when reading
 *           ended with EOF or ECONNRESET and sending with EPIPE or ECONNRESET.
 * Any act serves as a victim too (recv and duplex read the peer's stream).
 *
 * --wait block|poll|epoll: blocking calls (default), or a non-blocking socket with poll()
 * or epoll_wait() (level-triggered) before each retry.  --min-io/--max-io: each write and
 * read takes a size drawn log-uniformly from that range (--seed), 64 KiB by default.
 * --sigbus-signal installs, with signal(), a SIGBUS handler that exits 3 (--sigbus-sigset:
 * with System V's sigset()): a segment file truncated under the process must still break
 * only the connection (the guard keeps the program's handler for other faults).
 * A survivor ends with "RESULT op=... outcome=... bytes=N last_call_ms=T t_ms=M": T is how
 * long its final call took to return (waits included), M the CLOCK_MONOTONIC time in ms at
 * which it returned.  duplex's line is "RESULT op=duplex outcome=O first=recv|send rx=N
 * tx=N rx_end=O tx_end=O last_call_ms=T t_ms=M", O and M those of the direction that ended
 * first.  Exit 0 pass, 1 fail, 2 setup error.
 */
#include "net_util.h"

#include <sys/epoll.h>
#include <sys/stat.h>

#define PEER_KEY 7
#define CHUNK 65536
#define MAX_IO_LIMIT (64u << 20)

enum act { ACT_STALL, ACT_FLOOD, ACT_RECV, ACT_SEND, ACT_DUPLEX };
enum wait_mode { WAIT_BLOCK, WAIT_POLL, WAIT_EPOLL };

static const char *addr = "127.0.0.1";
static unsigned port;
static int listening = -1;
static enum act act = ACT_RECV;
static enum wait_mode wait_mode = WAIT_BLOCK;
static uint64_t prime;
static unsigned timeout_s = 120;
static size_t min_io = CHUNK, max_io = CHUNK;
static uint64_t seed = 1;
static int epfd = -1;
static unsigned char *tx_buf, *rx_buf;

/* How one direction ended: its outcome, the value it returned and when (t_ms). */
struct end {
	int done;
	const char *outcome;
	int ok;
	double call_ms, t_ms;
};

static void sigbus_exit(int sig)
{
	(void)sig;
	_exit(3);
}

static void usage(void)
{
	fprintf(stderr, "usage: net_peer --listen|--connect [--addr A] [--port P]\n"
			"  --act stall|flood|recv|send|duplex [--prime N] [--wait block|poll|epoll]\n"
			"  [--min-io N] [--max-io N] [--seed S] [--timeout SEC]\n"
			"  [--sigbus-signal|--sigbus-sigset]\n");
	exit(2);
}

static int pick(const char *const *names, const char *v)
{
	int k = 0;

	while (names[k] && strcmp(names[k], v))
		k++;
	if (!names[k])
		usage();
	return k;
}

static void parse(int argc, char **argv)
{
	static const char *const acts[] = {"stall", "flood", "recv", "send", "duplex", NULL};
	static const char *const waits[] = {"block", "poll", "epoll", NULL};

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--listen") || !strcmp(a, "--connect")) {
			listening = !strcmp(a, "--listen");
			continue;
		}
		if (!strcmp(a, "--sigbus-signal")) {
			if (signal(SIGBUS, sigbus_exit) == SIG_ERR)
				usage();
			continue;
		}
		if (!strcmp(a, "--sigbus-sigset")) {
			/* Deprecated, but programs still call it: the point of the option. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
			if (sigset(SIGBUS, sigbus_exit) == SIG_ERR)
				usage();
#pragma GCC diagnostic pop
			continue;
		}
		if (!v)
			usage();
		i++;
		if (!strcmp(a, "--addr"))
			addr = v;
		else if (!strcmp(a, "--port"))
			port = (unsigned)net_parse_num(a, v);
		else if (!strcmp(a, "--prime"))
			prime = net_parse_num(a, v);
		else if (!strcmp(a, "--timeout"))
			timeout_s = (unsigned)net_parse_num(a, v);
		else if (!strcmp(a, "--min-io"))
			min_io = (size_t)net_parse_num(a, v);
		else if (!strcmp(a, "--max-io"))
			max_io = (size_t)net_parse_num(a, v);
		else if (!strcmp(a, "--seed"))
			seed = net_parse_num(a, v);
		else if (!strcmp(a, "--act"))
			act = (enum act)pick(acts, v);
		else if (!strcmp(a, "--wait"))
			wait_mode = (enum wait_mode)pick(waits, v);
		else
			usage();
	}
	if (listening < 0 || (!listening && port == 0))
		usage();
	if (min_io < 1 || max_io < min_io || max_io > MAX_IO_LIMIT)
		net_die("--min-io and --max-io: 1 <= min <= max <= %u", MAX_IO_LIMIT);
}

static int open_conn(void)
{
	struct net_addr a;
	int fd, one = 1;

	net_addr_parse(addr, port, &a);
	fd = socket(a.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		net_die("socket: %s", strerror(errno));
	if (!listening) {
		if (connect(fd, (struct sockaddr *)&a.ss, a.len) < 0)
			net_die("connect: %s", strerror(errno));
		return fd;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a.ss, a.len) < 0 || listen(fd, 4) < 0)
		net_die("bind/listen: %s", strerror(errno));
	printf("READY port=%u pid=%d\n", net_sock_port(fd), (int)getpid());
	int c = accept(fd, NULL, NULL);
	if (c < 0)
		net_die("accept: %s", strerror(errno));
	close(fd);
	return c;
}

/* The connection in the --wait way: non-blocking for poll and epoll, with the epoll set. */
static void setup_wait(int fd)
{
	struct epoll_event ev = {.events = 0, .data.fd = fd};

	if (wait_mode == WAIT_BLOCK)
		return;
	if (net_set_nonblock(fd, 1) < 0)
		net_die("O_NONBLOCK: %s", strerror(errno));
	if (wait_mode != WAIT_EPOLL)
		return;
	epfd = epoll_create1(EPOLL_CLOEXEC);
	if (epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		net_die("epoll: %s", strerror(errno));
}

/* Waits until FD is ready for EVENTS (POLLIN, POLLOUT) with poll() or epoll_wait(); an
 * error or hang-up counts as ready.  0, or -errno.  The process alarm bounds the wait. */
static int wait_ready(int fd, short events)
{
	struct epoll_event ev = {.events = 0, .data.fd = fd}, out;

	if (wait_mode == WAIT_POLL) {
		int rc = net_poll1(fd, events);

		return rc < 0 ? rc : 0;
	}
	if (events & POLLIN)
		ev.events |= EPOLLIN | EPOLLRDHUP;
	if (events & POLLOUT)
		ev.events |= EPOLLOUT;
	if (epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) < 0)
		return -errno;
	for (;;) {
		int rc = epoll_wait(epfd, &out, 1, 1000);

		if (rc > 0)
			return 0;
		if (rc < 0 && errno != EINTR)
			return -errno;
	}
}

static const char *outcome_name(ssize_t rc, int err)
{
	if (rc == 0)
		return "eof";
	if (err == ECONNRESET)
		return "ECONNRESET";
	if (err == EPIPE)
		return "EPIPE";
	return strerror(err);
}

static void say_once(int *said, const char *what)
{
	if (!*said) {
		printf("%s\n", what);
		*said = 1;
	}
}

/*
 * One send of up to N bytes the --wait way; returns the count or -errno.  With PROBE, a
 * blocking socket first tries without waiting, so that "FULL" is printed before the call
 * that blocks on a full ring; a non-blocking one prints it before its first wait.
 */
static ssize_t peer_send(int fd, const void *p, size_t n, int probe)
{
	static int said_full;

	for (;;) {
		int flags = MSG_NOSIGNAL | (probe && wait_mode == WAIT_BLOCK ? MSG_DONTWAIT : 0);
		ssize_t r = send(fd, p, n, flags);

		if (r >= 0)
			return r;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		if (probe)
			say_once(&said_full, "FULL");
		if (wait_mode == WAIT_BLOCK) {
			do
				r = send(fd, p, n, MSG_NOSIGNAL);
			while (r < 0 && errno == EINTR);
			return r < 0 ? -errno : r;
		}
		int rc = wait_ready(fd, POLLOUT);

		if (rc < 0)
			return rc;
	}
}

/* One receive of up to N bytes the --wait way: the count, 0 at EOF, or -errno.  With MARK,
 * prints "BLOCKING" (once) before the call that may block, or before the first wait. */
static ssize_t peer_recv(int fd, void *p, size_t n, int mark)
{
	static int said_blocking;

	for (;;) {
		if (mark && wait_mode == WAIT_BLOCK)
			say_once(&said_blocking, "BLOCKING");
		ssize_t r = recv(fd, p, n, 0);

		if (r >= 0)
			return r;
		if (errno == EINTR)
			continue;
		if (wait_mode == WAIT_BLOCK || (errno != EAGAIN && errno != EWOULDBLOCK))
			return -errno;
		if (mark)
			say_once(&said_blocking, "BLOCKING");
		int rc = wait_ready(fd, POLLIN);

		if (rc < 0)
			return rc;
	}
}

/* Records the end of a direction: RC (0 or -errno) returned by a call that began at T0. */
static void end_at(struct end *e, ssize_t rc, double t0, int sending)
{
	e->t_ms = net_now_ms();
	e->call_ms = e->t_ms - t0;
	e->outcome = outcome_name(rc, (int)-rc);
	e->ok = sending ? (rc == -EPIPE || rc == -ECONNRESET) : (rc == 0 || rc == -ECONNRESET);
	e->done = 1;
}

/* Sends N bytes of the stream from *OFF, printing SENT lines; 0, or -errno. */
static int send_stream(int fd, uint64_t *off, uint64_t n, struct net_rng *rng)
{
	while (n > 0) {
		size_t len = net_rng_size(rng, min_io, max_io);

		if (len > n)
			len = (size_t)n;
		net_stream_fill(PEER_KEY, *off, tx_buf, len);
		ssize_t w = peer_send(fd, tx_buf, len, 0);

		if (w < 0)
			return (int)w;
		*off += (uint64_t)w;
		n -= (uint64_t)w;
	}
	return 0;
}

/* Victim: sends PRIME bytes and goes quiet until it is killed. */
static int do_stall(int fd)
{
	struct net_rng rng = {seed};
	uint64_t off = 0;

	if (send_stream(fd, &off, prime, &rng) < 0)
		net_die("priming failed");
	printf("STALLED total=%" PRIu64 "\n", off);
	for (;;)
		pause();
}

static int do_flood(int fd)
{
	struct net_rng rng = {seed};
	uint64_t off = 0;

	printf("FLOODING\n");
	for (;;) {
		size_t len = net_rng_size(&rng, min_io, max_io);

		net_stream_fill(PEER_KEY, off, tx_buf, len);
		ssize_t n = peer_send(fd, tx_buf, len, 0);

		if (n <= 0) {
			printf("RESULT op=flood outcome=%s bytes=%" PRIu64 "\n",
			       outcome_name(n, (int)-n), off);
			return 0;
		}
		off += (uint64_t)n;
		printf("SENT total=%" PRIu64 "\n", off);
	}
}

/* Checks N received bytes at offset GOT; prints the corrupt byte and returns 0 if one is. */
static int verify(uint64_t got, size_t n)
{
	unsigned char want;
	size_t bad = net_stream_check(PEER_KEY, got, rx_buf, n, &want);

	if (bad == n)
		return 1;
	printf("RESULT op=recv outcome=corrupt byte %" PRIu64 " is 0x%02x, not 0x%02x\n",
	       got + bad, rx_buf[bad], want);
	return 0;
}

static int do_recv(int fd)
{
	struct net_rng rng = {seed ^ 0x5eed};
	uint64_t got = 0, next_progress = 1 << 20;

	for (;;) {
		double t0 = net_now_ms();
		ssize_t n = peer_recv(fd, rx_buf, net_rng_size(&rng, min_io, max_io), got >= prime);

		if (n <= 0) {
			struct end e;

			end_at(&e, n, t0, 0);
			printf("RESULT op=recv outcome=%s bytes=%" PRIu64
			       " last_call_ms=%.1f t_ms=%.3f\n",
			       e.outcome, got, e.call_ms, e.t_ms);
			return e.ok ? 0 : 1;
		}
		if (!verify(got, (size_t)n))
			return 1;
		got += (uint64_t)n;
		if (got >= next_progress) {
			printf("PROGRESS rx=%" PRIu64 "\n", got);
			next_progress += 1 << 20;
		}
	}
}

static int do_send(int fd)
{
	struct net_rng rng = {seed};
	uint64_t off = 0;

	printf("SENDING\n");
	for (;;) {
		size_t len = net_rng_size(&rng, min_io, max_io);
		double t0 = net_now_ms();

		net_stream_fill(PEER_KEY, off, tx_buf, len);
		ssize_t n = peer_send(fd, tx_buf, len, 1);

		if (n <= 0) {
			struct end e;

			end_at(&e, n, t0, 1);
			printf("RESULT op=send outcome=%s bytes=%" PRIu64
			       " last_call_ms=%.1f t_ms=%.3f\n",
			       n == 0 ? "zero" : e.outcome, off, e.call_ms, e.t_ms);
			return n < 0 && e.ok ? 0 : 1;
		}
		off += (uint64_t)n;
		printf("SENT total=%" PRIu64 "\n", off);
	}
}

/* ---- duplex: both directions until both ended ---- */

struct duplex {
	int fd;
	uint64_t rx, tx;
	int corrupt;
	struct end rx_end, tx_end;
	struct net_rng rx_rng, tx_rng;
	size_t pending; /* bytes of tx_buf filled and not yet sent (non-blocking sockets) */
};

/* One receive (non-blocking sockets: may find nothing, -EAGAIN); records the end. */
static void duplex_recv(struct duplex *d)
{
	double t0 = net_now_ms();
	ssize_t n = wait_mode == WAIT_BLOCK ? peer_recv(d->fd, rx_buf,
							net_rng_size(&d->rx_rng, min_io, max_io), 0)
					    : recv(d->fd, rx_buf, net_rng_size(&d->rx_rng, min_io, max_io), 0);

	if (n < 0 && wait_mode != WAIT_BLOCK)
		n = -errno;
	if (n > 0) {
		if (!verify(d->rx, (size_t)n)) {
			d->corrupt = 1;
			end_at(&d->rx_end, -EIO, t0, 0);
			d->rx_end.outcome = "corrupt";
			d->rx_end.ok = 0;
			return;
		}
		d->rx += (uint64_t)n;
	} else if (n != -EAGAIN && n != -EWOULDBLOCK && n != -EINTR) {
		end_at(&d->rx_end, n, t0, 0);
	}
}

static void duplex_send(struct duplex *d)
{
	double t0 = net_now_ms();
	ssize_t n;

	if (d->pending == 0) {
		d->pending = net_rng_size(&d->tx_rng, min_io, max_io);
		net_stream_fill(PEER_KEY, d->tx, tx_buf, d->pending);
	}
	if (wait_mode == WAIT_BLOCK) {
		n = peer_send(d->fd, tx_buf, d->pending, 0);
	} else {
		n = send(d->fd, tx_buf, d->pending, MSG_NOSIGNAL);
		if (n < 0)
			n = -errno;
	}
	if (n > 0) {
		d->tx += (uint64_t)n;
		d->pending -= (size_t)n;
		memmove(tx_buf, tx_buf + n, d->pending);
		printf("SENT total=%" PRIu64 "\n", d->tx);
	} else if (n != -EAGAIN && n != -EWOULDBLOCK && n != -EINTR) {
		end_at(&d->tx_end, n == 0 ? -EIO : n, t0, 1);
	}
}

static void *duplex_sender(void *arg)
{
	struct duplex *d = arg;

	while (!d->tx_end.done)
		duplex_send(d);
	return NULL;
}

static int do_duplex(int fd)
{
	struct duplex d = {.fd = fd, .rx_rng = {seed ^ 0x5eed}, .tx_rng = {seed}};
	pthread_t sender;

	if (wait_mode == WAIT_BLOCK) {
		if (net_thread_start(&sender, duplex_sender, &d, 0) < 0)
			net_die("pthread_create failed");
		while (!d.rx_end.done)
			duplex_recv(&d);
		pthread_join(sender, NULL);
	} else {
		while (!d.rx_end.done || !d.tx_end.done) {
			uint64_t rx = d.rx, tx = d.tx;

			if (!d.rx_end.done)
				duplex_recv(&d);
			if (!d.tx_end.done)
				duplex_send(&d);
			if (rx != d.rx || tx != d.tx || (d.rx_end.done && d.tx_end.done))
				continue;
			short events = (d.rx_end.done ? 0 : POLLIN) | (d.tx_end.done ? 0 : POLLOUT);
			/* A direction that just ended is not waited for: its end is always ready. */
			int rc = events ? wait_ready(fd, events) : 0;

			if (rc < 0)
				net_die("wait: %s", strerror(-rc));
		}
	}
	const struct end *first = d.rx_end.t_ms <= d.tx_end.t_ms ? &d.rx_end : &d.tx_end;

	printf("RESULT op=duplex outcome=%s first=%s rx=%" PRIu64 " tx=%" PRIu64
	       " rx_end=%s tx_end=%s last_call_ms=%.1f t_ms=%.3f\n",
	       first->outcome, first == &d.rx_end ? "recv" : "send", d.rx, d.tx, d.rx_end.outcome,
	       d.tx_end.outcome, first->call_ms, first->t_ms);
	return !d.corrupt && d.rx_end.ok && d.tx_end.ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct stat st;
	int fd, rc;

	parse(argc, argv);
	net_common_setup(timeout_s);
	tx_buf = malloc(max_io);
	rx_buf = malloc(max_io);
	if (!tx_buf || !rx_buf)
		net_die("out of memory");
	fd = open_conn();
	if (fstat(fd, &st) < 0)
		net_die("fstat: %s", strerror(errno));
	printf("CONNECTED ino=%llu\n", (unsigned long long)st.st_ino);
	setup_wait(fd);
	switch (act) {
	case ACT_STALL:
		return do_stall(fd);
	case ACT_FLOOD:
		rc = do_flood(fd);
		break;
	case ACT_SEND:
		rc = do_send(fd);
		break;
	case ACT_DUPLEX:
		rc = do_duplex(fd);
		break;
	default:
		rc = do_recv(fd);
		break;
	}
	/* Close explicitly, as a well-behaved program would, rather than leave it to exit. */
	if (close(fd) < 0) {
		printf("close: %s\n", strerror(errno));
		rc = 1;
	}
	return rc;
}
