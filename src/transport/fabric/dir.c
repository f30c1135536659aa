/* SPDX-License-Identifier: MIT */
#include "dir.h"
#include "wire.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>

/* Little-endian fields at fixed offsets; buffers are byte arrays, never cast to structs. */

static size_t type_len(uint8_t type)
{
	static const uint16_t len[] = {
		[ULS_FAB_DIR_BANNER] = ULS_FAB_BANNER_LEN, [ULS_FAB_DIR_HELLO] = ULS_FAB_HELLO_LEN,
		[ULS_FAB_DIR_OFFER] = ULS_FAB_OFFER_LEN,   [ULS_FAB_DIR_NO] = ULS_FAB_NO_LEN,
		[ULS_FAB_DIR_REG] = ULS_FAB_REG_LEN,
	};

	return type < sizeof(len) / sizeof(len[0]) ? len[type] : 0;
}

int uls_fab_dir_header(const void *buf, size_t n, uint8_t *type, size_t *len)
{
	const uint8_t *p = buf;

	if (n < ULS_FAB_DIR_HDR_LEN || get32(p) != ULS_FAB_DIR_MAGIC ||
	    p[4] != ULS_FAB_DIR_VERSION || !type_len(p[5]) || get16(p + 6) != type_len(p[5]))
		return -EBADMSG;
	*type = p[5];
	*len = type_len(p[5]);
	return 0;
}

/* Zeroes the whole message (every reserved byte) and writes its header. */
static int header_pack(uint8_t *out, uint8_t type)
{
	size_t len = type_len(type);

	memset(out, 0, len);
	put32(out, ULS_FAB_DIR_MAGIC);
	out[4] = ULS_FAB_DIR_VERSION;
	out[5] = type;
	put16(out + 6, (uint16_t)len);
	return (int)len;
}

/* A whole message of exactly this type and length. */
static int header_check(const uint8_t *p, size_t n, uint8_t want)
{
	uint8_t type;
	size_t len;

	if (n != type_len(want) || uls_fab_dir_header(p, n, &type, &len) < 0 || type != want)
		return -EBADMSG;
	return 0;
}

/* A string field: printable ASCII, then NUL padding to the end, at least one NUL. */
static int str_ok(const uint8_t *p, size_t size)
{
	size_t i = 0;

	while (i < size && p[i] >= 0x20 && p[i] < 0x7f)
		i++;
	return i < size && all_zero(p + i, size - i);
}

static int str_put(uint8_t *p, size_t size, const char *s)
{
	size_t n = strnlen(s, size);

	if (n == size || !str_ok((const uint8_t *)s, n + 1))
		return -EINVAL;
	memcpy(p, s, n); /* the rest stays zero from header_pack */
	return 0;
}

static void str_get(char *dst, const uint8_t *p, size_t size)
{
	memcpy(dst, p, size); /* str_ok made it NUL-terminated and padded */
}

int uls_fab_banner_pack(void *out, const struct uls_fab_banner *m)
{
	uint8_t *p = out;
	int len = header_pack(p, ULS_FAB_DIR_BANNER);

	memcpy(p + 8, m->nd, ULS_FAB_NONCE_LEN);
	p[24] = m->min_version;
	p[25] = m->max_version;
	return len;
}

/*
 * Versions: a banner must offer version 1, the only one the client speaks, so
 * min_version <= 1 <= max_version, and min_version is not 0.
 */
int uls_fab_banner_parse(const void *buf, size_t n, struct uls_fab_banner *m)
{
	const uint8_t *p = buf;

	if (header_check(p, n, ULS_FAB_DIR_BANNER) < 0 || !all_zero(p + 26, 6) || p[24] == 0 ||
	    p[24] > ULS_FAB_DIR_VERSION || p[25] < ULS_FAB_DIR_VERSION)
		return -EBADMSG;
	memcpy(m->nd, p + 8, ULS_FAB_NONCE_LEN);
	m->min_version = p[24];
	m->max_version = p[25];
	return 0;
}

int uls_fab_hello_pack(void *out, const struct uls_fab_hello *m)
{
	uint8_t *p = out;
	int len = header_pack(p, ULS_FAB_DIR_HELLO);

	memcpy(p + 8, m->nd, ULS_FAB_NONCE_LEN);
	memcpy(p + 24, m->tuple.b, ULS_FAB_TUPLE_LEN);
	return len;
}

int uls_fab_hello_parse(const void *buf, size_t n, struct uls_fab_hello *m)
{
	const uint8_t *p = buf;

	if (header_check(p, n, ULS_FAB_DIR_HELLO) < 0 || !all_zero(p + 60, 4))
		return -EBADMSG;
	memcpy(m->nd, p + 8, ULS_FAB_NONCE_LEN);
	memcpy(m->tuple.b, p + 24, ULS_FAB_TUPLE_LEN);
	return 0;
}

/*
 * The part OFFER and REG share: provider, fabric name, address. The address bytes past
 * addr_len are sent as 0 and required to be 0, so each message has one encoding.
 */
static int where_put(uint8_t *prov, const struct uls_fab_where *m)
{
	if (m->addr_len > ULS_FAB_ADDR_MAX || (m->flags & ~ULS_FAB_FLAG_KEY) ||
	    str_put(prov, ULS_FAB_PROVIDER_LEN, m->provider) < 0 ||
	    str_put(prov + ULS_FAB_PROVIDER_LEN, ULS_FAB_FABRIC_LEN, m->fabric) < 0)
		return -EINVAL;
	memcpy(prov + ULS_FAB_PROVIDER_LEN + ULS_FAB_FABRIC_LEN, m->addr, m->addr_len);
	return 0;
}

static int where_get(const uint8_t *prov, uint16_t addr_len, struct uls_fab_where *m)
{
	const uint8_t *fab = prov + ULS_FAB_PROVIDER_LEN, *addr = fab + ULS_FAB_FABRIC_LEN;

	if (addr_len > ULS_FAB_ADDR_MAX || !str_ok(prov, ULS_FAB_PROVIDER_LEN) ||
	    !str_ok(fab, ULS_FAB_FABRIC_LEN) ||
	    !all_zero(addr + addr_len, ULS_FAB_ADDR_MAX - addr_len))
		return -EBADMSG;
	str_get(m->provider, prov, ULS_FAB_PROVIDER_LEN);
	str_get(m->fabric, fab, ULS_FAB_FABRIC_LEN);
	memcpy(m->addr, addr, ULS_FAB_ADDR_MAX);
	m->addr_len = addr_len;
	return 0;
}

int uls_fab_offer_pack(void *out, const struct uls_fab_where *m)
{
	uint8_t *p = out;
	int len = header_pack(p, ULS_FAB_DIR_OFFER);

	if (where_put(p + 32, m) < 0)
		return -EINVAL;
	memcpy(p + 8, m->ns, ULS_FAB_NONCE_LEN);
	put32(p + 24, m->flags);
	put16(p + 28, m->addr_len);
	return len;
}

int uls_fab_offer_parse(const void *buf, size_t n, struct uls_fab_where *m)
{
	const uint8_t *p = buf;

	if (header_check(p, n, ULS_FAB_DIR_OFFER) < 0 || (get32(p + 24) & ~ULS_FAB_FLAG_KEY) ||
	    !all_zero(p + 30, 2) || where_get(p + 32, get16(p + 28), m) < 0)
		return -EBADMSG;
	memcpy(m->ns, p + 8, ULS_FAB_NONCE_LEN);
	m->flags = get32(p + 24);
	return 0;
}

int uls_fab_no_pack(void *out, uint32_t reason)
{
	uint8_t *p = out;

	if (reason < ULS_FAB_NO_NOT_REGISTERED || reason > ULS_FAB_NO_VERSION)
		return -EINVAL;
	int len = header_pack(p, ULS_FAB_DIR_NO);
	put32(p + 8, reason);
	return len;
}

int uls_fab_no_parse(const void *buf, size_t n, uint32_t *reason)
{
	const uint8_t *p = buf;
	uint32_t r;

	if (header_check(p, n, ULS_FAB_DIR_NO) < 0 || !all_zero(p + 12, 4))
		return -EBADMSG;
	r = get32(p + 8);
	if (r < ULS_FAB_NO_NOT_REGISTERED || r > ULS_FAB_NO_VERSION)
		return -EBADMSG;
	*reason = r;
	return 0;
}

/* An IPv4 socket's tuple holds two IPv4-mapped addresses. */
static int tuple_is_v4(const struct uls_fab_tuple *t)
{
	static const uint8_t pre[12] = {[10] = 0xff, [11] = 0xff};

	return !memcmp(t->b, pre, 12) && !memcmp(t->b + 16, pre, 12);
}

int uls_fab_reg_pack(void *out, const struct uls_fab_reg *m)
{
	uint8_t *p = out;
	int len = header_pack(p, ULS_FAB_DIR_REG);

	if ((m->family != 4 && m->family != 6) || (m->family == 4 && !tuple_is_v4(&m->tuple)) ||
	    where_put(p + 88, &m->where) < 0)
		return -EINVAL;
	memcpy(p + 8, m->tuple.b, ULS_FAB_TUPLE_LEN);
	put16(p + 44, m->family);
	put16(p + 46, (uint16_t)m->where.flags);
	put64(p + 48, m->inode);
	put64(p + 56, m->cookie);
	memcpy(p + 64, m->where.ns, ULS_FAB_NONCE_LEN);
	put16(p + 80, m->where.addr_len);
	return len;
}

int uls_fab_reg_parse(const void *buf, size_t n, struct uls_fab_reg *m)
{
	const uint8_t *p = buf;
	uint16_t family, flags;

	if (header_check(p, n, ULS_FAB_DIR_REG) < 0 || !all_zero(p + 82, 6))
		return -EBADMSG;
	memcpy(m->tuple.b, p + 8, ULS_FAB_TUPLE_LEN);
	family = get16(p + 44);
	flags = get16(p + 46);
	if ((family != 4 && family != 6) || (family == 4 && !tuple_is_v4(&m->tuple)) ||
	    (flags & ~ULS_FAB_FLAG_KEY) || where_get(p + 88, get16(p + 80), &m->where) < 0)
		return -EBADMSG;
	m->family = family;
	m->where.flags = flags;
	m->inode = get64(p + 48);
	m->cookie = get64(p + 56);
	memcpy(m->where.ns, p + 64, ULS_FAB_NONCE_LEN);
	return 0;
}

/* One address of a tuple: 16 bytes (IPv4 mapped), and its port in host order. */
static int tuple_put(uint8_t *addr, uint16_t *port, const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)sa;
		memset(addr, 0, 10);
		addr[10] = addr[11] = 0xff;
		memcpy(addr + 12, &s->sin_addr, 4);
		*port = ntohs(s->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)sa;
		memcpy(addr, &s->sin6_addr, 16);
		*port = ntohs(s->sin6_port);
	} else {
		return -EAFNOSUPPORT;
	}
	return 0;
}

/*
 * The ports are integers of 9.3 and so little-endian (9.2), unlike the addresses, which
 * keep network order.
 */
int uls_fab_tuple_make(struct uls_fab_tuple *t, const struct sockaddr *client,
		       const struct sockaddr *server)
{
	uint16_t cport, sport;

	memset(t, 0, sizeof(*t));
	if (tuple_put(t->b, &cport, client) < 0 || tuple_put(t->b + 16, &sport, server) < 0)
		return -EAFNOSUPPORT;
	put16(t->b + 32, cport);
	put16(t->b + 34, sport);
	return 0;
}

void uls_fab_tuple_addr(const struct uls_fab_tuple *t, int server, struct sockaddr_in6 *out)
{
	memset(out, 0, sizeof(*out));
	out->sin6_family = AF_INET6;
	memcpy(&out->sin6_addr, t->b + (server ? 16 : 0), 16);
	out->sin6_port = htons(get16(t->b + (server ? 34 : 32)));
}


#ifndef ULS_FAB_DIR_CODEC_ONLY

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../../core/config.h"
#include "../../core/handshake.h"
#include "../../os/libc.h"
#include "../../os/ownfd.h"

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

/*
 * Server addresses whose directory failed, kept 30 s (9.3), so that a host without
 * fabricd costs one side connection per half minute, not one per connect(). A full table
 * forgets the entry that expires first.
 */
#define CACHE_SLOTS 64

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	uint8_t addr[16];
	uint64_t until;
} cache[CACHE_SLOTS];

static int cache_has(const uint8_t *addr, uint64_t now)
{
	int hit = 0;

	pthread_mutex_lock(&cache_mu);
	for (int i = 0; i < CACHE_SLOTS && !hit; i++)
		hit = cache[i].until > now && !memcmp(cache[i].addr, addr, 16);
	pthread_mutex_unlock(&cache_mu);
	return hit;
}

static void cache_add(const uint8_t *addr, uint64_t now)
{
	int victim = 0;

	pthread_mutex_lock(&cache_mu);
	for (int i = 0; i < CACHE_SLOTS; i++) {
		if (!memcmp(cache[i].addr, addr, 16) || cache[i].until <= now) {
			victim = i;
			break;
		}
		if (cache[i].until < cache[victim].until)
			victim = i;
	}
	memcpy(cache[victim].addr, addr, 16);
	cache[victim].until = now + ULS_FAB_DIRQ_CACHE_NS;
	pthread_mutex_unlock(&cache_mu);
}

void uls_fab_dirq_cache_clear(void)
{
	pthread_mutex_lock(&cache_mu);
	memset(cache, 0, sizeof(cache));
	pthread_mutex_unlock(&cache_mu);
}

static void dirq_close(struct uls_fab_dirq *q)
{
	/* In a fork child this closes the child's copy only: the parent keeps its own. */
	if (q->fd >= 0)
		uls_own_fd_close(&q->fd);
}

/*
 * Ends the exchange with why. A failure before any answer (refusal, silence, not fabricd)
 * is the server host's, and is cached; an answer (NO) concerns this connection only.
 */
static int dirq_fail(struct uls_fab_dirq *q, uint64_t now, int cached, const char *fmt,
		     const char *detail)
{
	snprintf(q->why, sizeof(q->why), fmt, detail);
	if (cached)
		cache_add(q->server, now);
	dirq_close(q);
	q->state = ULS_FAB_DIRQ_FAILED;
	q->events = 0;
	return -1;
}

static int no_answer(struct uls_fab_dirq *q, uint64_t now, const char *detail)
{
	return dirq_fail(q, now, 1, "no directory answer (%s)", detail);
}

static void to_sockaddr(const uint8_t *addr16, uint16_t port, int family,
			struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET) {
		struct sockaddr_in *s = (void *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		memcpy(&s->sin_addr, addr16 + 12, 4);
		*len = sizeof(*s);
	} else {
		struct sockaddr_in6 *s = (void *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(port);
		memcpy(&s->sin6_addr, addr16, 16);
		*len = sizeof(*s);
	}
}

/* Opens the side connection: from local's address, port 0, to the server's, port. */
static int dirq_connect(struct uls_fab_dirq *q, int family, uint16_t port, uint64_t now)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int one = 1, fd;

	fd = uls_libc.socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return dirq_fail(q, now, 0, "no directory answer (socket: %s)", strerror(errno));
	uls_own_fd_take(fd, &q->fd);
	q->pid = uls_pid();
	/* The port comes with connect(): many side connections share the program's address. */
	uls_libc.setsockopt(q->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
	to_sockaddr(q->tuple.b, 0, family, &ss, &len);
	if (bind(q->fd, (struct sockaddr *)&ss, len) < 0)
		return dirq_fail(q, now, 0, "no directory answer (bind: %s)", strerror(errno));
	to_sockaddr(q->server, port, family, &ss, &len);
	q->state = ULS_FAB_DIRQ_CONNECTING;
	q->events = POLLOUT;
	q->deadline_ns = now + ULS_FAB_DIRQ_CONNECT_NS;
	if (uls_libc.connect(q->fd, (struct sockaddr *)&ss, len) < 0 && errno != EINPROGRESS)
		return no_answer(q, now, strerror(errno));
	return 0;
}

int uls_fab_dirq_start(struct uls_fab_dirq *q, const struct sockaddr *local,
		       const struct sockaddr *peer, uint16_t port, uint64_t now_ns)
{
	int family = local->sa_family;

	memset(q, 0, sizeof(*q));
	q->fd = -1;
	q->pid = uls_pid();
	if (uls_fab_tuple_make(&q->tuple, local, peer) < 0 || peer->sa_family != family)
		return dirq_fail(q, now_ns, 0, "no directory answer (%s)", "address family");
	memcpy(q->server, q->tuple.b + 16, 16);
	if (cache_has(q->server, now_ns))
		return dirq_fail(q, now_ns, 0, "no directory answer (%s)", "cached");
	if (dirq_connect(q, family, port, now_ns) < 0)
		return -1;
	return uls_fab_dirq_step(q, now_ns);
}

/* 0 when the connect completed, 1 while in progress, else the failure's -1. */
static int step_connecting(struct uls_fab_dirq *q, uint64_t now)
{
	struct pollfd p = {.fd = q->fd, .events = POLLOUT};
	socklen_t len = sizeof(int);
	int err = 0;

	if (uls_libc.poll(&p, 1, 0) <= 0)
		return now >= q->deadline_ns ? no_answer(q, now, "no connect in 200 ms") : 1;
	if (uls_libc.getsockopt(q->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err)
		return no_answer(q, now, strerror(err));
	q->state = ULS_FAB_DIRQ_BANNER;
	q->events = POLLIN;
	q->deadline_ns = now + ULS_FAB_DIRQ_BANNER_NS;
	return 0;
}

/*
 * Reads into q->buf up to want bytes. Returns 0 when q->got reached want, 1 to wait, or
 * the failure's -1 (what names the message awaited).
 */
static int read_some(struct uls_fab_dirq *q, uint64_t now, size_t want, const char *what)
{
	char detail[48];
	ssize_t n;

	while (q->got < want) {
		n = uls_libc.recv(q->fd, q->buf + q->got, want - q->got, MSG_DONTWAIT);
		if (n > 0) {
			q->got += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (now < q->deadline_ns)
				return 1;
			snprintf(detail, sizeof(detail), "no %s in time", what);
		} else if (n == 0) {
			snprintf(detail, sizeof(detail), "closed before the %s", what);
		} else {
			snprintf(detail, sizeof(detail), "%s", strerror(errno));
		}
		return no_answer(q, now, detail);
	}
	return 0;
}

/*
 * The banner: exactly 32 bytes, read no further, and checked as they come in, so that a
 * service that speaks first (ssh, smtp) fails on its first bytes, not at the deadline.
 */
static int step_banner(struct uls_fab_dirq *q, uint64_t now)
{
	uint8_t head[ULS_FAB_BANNER_LEN];
	struct uls_fab_banner b;
	struct uls_fab_hello h;
	int r = read_some(q, now, ULS_FAB_BANNER_LEN, "banner");

	if (r < 0)
		return r;
	header_pack(head, ULS_FAB_DIR_BANNER); /* the first 8 bytes a banner can have */
	if (memcmp(q->buf, head, q->got < ULS_FAB_DIR_HDR_LEN ? q->got : ULS_FAB_DIR_HDR_LEN))
		return no_answer(q, now, "not fabricd");
	if (r > 0)
		return 1;
	if (uls_fab_banner_parse(q->buf, q->got, &b) < 0)
		return no_answer(q, now, "not fabricd");
	memcpy(h.nd, b.nd, sizeof(h.nd));
	h.tuple = q->tuple;
	uls_fab_hello_pack(q->buf, &h);
	q->state = ULS_FAB_DIRQ_HELLO;
	q->events = POLLOUT;
	q->sent = 0;
	q->deadline_ns = now + ULS_FAB_DIRQ_ANSWER_NS;
	return 0;
}

static int step_hello(struct uls_fab_dirq *q, uint64_t now)
{
	while (q->sent < ULS_FAB_HELLO_LEN) {
		ssize_t n = uls_libc.send(q->fd, q->buf + q->sent, ULS_FAB_HELLO_LEN - q->sent,
					  MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n > 0) {
			q->sent += (size_t)n;
		} else if (n < 0 && errno == EINTR) {
			continue;
		} else if (n < 0 && errno == EAGAIN && now < q->deadline_ns) {
			return 1;
		} else {
			return no_answer(q, now, n < 0 && errno != EAGAIN ? strerror(errno)
									   : "HELLO not sent");
		}
	}
	q->state = ULS_FAB_DIRQ_ANSWER;
	q->events = POLLIN;
	q->got = 0;
	return 0;
}

static int step_answer(struct uls_fab_dirq *q, uint64_t now)
{
	static const char *const no_why[] = {
		[ULS_FAB_NO_NOT_REGISTERED] = "not registered",
		[ULS_FAB_NO_TUPLE_MISMATCH] = "4-tuple mismatch",
		[ULS_FAB_NO_BUSY] = "directory busy",
		[ULS_FAB_NO_VERSION] = "no directory answer (version)",
	};
	uint8_t type = 0;
	size_t len = ULS_FAB_DIR_HDR_LEN;
	uint32_t reason;
	int r = read_some(q, now, ULS_FAB_DIR_HDR_LEN, "answer");

	if (r != 0)
		return r < 0 ? -1 : 0; /* failed, or wait */
	if (uls_fab_dir_header(q->buf, q->got, &type, &len) < 0 ||
	    (type != ULS_FAB_DIR_OFFER && type != ULS_FAB_DIR_NO))
		return no_answer(q, now, "malformed answer");
	r = read_some(q, now, len, "answer");
	if (r != 0)
		return r < 0 ? -1 : 0;
	if (type == ULS_FAB_DIR_NO) {
		if (uls_fab_no_parse(q->buf, q->got, &reason) < 0)
			return no_answer(q, now, "malformed answer");
		return dirq_fail(q, now, reason == ULS_FAB_NO_VERSION, "%s", no_why[reason]);
	}
	if (uls_fab_offer_parse(q->buf, q->got, &q->offer) < 0)
		return no_answer(q, now, "malformed answer");
	dirq_close(q);
	q->state = ULS_FAB_DIRQ_DONE;
	q->events = 0;
	return 1;
}

/*
 * Each state's step returns 0 when it moved on to the next state (and the loop tries
 * that one at once), 1 to wait, -1 failed; step_answer, the last, returns what
 * uls_fab_dirq_step does (1 DONE, 0 wait, -1 failed).
 */
int uls_fab_dirq_step(struct uls_fab_dirq *q, uint64_t now_ns)
{
	int r = 0;

	if (q->state == ULS_FAB_DIRQ_DONE)
		return 1;
	if (q->state == ULS_FAB_DIRQ_FAILED || q->state == ULS_FAB_DIRQ_IDLE)
		return -1;
	if (q->pid != uls_pid())
		return dirq_fail(q, now_ns, 0, "no directory answer (%s)", "forked");
	while (r == 0) {
		switch (q->state) {
		case ULS_FAB_DIRQ_CONNECTING:
			r = step_connecting(q, now_ns);
			break;
		case ULS_FAB_DIRQ_BANNER:
			r = step_banner(q, now_ns);
			break;
		case ULS_FAB_DIRQ_HELLO:
			r = step_hello(q, now_ns);
			break;
		case ULS_FAB_DIRQ_ANSWER:
			return step_answer(q, now_ns);
		default:
			return -1;
		}
	}
	return r < 0 ? -1 : 0;
}

void uls_fab_dirq_fini(struct uls_fab_dirq *q)
{
	dirq_close(q);
	if (q->state != ULS_FAB_DIRQ_DONE)
		q->state = ULS_FAB_DIRQ_FAILED;
}

int uls_fab_reg_from_socket(struct uls_fab_reg *r, int fd)
{
	struct sockaddr_storage self, peer;
	socklen_t slen = sizeof(self), plen = sizeof(peer);
	struct stat st;

	memset(r, 0, sizeof(*r));
	if (getsockname(fd, (struct sockaddr *)&self, &slen) < 0 ||
	    getpeername(fd, (struct sockaddr *)&peer, &plen) < 0 || fstat(fd, &st) < 0)
		return -errno;
	if (uls_fab_tuple_make(&r->tuple, (struct sockaddr *)&peer, (struct sockaddr *)&self) < 0)
		return -EAFNOSUPPORT;
	r->family = self.ss_family == AF_INET ? 4 : 6;
	r->inode = st.st_ino;
	r->cookie = uls_sock_cookie(fd);
	return 0;
}

/*
 * The process's unix connection to fabricd. Opened again in a fork child (so that
 * fabricd's SO_PEERCRED and our SCM_CREDENTIALS name the same process), after a change of
 * effective uid (sock_diag will report the new uid as the socket's owner only for sockets
 * created since), or for another port. A failure to reach a fabricd we accept is kept for
 * a second, so that a server without one pays one connect() a second, not one per accept.
 */
#define REG_RETRY_NS 1000000000ull

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static int reg_fd = -1;
static pid_t reg_pid;
static uid_t reg_uid;
static uint16_t reg_port;
static uint64_t reg_retry_ns;
static int reg_err;
static char reg_why[96];

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int reg_refuse(int err, uint16_t port, const char *fmt, long arg)
{
	char what[64];

	snprintf(what, sizeof(what), fmt, arg);
	snprintf(reg_why, sizeof(reg_why), "fabricd @ulsock-fabricd.%u: %s", port, what);
	reg_err = err;
	reg_retry_ns = mono_ns() + REG_RETRY_NS;
	if (reg_fd >= 0)
		uls_own_fd_close(&reg_fd);
	return -err;
}

static int reg_open(uint16_t port, uid_t uid)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	struct ucred cr;
	socklen_t len = sizeof(cr);
	int fd, n;

	if (reg_fd < 0 && reg_port == port && reg_uid == uid && reg_pid == uls_pid() &&
	    mono_ns() < reg_retry_ns)
		return -reg_err;
	reg_pid = uls_pid();
	reg_uid = uid;
	reg_port = port;
	n = snprintf(sun.sun_path + 1, sizeof(sun.sun_path) - 1, "ulsock-fabricd.%u", port);
	fd = uls_libc.socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return reg_refuse(errno, port, "socket: errno %ld", errno);
	uls_own_fd_take(fd, &reg_fd);
	if (uls_libc.connect(reg_fd, (struct sockaddr *)&sun,
			     (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) < 0)
		return reg_refuse(errno, port, "not reached (errno %ld)", errno);
	if (uls_libc.getsockopt(reg_fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
		return reg_refuse(errno, port, "no SO_PEERCRED (errno %ld)", errno);
	if (cr.uid != 0 && cr.uid != uid)
		return reg_refuse(EPERM, port, "runs as uid %ld, neither root nor ours, not trusted",
				  (long)cr.uid);
	return 0;
}

static int reg_send(const uint8_t *msg, uid_t uid)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(struct ucred))];
	} ctl;
	struct iovec iov = {.iov_base = (void *)msg, .iov_len = ULS_FAB_REG_LEN};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			    .msg_controllen = sizeof(ctl.buf)};
	struct ucred cr = {.pid = uls_pid(), .uid = uid, .gid = getegid()};

	memset(&ctl, 0, sizeof(ctl));
	ctl.h.cmsg_level = SOL_SOCKET;
	ctl.h.cmsg_type = SCM_CREDENTIALS;
	ctl.h.cmsg_len = CMSG_LEN(sizeof(cr));
	memcpy(CMSG_DATA(&ctl.h), &cr, sizeof(cr));
	if (uls_libc.sendmsg(reg_fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		return -errno;
	return 0;
}

int uls_fab_dir_register(const struct uls_fab_reg *r, uint16_t port, char *why, size_t wlen)
{
	uint8_t msg[ULS_FAB_REG_LEN];
	uid_t uid = geteuid();
	int err = 0;

	if (uls_fab_reg_pack(msg, r) < 0) {
		snprintf(why, wlen, "REG not encodable");
		return -EINVAL;
	}
	pthread_mutex_lock(&reg_mu);
	if (reg_fd >= 0 && reg_pid != uls_pid())
		uls_own_fd_close(&reg_fd); /* the parent's, inherited by fork */
	if (reg_fd >= 0 && (reg_uid != uid || reg_port != port))
		uls_own_fd_close(&reg_fd);
	/* A connection fabricd closed (it restarted) is opened again once. */
	for (int tries = 0; tries < 2; tries++) {
		err = reg_fd >= 0 ? 0 : reg_open(port, uid);
		if (err == 0)
			err = reg_send(msg, uid);
		if (err != -EPIPE && err != -ECONNRESET && err != -ENOTCONN)
			break;
		uls_own_fd_close(&reg_fd);
		reg_retry_ns = 0;
	}
	if (err == -EAGAIN || err == -EWOULDBLOCK)
		snprintf(why, wlen, "fabricd @ulsock-fabricd.%u: queue full, REG dropped", port);
	else if (err && reg_fd < 0 && reg_why[0])
		snprintf(why, wlen, "%s", reg_why);
	else if (err)
		snprintf(why, wlen, "fabricd @ulsock-fabricd.%u: %s", port, strerror(-err));
	pthread_mutex_unlock(&reg_mu);
	return err;
}

#endif /* ULS_FAB_DIR_CODEC_ONLY */
