/*
 * net_util.h - pieces shared by the net_* test helpers.
 *
 * Header-only on purpose: every .c in this directory is built as one plain program that
 * links against nothing but pthread, so the shared code is static inline and each helper
 * stays self-contained.
 *
 * The central idea is a deterministic byte stream: byte P of the stream named KEY is byte
 * P % 8 (little-endian) of mix64(KEY + (P / 8 + 1) * GOLDEN).  Any offset can be regenerated
 * without state, so a reader checks whatever chunk the kernel (or ulsock) handed it, and a
 * single lost, duplicated or reordered byte shows up at its exact offset.
 */
#ifndef NET_UTIL_H
#define NET_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NET_GOLDEN 0x9e3779b97f4a7c15ULL
#define NET_DEFAULT_TIMEOUT_S 300
#define NET_THREAD_STACK (512 * 1024)

/* Failure reporting: usage and setup errors exit 2, so a test can tell them from a failed
 * verification (exit 1). */
__attribute__((format(printf, 1, 2), noreturn)) static inline void net_die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

static inline double net_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/*
 * Every helper arms alarm() with its --timeout: a hang ends in SIGALRM, which the tests
 * report as a hang instead of waiting for the CI job to die.
 */
static inline void net_common_setup(unsigned timeout_s)
{
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (timeout_s > 0)
		alarm(timeout_s);
}

static inline unsigned long long net_parse_num(const char *opt, const char *s)
{
	char *end;
	unsigned long long v;
	unsigned long long mult = 1;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s)
		net_die("%s: bad number '%s'", opt, s);
	if (*end == 'K' || *end == 'k')
		mult = 1024ULL;
	else if (*end == 'M' || *end == 'm')
		mult = 1024ULL * 1024;
	else if (*end == 'G' || *end == 'g')
		mult = 1024ULL * 1024 * 1024;
	else if (*end != '\0')
		net_die("%s: bad number '%s'", opt, s);
	return v * mult;
}

/* ---- deterministic streams and sizes ---- */

static inline uint64_t net_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* The key of one stream: connection CONN of a run seeded with SEED, direction/tag TAG. */
static inline uint64_t net_key(uint64_t seed, uint64_t conn, uint64_t tag)
{
	return net_mix64(seed ^ net_mix64(conn * 0x100 + tag + 1));
}

static inline void net_stream_fill(uint64_t key, uint64_t off, unsigned char *buf, size_t len)
{
	while (len > 0) {
		uint64_t w = net_mix64(key + (off / 8 + 1) * NET_GOLDEN);
		unsigned skip = off % 8;
		size_t n = 8 - skip;
		unsigned char b[8];

		for (unsigned i = 0; i < 8; i++)
			b[i] = (unsigned char)(w >> (8 * i));
		if (n > len)
			n = len;
		memcpy(buf, b + skip, n);
		buf += n;
		off += n;
		len -= n;
	}
}

/*
 * Compares BUF with the stream at OFF.  Returns the index of the first differing byte, or
 * LEN when everything matches; *want gets the expected byte at a mismatch.
 */
static inline size_t net_stream_check(uint64_t key, uint64_t off, const unsigned char *buf,
				      size_t len, unsigned char *want)
{
	unsigned char exp[4096];
	size_t done = 0;

	while (done < len) {
		size_t n = len - done < sizeof(exp) ? len - done : sizeof(exp);

		net_stream_fill(key, off + done, exp, n);
		if (memcmp(exp, buf + done, n) != 0) {
			for (size_t i = 0; i < n; i++) {
				if (exp[i] != buf[done + i]) {
					*want = exp[i];
					return done + i;
				}
			}
		}
		done += n;
	}
	return len;
}

static inline uint64_t net_fnv(uint64_t h, const unsigned char *buf, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		h ^= buf[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

#define NET_FNV_INIT 0xcbf29ce484222325ULL

static inline uint64_t net_stream_hash(uint64_t key, uint64_t len)
{
	unsigned char buf[4096];
	uint64_t h = NET_FNV_INIT;

	for (uint64_t off = 0; off < len; off += sizeof(buf)) {
		size_t n = len - off < sizeof(buf) ? (size_t)(len - off) : sizeof(buf);

		net_stream_fill(key, off, buf, n);
		h = net_fnv(h, buf, n);
	}
	return h;
}

struct net_rng {
	uint64_t s;
};

static inline uint64_t net_rng_next(struct net_rng *r)
{
	r->s += NET_GOLDEN;
	return net_mix64(r->s);
}

/*
 * A size in [lo, hi], log-uniform: as many 1-byte-ish operations as 100-KiB ones, so both
 * the tiny-write and the full-ring cases get exercised within one stream.
 */
static inline size_t net_rng_size(struct net_rng *r, size_t lo, size_t hi)
{
	uint64_t x = net_rng_next(r);
	unsigned bits = 0;
	size_t v;

	while (bits < 63 && (1ULL << (bits + 1)) <= hi)
		bits++;
	v = (size_t)1 << (x % (bits + 1));
	v |= (size_t)((x >> 8) & (v - 1));
	if (v > hi)
		v = hi;
	if (v < lo)
		v = lo;
	return v;
}

/* ---- addresses, limits, threads ---- */

struct net_addr {
	struct sockaddr_storage ss;
	socklen_t len;
	int family;
};

/* Parses "127.0.0.1", "::1" or "[::1]"; dies on anything else. */
static inline void net_addr_parse(const char *host, unsigned port, struct net_addr *a)
{
	char tmp[INET6_ADDRSTRLEN + 2];
	size_t n = strlen(host);

	memset(a, 0, sizeof(*a));
	if (n >= sizeof(tmp))
		net_die("address too long: %s", host);
	if (host[0] == '[' && n >= 2 && host[n - 1] == ']') {
		memcpy(tmp, host + 1, n - 2);
		tmp[n - 2] = '\0';
	} else {
		memcpy(tmp, host, n + 1);
	}
	struct sockaddr_in *s4 = (struct sockaddr_in *)&a->ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&a->ss;
	if (inet_pton(AF_INET, tmp, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		a->len = sizeof(*s4);
		a->family = AF_INET;
	} else if (inet_pton(AF_INET6, tmp, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		a->len = sizeof(*s6);
		a->family = AF_INET6;
	} else {
		net_die("not a numeric IPv4/IPv6 address: %s", host);
	}
}

static inline unsigned net_sock_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return 0;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

/* Raises RLIMIT_NOFILE to at least WANT (the hard limit too, when we are allowed to). */
static inline void net_raise_nofile(rlim_t want)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want)
		return;
	if (rl.rlim_max < want) {
		struct rlimit hard = {want, want};

		if (setrlimit(RLIMIT_NOFILE, &hard) == 0)
			return;
	}
	rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
	setrlimit(RLIMIT_NOFILE, &rl);
}

static inline int net_set_nonblock(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0)
		return -errno;
	fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
	return fcntl(fd, F_SETFL, fl) < 0 ? -errno : 0;
}

static inline int net_thread_start(pthread_t *t, void *(*fn)(void *), void *arg, int detached)
{
	pthread_attr_t attr;
	int rc;

	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, NET_THREAD_STACK);
	if (detached)
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(t, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	return -rc;
}

/* ---- single operations ---- */

/* Waits for EVENTS on FD; returns revents or -errno.  The process alarm bounds the wait. */
static inline int net_poll1(int fd, short events)
{
	struct pollfd p = {.fd = fd, .events = events};

	for (;;) {
		int rc = poll(&p, 1, 1000);

		if (rc > 0)
			return p.revents;
		if (rc < 0 && errno != EINTR)
			return -errno;
	}
}

/* Alternates between read/recv and write/send so both entry points see traffic. */
static inline ssize_t net_read_op(int fd, void *buf, size_t n, uint64_t variant)
{
	return (variant & 1) ? recv(fd, buf, n, 0) : read(fd, buf, n);
}

static inline ssize_t net_write_op(int fd, const void *buf, size_t n, uint64_t variant)
{
	return (variant & 1) ? send(fd, buf, n, MSG_NOSIGNAL) : write(fd, buf, n);
}

/* Reads at most N bytes, waiting with poll() when the socket is non-blocking.  Returns the
 * byte count, 0 at EOF or -errno. */
static inline ssize_t net_read_some(int fd, void *buf, size_t n, int nonblock, uint64_t variant)
{
	for (;;) {
		ssize_t r = net_read_op(fd, buf, n, variant);

		if (r >= 0)
			return r;
		if (errno == EINTR)
			continue;
		if (nonblock && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int ev = net_poll1(fd, POLLIN);

			if (ev < 0)
				return ev;
			continue;
		}
		return -errno;
	}
}

static inline int net_write_all(int fd, const void *buf, size_t n, int nonblock, uint64_t variant)
{
	const unsigned char *p = buf;

	while (n > 0) {
		ssize_t w = net_write_op(fd, p, n, variant);

		if (w > 0) {
			p += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && nonblock && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int ev = net_poll1(fd, POLLOUT);

			if (ev < 0)
				return ev;
			continue;
		}
		return w < 0 ? -errno : -EIO;
	}
	return 0;
}

/* ---- the verified transfer engine ---- */

/*
 * One connection's traffic: TX_LEN bytes of stream TX_KEY out, RX_LEN bytes of stream RX_KEY
 * in, both verified, in random operation sizes.  Blocking sockets run the two directions in
 * two threads; non-blocking ones run both from one poll() loop, or from the caller's own
 * event loop through net_xfer_events()/net_xfer_step().
 */
struct net_xfer {
	int fd;
	int nonblock;
	uint64_t tx_key, tx_len, tx_done;
	uint64_t rx_key, rx_len, rx_done;
	size_t min_io, max_io;
	int shut_wr;	/* shutdown(SHUT_WR) once everything is sent */
	int expect_eof; /* after RX_LEN bytes the peer must close: the next read returns 0 */
	int tx_fin, rx_fin;
	struct net_rng tx_rng, rx_rng;
	unsigned char *tx_buf, *rx_buf; /* MAX_IO bytes each, owned by the caller */
	char tx_err[160], rx_err[160];
};

static inline void net_xfer_init(struct net_xfer *x, int fd, uint64_t io_seed)
{
	memset(x, 0, sizeof(*x));
	x->fd = fd;
	x->min_io = 1;
	x->max_io = 65536;
	x->tx_rng.s = net_mix64(io_seed ^ 0x7478);
	x->rx_rng.s = net_mix64(io_seed ^ 0x7278);
}

static inline int net_is_again(int err)
{
	return err == EAGAIN || err == EWOULDBLOCK || err == EINTR;
}

/* One send.  Returns 0 on progress, 1 when it would block, -1 on error (tx_err says why). */
static inline int net_xfer_tx_once(struct net_xfer *x)
{
	if (x->tx_fin)
		return 0;
	if (x->tx_done == x->tx_len) {
		if (x->shut_wr && shutdown(x->fd, SHUT_WR) < 0) {
			snprintf(x->tx_err, sizeof(x->tx_err), "shutdown(SHUT_WR): %s",
				 strerror(errno));
			return -1;
		}
		x->tx_fin = 1;
		return 0;
	}
	size_t want = net_rng_size(&x->tx_rng, x->min_io, x->max_io);
	if (want > x->tx_len - x->tx_done)
		want = (size_t)(x->tx_len - x->tx_done);
	net_stream_fill(x->tx_key, x->tx_done, x->tx_buf, want);
	ssize_t n = net_write_op(x->fd, x->tx_buf, want, net_rng_next(&x->tx_rng));
	if (n < 0 && net_is_again(errno))
		return 1;
	if (n <= 0) {
		snprintf(x->tx_err, sizeof(x->tx_err), "send at byte %" PRIu64 ": %s", x->tx_done,
			 n < 0 ? strerror(errno) : "returned 0");
		return -1;
	}
	x->tx_done += (uint64_t)n;
	return 0;
}

static inline int net_xfer_rx_data(struct net_xfer *x, size_t n)
{
	unsigned char want;
	size_t bad;

	if (x->rx_done + n > x->rx_len) {
		snprintf(x->rx_err, sizeof(x->rx_err),
			 "%" PRIu64 " unexpected bytes after the %" PRIu64 " expected",
			 x->rx_done + n - x->rx_len, x->rx_len);
		return -1;
	}
	bad = net_stream_check(x->rx_key, x->rx_done, x->rx_buf, n, &want);
	if (bad < n) {
		snprintf(x->rx_err, sizeof(x->rx_err),
			 "byte %" PRIu64 " is 0x%02x, expected 0x%02x (read of %zu at %" PRIu64 ")",
			 x->rx_done + bad, x->rx_buf[bad], want, n, x->rx_done);
		return -1;
	}
	x->rx_done += n;
	if (x->rx_done == x->rx_len && !x->expect_eof)
		x->rx_fin = 1;
	return 0;
}

/* One receive.  Same return convention as net_xfer_tx_once(). */
static inline int net_xfer_rx_once(struct net_xfer *x)
{
	if (x->rx_fin)
		return 0;
	if (x->rx_done == x->rx_len && !x->expect_eof) {
		x->rx_fin = 1;
		return 0;
	}
	size_t want = net_rng_size(&x->rx_rng, x->min_io, x->max_io);
	ssize_t n = net_read_op(x->fd, x->rx_buf, want, net_rng_next(&x->rx_rng));
	if (n < 0 && net_is_again(errno))
		return 1;
	if (n < 0) {
		snprintf(x->rx_err, sizeof(x->rx_err), "recv at byte %" PRIu64 ": %s", x->rx_done,
			 strerror(errno));
		return -1;
	}
	if (n == 0) {
		if (x->rx_done < x->rx_len) {
			snprintf(x->rx_err, sizeof(x->rx_err),
				 "EOF after %" PRIu64 " of %" PRIu64 " bytes", x->rx_done,
				 x->rx_len);
			return -1;
		}
		x->rx_fin = 1;
		return 0;
	}
	return net_xfer_rx_data(x, (size_t)n);
}

static inline short net_xfer_events(const struct net_xfer *x)
{
	return (short)((x->tx_fin ? 0 : POLLOUT) | (x->rx_fin ? 0 : POLLIN));
}

static inline int net_xfer_done(const struct net_xfer *x) { return x->tx_fin && x->rx_fin; }

/* Handles one poll() result on a non-blocking socket: works each ready direction until it
 * would block (bounded, so one connection cannot starve an event loop). */
static inline int net_xfer_step(struct net_xfer *x, short revents)
{
	short err = (short)(revents & (POLLERR | POLLHUP | POLLNVAL));

	for (int i = 0; i < 64 && !x->tx_fin && (revents & (POLLOUT | err)); i++) {
		int rc = net_xfer_tx_once(x);

		if (rc < 0)
			return -1;
		if (rc > 0)
			break;
	}
	for (int i = 0; i < 64 && !x->rx_fin && (revents & (POLLIN | err)); i++) {
		int rc = net_xfer_rx_once(x);

		if (rc < 0)
			return -1;
		if (rc > 0)
			break;
	}
	return 0;
}

static inline void *net_xfer_tx_thread(void *arg)
{
	struct net_xfer *x = arg;

	while (!x->tx_fin) {
		if (net_xfer_tx_once(x) < 0) {
			/* Wake the receiving side, which may wait for data that never comes. */
			shutdown(x->fd, SHUT_RDWR);
			break;
		}
	}
	return NULL;
}

/* Runs the whole transfer.  Returns 0 when both directions completed and verified. */
static inline int net_xfer_run(struct net_xfer *x)
{
	if (x->nonblock) {
		while (!net_xfer_done(x)) {
			int ev = net_poll1(x->fd, net_xfer_events(x));

			if (ev < 0) {
				snprintf(x->rx_err, sizeof(x->rx_err), "poll: %s", strerror(-ev));
				return -1;
			}
			if (net_xfer_step(x, (short)ev) < 0)
				return -1;
		}
		return 0;
	}

	pthread_t tx;
	int rc = net_thread_start(&tx, net_xfer_tx_thread, x, 0);
	if (rc < 0) {
		snprintf(x->tx_err, sizeof(x->tx_err), "pthread_create: %s", strerror(-rc));
		return -1;
	}
	while (!x->rx_fin) {
		if (net_xfer_rx_once(x) < 0) {
			shutdown(x->fd, SHUT_RDWR);
			break;
		}
	}
	pthread_join(tx, NULL);
	return (x->tx_err[0] || x->rx_err[0]) ? -1 : 0;
}

static inline const char *net_xfer_error(const struct net_xfer *x)
{
	if (x->rx_err[0])
		return x->rx_err;
	return x->tx_err[0] ? x->tx_err : "ok";
}

/* ---- the duplex header ---- */

/*
 * In duplex mode the client opens with this header, so the server knows which streams to
 * send and expect; everything after it is the two verified streams.  Little-endian u64s:
 * magic, key c->s, key s->c, length c->s, length s->c, server I/O style, max op size.
 */
#define NET_DUPLEX_MAGIC 0x31584c5055444e4eULL
#define NET_DUPLEX_WORDS 7
#define NET_DUPLEX_LEN (NET_DUPLEX_WORDS * 8)

struct net_duplex {
	uint64_t magic, key_c2s, key_s2c, len_c2s, len_s2c, io, max_io;
};

static inline void net_duplex_encode(const struct net_duplex *h, unsigned char *out)
{
	const uint64_t w[NET_DUPLEX_WORDS] = {h->magic,	  h->key_c2s, h->key_s2c, h->len_c2s,
					      h->len_s2c, h->io,      h->max_io};

	for (int i = 0; i < NET_DUPLEX_WORDS; i++)
		for (int b = 0; b < 8; b++)
			out[i * 8 + b] = (unsigned char)(w[i] >> (8 * b));
}

static inline int net_duplex_decode(const unsigned char *in, struct net_duplex *h)
{
	uint64_t w[NET_DUPLEX_WORDS] = {0};

	for (int i = 0; i < NET_DUPLEX_WORDS; i++)
		for (int b = 0; b < 8; b++)
			w[i] |= (uint64_t)in[i * 8 + b] << (8 * b);
	h->magic = w[0];
	h->key_c2s = w[1];
	h->key_s2c = w[2];
	h->len_c2s = w[3];
	h->len_s2c = w[4];
	h->io = w[5];
	h->max_io = w[6];
	return h->magic == NET_DUPLEX_MAGIC && h->max_io >= 1 && h->max_io <= (1u << 24) ? 0 : -1;
}

#endif /* NET_UTIL_H */
