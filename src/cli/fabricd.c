/* SPDX-License-Identifier: MIT */
/*
 * `ulsock fabricd`: the directory service of the fabric transport (docs/protocol.md 9.3).
 *
 * One thread on epoll, every descriptor non-blocking. Local processes send a REG for each
 * socket they accept on a SOCK_SEQPACKET unix socket; fabricd keeps it for a second once
 * the kernel (sock_diag) confirms that the sender's uid owns that very socket. Clients
 * connect to the TCP port, get a BANNER, send one HELLO and get the matching REG's OFFER
 * or a NO. Everything read is untrusted: fixed sizes, checked before use, and every table
 * is bounded (9.3's limits), so no input grows memory without bound or stops the loop.
 */
#include "fabricd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../transport/fabric/dir.h"

/* 9.3's limits. */
#define SIDE_MAX 1024
#define SIDE_PER_SRC 256
#define HELLO_RATE 2000
#define HELLO_BURST 4000
#define UNIX_PER_UID 64
#define UNIX_MAX 1024
#define REG_PER_UID 16384
#define REG_MAX 65536
#define REG_RATE 10000
#define NS 1000000000ull
/* How long a side connection waits for its HELLO, and a HELLO for its REG: a server's
 * first connection loads libfabric (about 300 ms here) before it registers, and the
 * client's library steps its side connection in its program's calls. 1 s each lost
 * handshakes on a loaded host (load average 6 on 2 vCPUs: 'no HELLO within 1 s' in runs
 * of 1,000 connections, NOT_REGISTERED for a server's first); the client waits 5 s for
 * the answer (dir.h), longer than the REG. */
#define HELLO_NS (3 * NS)
#define WAIT_NS (3 * NS)
/* How long a REG waits for its HELLO: as long as the server waits for the CONNECT by
 * default (ULSOCK_FABRIC_WAIT_MS), for a client that asks late (it connected without
 * blocking, then slept). */
#define REG_LIFE_NS (10 * NS)
/* Source addresses remembered for their HELLO rate; past this new ones are refused. */
#define SRC_MAX 8192
#define HASH_BUCKETS 4096

enum kind { K_TCP_LISTEN, K_UNIX_LISTEN, K_SIGNAL, K_SIDE, K_UNIX, K_DEAD };

/*
 * The head of what epoll's data.ptr points to. A connection closed while the events of
 * one epoll_wait are handled may still have an event further down the list: it becomes
 * K_DEAD and is freed only after the batch.
 */
struct obj {
	int kind;
	struct obj *dead;
};

struct bucket {
	double tokens;
	uint64_t at;
};

struct src {
	struct src *next;
	uint8_t addr[16];
	int conns;
	struct bucket hello;
};

struct uident {
	struct uident *next;
	uid_t uid;
	int conns, regs;
	struct bucket rate;
};

struct reg {
	struct reg *hnext;         /* hash chain */
	struct reg *prev, *next;   /* age list, oldest first (every REG lives 10 s) */
	uint64_t expires;
	struct uident *owner;
	struct uls_fab_reg r;
};

enum side_state { SIDE_HELLO, SIDE_WAIT };

struct side {
	struct obj o; /* first */
	int fd;
	int state;
	uint64_t deadline;
	struct src *src;
	uint8_t peer[16], local[16];
	uint8_t nd[ULS_FAB_NONCE_LEN];
	uint8_t buf[ULS_FAB_HELLO_LEN + 1];
	size_t got;
	struct uls_fab_tuple tuple;
};

struct ucon {
	struct obj o; /* first */
	int fd;
	struct uident *u;
};

static struct {
	int ep, tcp, unx, sig, diag;
	struct obj kinds[3]; /* data.ptr targets of the listeners and the signalfd */
	struct obj *dead;
	struct side *side[SIDE_MAX];
	int nside, nwait, nunix;
	struct src *src[HASH_BUCKETS];
	int nsrc;
	struct uident *uid[HASH_BUCKETS];
	struct reg *reg[HASH_BUCKETS];
	struct reg *oldest, *newest;
	int nreg;
	uint32_t diag_seq;
	uint64_t log_window;
	int log_lines, log_dropped;
} d;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NS + (uint64_t)ts.tv_nsec;
}

/* At most 20 lines a second, so a flood of rejected input cannot flood the log. */
__attribute__((format(printf, 1, 2))) static void say(const char *fmt, ...)
{
	uint64_t now = now_ns();
	va_list ap;

	if (now - d.log_window >= NS) {
		if (d.log_dropped)
			fprintf(stderr, "fabricd: %d more lines not shown\n", d.log_dropped);
		d.log_window = now;
		d.log_lines = d.log_dropped = 0;
	}
	if (d.log_lines++ >= 20) {
		d.log_dropped++;
		return;
	}
	fprintf(stderr, "fabricd: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static const char *addr_str(const uint8_t *a16, char *buf, size_t len)
{
	if (IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)a16))
		return inet_ntop(AF_INET, a16 + 12, buf, (socklen_t)len);
	return inet_ntop(AF_INET6, a16, buf, (socklen_t)len);
}

static int bucket_take(struct bucket *b, double rate, double burst, uint64_t now)
{
	b->tokens += (double)(now - b->at) * rate / (double)NS;
	if (b->tokens > burst)
		b->tokens = burst;
	b->at = now;
	if (b->tokens < 1.0)
		return 0;
	b->tokens -= 1.0;
	return 1;
}

static uint32_t hash_bytes(const uint8_t *p, size_t n)
{
	uint32_t h = 2166136261u; /* FNV-1a: the tables hold at most a few thousand keys */

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	return h % HASH_BUCKETS;
}

static void bury(struct obj *o)
{
	o->kind = K_DEAD;
	o->dead = d.dead;
	d.dead = o;
}

static void free_dead(void)
{
	while (d.dead) {
		struct obj *o = d.dead;
		d.dead = o->dead;
		free(o);
	}
}

/* ------------------------------------------------------------------ sources and uids */

static struct src *src_get(const uint8_t *addr, uint64_t now)
{
	uint32_t h = hash_bytes(addr, 16);
	struct src *s;

	for (s = d.src[h]; s; s = s->next)
		if (!memcmp(s->addr, addr, 16))
			return s;
	if (d.nsrc >= SRC_MAX || !(s = calloc(1, sizeof(*s))))
		return NULL;
	memcpy(s->addr, addr, 16);
	s->hello.tokens = HELLO_BURST;
	s->hello.at = now;
	s->next = d.src[h];
	d.src[h] = s;
	d.nsrc++;
	return s;
}

/* Forgets sources with no connection whose bucket has refilled: they are new again. */
static void src_sweep(uint64_t now)
{
	for (int h = 0; h < HASH_BUCKETS; h++) {
		for (struct src **pp = &d.src[h], *s; (s = *pp);) {
			if (s->conns == 0 && now - s->hello.at > 2 * NS) {
				*pp = s->next;
				free(s);
				d.nsrc--;
			} else {
				pp = &s->next;
			}
		}
	}
}

static struct uident *uid_get(uid_t uid, uint64_t now)
{
	uint32_t h = hash_bytes((const uint8_t *)&uid, sizeof(uid));
	struct uident *u;

	for (u = d.uid[h]; u; u = u->next)
		if (u->uid == uid)
			return u;
	if (!(u = calloc(1, sizeof(*u))))
		return NULL;
	u->uid = uid;
	u->rate.tokens = REG_RATE;
	u->rate.at = now;
	u->next = d.uid[h];
	d.uid[h] = u;
	return u;
}

/* A uid with no connection and no REG left is forgotten (at most 1024 have either). */
static void uid_put(struct uident *u)
{
	uint32_t h = hash_bytes((const uint8_t *)&u->uid, sizeof(u->uid));

	if (u->conns || u->regs)
		return;
	for (struct uident **pp = &d.uid[h]; *pp; pp = &(*pp)->next) {
		if (*pp == u) {
			*pp = u->next;
			free(u);
			return;
		}
	}
}

/* ------------------------------------------------------------------------ sock_diag */

static void diag_addr(uint32_t *dst, const uint8_t *a16, int family)
{
	memcpy(dst, family == AF_INET ? a16 + 12 : a16, family == AF_INET ? 4 : 16);
}

/*
 * The TCP socket whose local end is the tuple's server and remote end its client, looked
 * up as family. Returns 0 with its state, uid, inode and cookie, or -1.
 */
static int diag_find(const struct uls_fab_tuple *t, int family, struct inet_diag_msg *out)
{
	struct {
		struct nlmsghdr nh;
		struct inet_diag_req_v2 req;
	} q;
	union {
		struct nlmsghdr nh;
		char buf[1024];
	} rep;
	struct sockaddr_nl nl = {.nl_family = AF_NETLINK};
	uint32_t seq = ++d.diag_seq;

	memset(&q, 0, sizeof(q));
	q.nh.nlmsg_len = sizeof(q);
	q.nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	q.nh.nlmsg_flags = NLM_F_REQUEST;
	q.nh.nlmsg_seq = seq;
	q.req.sdiag_family = (uint8_t)family;
	q.req.sdiag_protocol = IPPROTO_TCP;
	q.req.idiag_states = ~0u;
	q.req.id.idiag_sport = htons((uint16_t)(t->b[34] | t->b[35] << 8));
	q.req.id.idiag_dport = htons((uint16_t)(t->b[32] | t->b[33] << 8));
	diag_addr(q.req.id.idiag_src, t->b + 16, family);
	diag_addr(q.req.id.idiag_dst, t->b, family);
	q.req.id.idiag_cookie[0] = q.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
	if (sendto(d.diag, &q, sizeof(q), 0, (struct sockaddr *)&nl, sizeof(nl)) < 0)
		return -1;
	/* The kernel answers an exact lookup before sendto returns; stale replies are skipped. */
	for (int i = 0; i < 8; i++) {
		ssize_t n = recv(d.diag, &rep, sizeof(rep), MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < (ssize_t)sizeof(struct nlmsghdr))
			return -1;
		if (rep.nh.nlmsg_seq != seq)
			continue;
		if (rep.nh.nlmsg_type != SOCK_DIAG_BY_FAMILY ||
		    (size_t)n < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
			return -1;
		memcpy(out, NLMSG_DATA(&rep.nh), sizeof(*out));
		return 0;
	}
	return -1;
}

/* Does the kernel still show r's socket ESTABLISHED, of uid, with r's inode and cookie? */
static const char *reg_check(const struct uls_fab_reg *r, uid_t uid)
{
	struct inet_diag_msg m;
	uint64_t cookie;

	if (diag_find(&r->tuple, r->family == 4 ? AF_INET : AF_INET6, &m) < 0)
		return "no such socket";
	cookie = (uint64_t)m.id.idiag_cookie[0] | (uint64_t)m.id.idiag_cookie[1] << 32;
	if (m.idiag_state != TCP_ESTABLISHED)
		return "socket not established";
	if (m.idiag_uid != uid)
		return "socket of another uid";
	if (m.idiag_inode != r->inode || cookie != r->cookie)
		return "inode or cookie differs";
	return NULL;
}

/* ----------------------------------------------------------------------------- REGs */

static struct reg **reg_slot(const struct uls_fab_tuple *t)
{
	struct reg **pp = &d.reg[hash_bytes(t->b, sizeof(t->b))];

	while (*pp && memcmp((*pp)->r.tuple.b, t->b, sizeof(t->b)))
		pp = &(*pp)->hnext;
	return pp;
}

static void reg_drop(struct reg *g)
{
	struct reg **pp = reg_slot(&g->r.tuple);

	if (*pp == g)
		*pp = g->hnext;
	if (g->prev)
		g->prev->next = g->next;
	else
		d.oldest = g->next;
	if (g->next)
		g->next->prev = g->prev;
	else
		d.newest = g->prev;
	g->owner->regs--;
	uid_put(g->owner);
	d.nreg--;
	free(g);
}

static void reg_expire(uint64_t now)
{
	while (d.oldest && d.oldest->expires <= now)
		reg_drop(d.oldest);
}

/* ---------------------------------------------------------------- side connections */

static void side_close(struct side *s)
{
	for (int i = 0; i < d.nside; i++) {
		if (d.side[i] == s) {
			d.side[i] = d.side[--d.nside];
			break;
		}
	}
	if (s->state == SIDE_WAIT)
		d.nwait--;
	s->src->conns--;
	close(s->fd);
	bury(&s->o);
}

/* Sends one answer (a fresh socket's buffer holds it) and closes the side connection. */
static void side_answer(struct side *s, const void *msg, size_t len)
{
	char a[INET6_ADDRSTRLEN];

	if (send(s->fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)len)
		say("%s: answer not sent", addr_str(s->peer, a, sizeof(a)));
	side_close(s);
}

static void side_no(struct side *s, uint32_t reason)
{
	uint8_t msg[ULS_FAB_NO_LEN];

	uls_fab_no_pack(msg, reason);
	side_answer(s, msg, sizeof(msg));
}

/* One OFFER per REG: the REG is consumed whether or not its socket still checks out. */
static void side_offer(struct side *s, struct reg *g)
{
	uint8_t msg[ULS_FAB_OFFER_LEN];
	char a[INET6_ADDRSTRLEN];
	const char *bad = reg_check(&g->r, g->owner->uid);

	if (bad || uls_fab_offer_pack(msg, &g->r.where) < 0) {
		say("%s: REG no longer valid (%s)", addr_str(s->peer, a, sizeof(a)),
		    bad ? bad : "not encodable");
		reg_drop(g);
		side_no(s, ULS_FAB_NO_NOT_REGISTERED);
		return;
	}
	reg_drop(g);
	side_answer(s, msg, sizeof(msg));
}

static void side_reject(struct side *s, const char *why)
{
	char a[INET6_ADDRSTRLEN];

	say("%s: side connection closed: %s", addr_str(s->peer, a, sizeof(a)), why);
	side_close(s);
}

static void side_hello(struct side *s, uint64_t now)
{
	struct uls_fab_hello h;
	struct reg *g;

	if (uls_fab_hello_parse(s->buf, s->got, &h) < 0) {
		side_reject(s, "malformed HELLO");
		return;
	}
	if (memcmp(h.nd, s->nd, sizeof(h.nd))) {
		side_reject(s, "HELLO with another Nd");
		return;
	}
	if (!bucket_take(&s->src->hello, HELLO_RATE, HELLO_BURST, now)) {
		side_no(s, ULS_FAB_NO_BUSY);
		return;
	}
	if (memcmp(h.tuple.b, s->peer, 16) || memcmp(h.tuple.b + 16, s->local, 16)) {
		side_no(s, ULS_FAB_NO_TUPLE_MISMATCH);
		return;
	}
	s->tuple = h.tuple;
	g = *reg_slot(&s->tuple);
	if (g) {
		side_offer(s, g);
		return;
	}
	s->state = SIDE_WAIT;
	s->deadline = now + WAIT_NS;
	d.nwait++;
}

/* Reads the HELLO, and nothing after it: one byte more closes the side connection. */
static void side_input(struct side *s, uint64_t now)
{
	size_t room = sizeof(s->buf) - s->got;
	ssize_t n = recv(s->fd, s->buf + s->got, room, MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		side_reject(s, n == 0 ? "closed before the answer" : strerror(errno));
		return;
	}
	if (s->state == SIDE_WAIT) {
		side_reject(s, "bytes after the HELLO");
		return;
	}
	s->got += (size_t)n;
	if (s->got > ULS_FAB_HELLO_LEN) {
		side_reject(s, "bytes after the HELLO");
		return;
	}
	if (s->got == ULS_FAB_HELLO_LEN)
		side_hello(s, now);
}

static void side_accept(int lfd, uint64_t now)
{
	struct sockaddr_storage peer, local;
	socklen_t plen = sizeof(peer), llen = sizeof(local);
	uint8_t banner[ULS_FAB_BANNER_LEN];
	struct uls_fab_banner b = {.min_version = 1, .max_version = 1};
	struct uls_fab_tuple t;
	char a[INET6_ADDRSTRLEN];
	struct epoll_event ev = {.events = EPOLLIN};
	struct side *s;
	struct src *src;
	int fd;

	while ((fd = accept4(lfd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC)) >=
	       0) {
		plen = sizeof(peer);
		llen = sizeof(local);
		if (getsockname(fd, (struct sockaddr *)&local, &llen) < 0 ||
		    uls_fab_tuple_make(&t, (struct sockaddr *)&peer, (struct sockaddr *)&local) < 0) {
			close(fd);
			continue;
		}
		src = src_get(t.b, now);
		if (d.nside >= SIDE_MAX || !src || src->conns >= SIDE_PER_SRC) {
			say("%s: side connection refused (%s)", addr_str(t.b, a, sizeof(a)),
			    d.nside >= SIDE_MAX ? "1024 open" : "limit per source address");
			close(fd);
			continue;
		}
		if (!(s = calloc(1, sizeof(*s)))) {
			close(fd);
			continue;
		}
		s->o.kind = K_SIDE;
		s->fd = fd;
		s->src = src;
		s->state = SIDE_HELLO;
		s->deadline = now + HELLO_NS;
		memcpy(s->peer, t.b, 16);
		memcpy(s->local, t.b + 16, 16);
		src->conns++;
		d.side[d.nside++] = s;
		if (getrandom(s->nd, sizeof(s->nd), GRND_NONBLOCK) != sizeof(s->nd)) {
			side_reject(s, "no random bytes");
			continue;
		}
		memcpy(b.nd, s->nd, sizeof(b.nd));
		uls_fab_banner_pack(banner, &b);
		ev.data.ptr = s;
		if (send(fd, banner, sizeof(banner), MSG_DONTWAIT | MSG_NOSIGNAL) !=
			    (ssize_t)sizeof(banner) ||
		    epoll_ctl(d.ep, EPOLL_CTL_ADD, fd, &ev) < 0)
			side_reject(s, "banner not sent");
	}
}

/* ----------------------------------------------------------------- unix connections */

static void ucon_close(struct ucon *c)
{
	close(c->fd);
	c->u->conns--;
	uid_put(c->u);
	d.nunix--;
	bury(&c->o);
}

static void unix_accept(int lfd, uint64_t now)
{
	struct epoll_event ev = {.events = EPOLLIN};
	struct ucred cr;
	socklen_t len = sizeof(cr);
	struct uident *u;
	struct ucon *c;
	int fd, one = 1;

	while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		len = sizeof(cr);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 ||
		    setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) < 0 ||
		    !(u = uid_get(cr.uid, now))) {
			close(fd);
			continue;
		}
		if (d.nunix >= UNIX_MAX || u->conns >= UNIX_PER_UID || !(c = calloc(1, sizeof(*c)))) {
			say("uid %u: unix connection refused (limit)", (unsigned)cr.uid);
			uid_put(u);
			close(fd);
			continue;
		}
		c->o.kind = K_UNIX;
		c->fd = fd;
		c->u = u;
		u->conns++;
		d.nunix++;
		ev.data.ptr = c;
		if (epoll_ctl(d.ep, EPOLL_CTL_ADD, fd, &ev) < 0)
			ucon_close(c);
	}
}

/* A REG arrived for a tuple a side connection waits for: answer it now. */
static void reg_wake(struct reg *g)
{
	for (int i = 0; i < d.nside && d.nwait; i++) {
		struct side *s = d.side[i];
		if (s->state == SIDE_WAIT && !memcmp(s->tuple.b, g->r.tuple.b, ULS_FAB_TUPLE_LEN)) {
			side_offer(s, g);
			return;
		}
	}
}

static const char *reg_admit(struct ucon *c, const uint8_t *msg, size_t n, uint64_t now)
{
	struct reg *g, **pp;
	const char *bad;

	if (!bucket_take(&c->u->rate, REG_RATE, REG_RATE, now))
		return "more than 10,000 REGs a second";
	if (!(g = calloc(1, sizeof(*g))))
		return "out of memory";
	if (uls_fab_reg_parse(msg, n, &g->r) < 0)
		bad = "malformed REG";
	else
		bad = reg_check(&g->r, c->u->uid);
	pp = bad ? NULL : reg_slot(&g->r.tuple);
	if (pp && *pp)
		reg_drop(*pp); /* a newer REG for the same 4-tuple replaces the older */
	if (!bad && (c->u->regs >= REG_PER_UID || d.nreg >= REG_MAX))
		bad = "too many live REGs";
	if (bad) {
		free(g);
		return bad;
	}
	pp = reg_slot(&g->r.tuple);
	*pp = g;
	g->owner = c->u;
	g->expires = now + REG_LIFE_NS;
	g->prev = d.newest;
	if (d.newest)
		d.newest->next = g;
	else
		d.oldest = g;
	d.newest = g;
	c->u->regs++;
	d.nreg++;
	reg_wake(g);
	return NULL;
}

/* Takes the credentials of a message; closes any descriptor passed with it. */
static int msg_uid(struct msghdr *mh, uid_t *uid)
{
	int found = 0;

	for (struct cmsghdr *h = CMSG_FIRSTHDR(mh); h; h = CMSG_NXTHDR(mh, h)) {
		if (h->cmsg_level != SOL_SOCKET)
			continue;
		if (h->cmsg_type == SCM_CREDENTIALS && h->cmsg_len == CMSG_LEN(sizeof(struct ucred))) {
			struct ucred cr;
			memcpy(&cr, CMSG_DATA(h), sizeof(cr));
			*uid = cr.uid;
			found = 1;
		} else if (h->cmsg_type == SCM_RIGHTS) {
			size_t nfd = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < nfd; i++) {
				int fd;
				memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
				close(fd);
			}
		}
	}
	return found;
}

static void unix_input(struct ucon *c, uint64_t now)
{
	uint8_t msg[ULS_FAB_REG_LEN + 1];
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(16 * sizeof(int))];
	} ctl;
	const char *bad;
	uid_t uid;

	/* A bounded batch, so that one busy process cannot hold the loop. */
	for (int i = 0; i < 64; i++) {
		struct iovec iov = {.iov_base = msg, .iov_len = sizeof(msg)};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
				    .msg_controllen = sizeof(ctl.buf)};
		ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0) {
			ucon_close(c);
			return;
		}
		bad = NULL;
		if (!msg_uid(&mh, &uid) || uid != c->u->uid)
			bad = "credentials missing or not the connection's uid";
		else if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
			bad = "message too long";
		else
			bad = reg_admit(c, msg, (size_t)n, now);
		if (bad)
			say("uid %u: REG dropped: %s", (unsigned)c->u->uid, bad);
	}
}

/* ------------------------------------------------------------------------ the loop */

/* Side connections past their deadline; returns the next deadline (0: none). */
static uint64_t timers(uint64_t now)
{
	uint64_t next = 0;

	for (int i = 0; i < d.nside;) {
		struct side *s = d.side[i];
		if (s->deadline <= now) {
			if (s->state == SIDE_WAIT)
				side_no(s, ULS_FAB_NO_NOT_REGISTERED);
			else
				side_reject(s, "no HELLO within 3 s");
			continue; /* the slot now holds another connection */
		}
		if (!next || s->deadline < next)
			next = s->deadline;
		i++;
	}
	if (d.oldest && (!next || d.oldest->expires < next))
		next = d.oldest->expires;
	return next;
}

static int run_loop(void)
{
	struct epoll_event ev[64];
	uint64_t last_sweep = now_ns();

	for (;;) {
		uint64_t now = now_ns(), next;
		int n, timeout = 1000;

		free_dead();
		reg_expire(now);
		next = timers(now);
		if (next)
			timeout = (int)((next - now) / 1000000 + 1);
		if (timeout > 1000)
			timeout = 1000;
		if (now - last_sweep > 2 * NS) {
			src_sweep(now);
			last_sweep = now;
		}
		n = epoll_wait(d.ep, ev, 64, timeout);
		if (n < 0 && errno != EINTR)
			return 1;
		now = now_ns();
		for (int i = 0; i < n; i++) {
			int kind = ((struct obj *)ev[i].data.ptr)->kind;
			if (kind == K_SIGNAL)
				return 0;
			if (kind == K_TCP_LISTEN)
				side_accept(d.tcp, now);
			else if (kind == K_UNIX_LISTEN)
				unix_accept(d.unx, now);
			else if (kind == K_SIDE)
				side_input(ev[i].data.ptr, now);
			else if (kind == K_UNIX)
				unix_input(ev[i].data.ptr, now);
		}
	}
}

/* -------------------------------------------------------------------------- setup */

/* A listener of systemd's socket activation (LISTEN_FDS), if it passed a TCP one. */
static int activated_tcp(void)
{
	const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
	int n = fds ? atoi(fds) : 0, type, found = -1;
	socklen_t len = sizeof(type);

	if (!pid || atol(pid) != (long)getpid())
		return -1;
	for (int fd = 3; fd < 3 + n && n < 64; fd++) {
		len = sizeof(type);
		if (found < 0 && getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 &&
		    type == SOCK_STREAM) {
			found = fd;
			fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
			fcntl(fd, F_SETFD, FD_CLOEXEC);
		}
	}
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	return found;
}

/* TCP on every address, IPv4 as mapped on a dual-stack socket where IPv6 exists. */
static int listen_tcp(uint16_t port)
{
	struct sockaddr_in6 s6 = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
	struct sockaddr_in s4 = {.sin_family = AF_INET, .sin_port = htons(port)};
	int one = 1, zero = 0;
	int fd = socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd >= 0) {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		if (bind(fd, (struct sockaddr *)&s6, sizeof(s6)) == 0 && listen(fd, 1024) == 0)
			return fd;
		close(fd);
		if (errno == EADDRINUSE)
			return -1;
	}
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&s4, sizeof(s4)) == 0 && listen(fd, 1024) == 0)
		return fd;
	close(fd);
	return -1;
}

static int listen_unix(uint16_t port)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	int one = 1, n, fd;

	n = snprintf(sun.sun_path + 1, sizeof(sun.sun_path) - 1, "ulsock-fabricd.%u", port);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sun,
		 (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) == 0 &&
	    listen(fd, 1024) == 0)
		return fd;
	close(fd);
	return -1;
}

static int watch(int fd, struct obj *o, int k)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = o};

	o->kind = k;
	return epoll_ctl(d.ep, EPOLL_CTL_ADD, fd, &ev);
}

static int setup(uint16_t port)
{
	sigset_t set;
	struct timeval tv = {.tv_usec = 100000};

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	d.sig = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	d.ep = epoll_create1(EPOLL_CLOEXEC);
	d.diag = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (d.sig < 0 || d.ep < 0 || d.diag < 0) {
		fprintf(stderr, "fabricd: setup failed: %s\n", strerror(errno));
		return -1;
	}
	setsockopt(d.diag, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	d.tcp = activated_tcp();
	if (d.tcp < 0)
		d.tcp = listen_tcp(port);
	if (d.tcp < 0) {
		fprintf(stderr, "fabricd: cannot listen on TCP port %u: %s\n", port, strerror(errno));
		return -1;
	}
	d.unx = listen_unix(port);
	if (d.unx < 0) {
		fprintf(stderr, "fabricd: cannot bind @ulsock-fabricd.%u: %s\n", port,
			strerror(errno));
		return -1;
	}
	if (watch(d.tcp, &d.kinds[0], K_TCP_LISTEN) < 0 ||
	    watch(d.unx, &d.kinds[1], K_UNIX_LISTEN) < 0 || watch(d.sig, &d.kinds[2], K_SIGNAL) < 0)
		return -1;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: ulsock fabricd [--port N] [--foreground]\n"
		   "The fabric transport's directory service (docs/protocol.md 9.3): TCP port N\n"
		   "(default ULSOCK_FABRIC_PORT, else %u) and the unix socket\n"
		   "@ulsock-fabricd.N. Without --foreground it detaches once listening.\n",
		ULS_FAB_DIR_PORT);
}

static int parse_port(const char *s, uint16_t *port)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 1 || v > 65535)
		return -1;
	*port = (uint16_t)v;
	return 0;
}

int uls_fabricd_main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"port", required_argument, NULL, 'p'},
		{"foreground", no_argument, NULL, 'f'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *env = getenv("ULSOCK_FABRIC_PORT");
	uint16_t port = ULS_FAB_DIR_PORT;
	int fg = 0, c;

	if (env && *env && parse_port(env, &port) < 0) {
		fprintf(stderr, "fabricd: ULSOCK_FABRIC_PORT='%s' is not a port\n", env);
		return 2;
	}
	while ((c = getopt_long(argc, argv, "p:fh", opts, NULL)) != -1) {
		if (c == 'p' && parse_port(optarg, &port) == 0)
			continue;
		if (c == 'f') {
			fg = 1;
			continue;
		}
		usage(c == 'h' ? stdout : stderr);
		return c == 'h' ? 0 : 2;
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	if (setup(port) < 0)
		return 1;
	if (!fg && daemon(0, 1) < 0) {
		fprintf(stderr, "fabricd: cannot detach: %s\n", strerror(errno));
		return 1;
	}
	/* On stdout, for whoever waits for it to be ready (the tests). */
	printf("fabricd: listening on TCP port %u and @ulsock-fabricd.%u\n", port, port);
	fflush(stdout);
	return run_loop();
}
