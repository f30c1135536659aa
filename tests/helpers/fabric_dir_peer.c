/* SPDX-License-Identifier: MIT */
/*
 * The peers test_fabricd.py needs around a real fabricd. Unlike the other helpers it links
 * the core (for transport/fabric/dir.c), and it is never preloaded. Every wait is bounded
 * (10 s); results are printed as one line of KEY=VALUE words.
 *
 *   server ADDR DIRPORT [--key] [--no-reg]   listen on ADDR (port 0), print READY port=P,
 *       accept one connection, register it (REG ns=... sent / REG failed: why), print its
 *       SOCK tuple, inode, cookie, and hold it until the peer closes
 *   client ADDR PORT DIRPORT                 connect to ADDR:PORT, then run the client's
 *       directory exchange to (ADDR, DIRPORT): DONE ... or FAILED why=...
 *   raw ADDR DIRPORT HELLO [CLIENT SERVER]   connect to fabricd, print the BANNER, send the
 *       HELLO of kind ok|badnd|garbage|trailing|none for the 4-tuple CLIENT SERVER (a.b.c.d:p;
 *       default: this side connection's own), print the answer or CLOSED
 *   forge DIRPORT CLIENT SERVER INODE COOKIE send a REG for that socket as this user
 *   hold ADDR PORT                           connect, print CONNECTED, hold until EOF
 *   listen ADDR [SPEAK]                      an unrelated service: print READY port=P,
 *       accept one connection, send SPEAK, count the bytes it receives until EOF: RECEIVED n
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "os/libc.h"
#include "transport/fabric/dir.h"

#define WAIT_MS 10000

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
	printf("ERROR %s: %s\n", what, strerror(errno));
	exit(2);
}

static void hex(const char *key, const uint8_t *p, size_t n)
{
	printf(" %s=", key);
	for (size_t i = 0; i < n; i++)
		printf("%02x", p[i]);
}

/* a.b.c.d:port */
static void parse_sa(const char *s, struct sockaddr_in *sa)
{
	char host[64];
	const char *colon = strrchr(s, ':');

	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	if (!colon || (size_t)(colon - s) >= sizeof(host))
		exit(2);
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = 0;
	if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
		exit(2);
	sa->sin_port = htons((uint16_t)atoi(colon + 1));
}

static int tcp_connect(const char *addr, int port)
{
	struct sockaddr_in sa;
	char buf[80];
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(buf, sizeof(buf), "%s:%d", addr, port);
	parse_sa(buf, &sa);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("connect");
	return fd;
}

static int tcp_listen(const char *addr)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	char buf[80];
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(buf, sizeof(buf), "%s:0", addr);
	parse_sa(buf, &sa);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 8) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
		die("listen");
	printf("READY port=%u\n", ntohs(sa.sin_port));
	fflush(stdout);
	return fd;
}

/* Reads until n bytes, EOF or the bound; returns the count. */
static size_t read_full(int fd, uint8_t *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, WAIT_MS) <= 0)
			break;
		ssize_t r = recv(fd, buf + got, n - got, 0);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return got;
}

/* Until EOF (or the bound): how many bytes came. */
static size_t drain(int fd)
{
	uint8_t buf[4096];
	size_t total = 0, r;

	while ((r = read_full(fd, buf, sizeof(buf))) > 0) {
		total += r;
		if (r < sizeof(buf))
			break;
	}
	return total;
}

static void print_sock(int fd, const struct uls_fab_reg *r)
{
	char a[2][INET6_ADDRSTRLEN];
	struct sockaddr_in6 c, s;

	uls_fab_tuple_addr(&r->tuple, 0, &c);
	uls_fab_tuple_addr(&r->tuple, 1, &s);
	inet_ntop(AF_INET, &c.sin6_addr.s6_addr[12], a[0], sizeof(a[0]));
	inet_ntop(AF_INET, &s.sin6_addr.s6_addr[12], a[1], sizeof(a[1]));
	printf("SOCK client=%s:%u server=%s:%u inode=%llu cookie=%llu\n", a[0],
	       ntohs(c.sin6_port), a[1], ntohs(s.sin6_port), (unsigned long long)r->inode,
	       (unsigned long long)r->cookie);
}

static void fill_where(struct uls_fab_where *w, int key)
{
	if (getrandom(w->ns, sizeof(w->ns), 0) != sizeof(w->ns))
		die("getrandom");
	w->flags = key ? ULS_FAB_FLAG_KEY : 0;
	snprintf(w->provider, sizeof(w->provider), "tcp;ofi_rxm");
	snprintf(w->fabric, sizeof(w->fabric), "fabric-test");
	w->addr_len = 16;
	for (int i = 0; i < 16; i++)
		w->addr[i] = (uint8_t)(0xa0 + i);
}

static int do_server(int argc, char **argv)
{
	int lfd = tcp_listen(argv[0]), key = 0, reg = 1, fd;
	uint16_t dport = (uint16_t)atoi(argv[1]);
	struct uls_fab_reg r;
	char why[160];

	for (int i = 2; i < argc; i++) {
		key |= !strcmp(argv[i], "--key");
		reg &= !!strcmp(argv[i], "--no-reg");
	}
	fd = accept(lfd, NULL, NULL);
	if (fd < 0 || uls_fab_reg_from_socket(&r, fd) < 0)
		die("accept");
	print_sock(fd, &r);
	fill_where(&r.where, key);
	if (reg && uls_fab_dir_register(&r, dport, why, sizeof(why)) == 0) {
		printf("REG sent");
		hex("ns", r.where.ns, sizeof(r.where.ns));
		printf("\n");
	} else if (reg) {
		printf("REG failed: %s\n", why);
	}
	fflush(stdout);
	drain(fd);
	return 0;
}

static int do_client(char **argv)
{
	struct sockaddr_storage self, peer;
	socklen_t sl = sizeof(self), pl = sizeof(peer);
	struct uls_fab_dirq q;
	uint64_t end = mono_ns() + WAIT_MS * 1000000ull;
	int fd = tcp_connect(argv[0], atoi(argv[1])), r;

	if (getsockname(fd, (struct sockaddr *)&self, &sl) < 0 ||
	    getpeername(fd, (struct sockaddr *)&peer, &pl) < 0)
		die("getsockname");
	r = uls_fab_dirq_start(&q, (struct sockaddr *)&self, (struct sockaddr *)&peer,
			       (uint16_t)atoi(argv[2]), mono_ns());
	while (r == 0 && mono_ns() < end) {
		struct pollfd p = {.fd = q.fd, .events = q.events};
		uint64_t now = mono_ns();
		int ms = q.deadline_ns > now ? (int)((q.deadline_ns - now) / 1000000) + 1 : 0;
		poll(&p, 1, ms);
		r = uls_fab_dirq_step(&q, mono_ns());
	}
	if (r > 0) {
		printf("DONE provider=%s fabric=%s flags=%u", q.offer.provider, q.offer.fabric,
		       q.offer.flags);
		hex("ns", q.offer.ns, sizeof(q.offer.ns));
		hex("addr", q.offer.addr, q.offer.addr_len);
		printf("\n");
	} else {
		printf("FAILED why=%s\n", r < 0 ? q.why : "step never ended");
	}
	uls_fab_dirq_fini(&q);
	/* The fd of the finished exchange is closed: nothing of it is left open. */
	printf("OPEN_FD=%d\n", q.fd);
	return 0;
}

static int do_raw(int argc, char **argv)
{
	int fd = tcp_connect(argv[0], atoi(argv[1]));
	const char *kind = argv[2];
	uint8_t buf[ULS_FAB_OFFER_LEN + 1], msg[ULS_FAB_HELLO_LEN + 1];
	struct uls_fab_banner b;
	struct uls_fab_hello h;
	struct sockaddr_in c, s;
	socklen_t len = sizeof(c);
	size_t n = read_full(fd, buf, ULS_FAB_BANNER_LEN), mlen = ULS_FAB_HELLO_LEN;
	uint32_t reason;

	printf("BANNER bytes=%zu valid=%d\n", n, uls_fab_banner_parse(buf, n, &b) == 0);
	if (argc > 4) {
		parse_sa(argv[3], &c);
		parse_sa(argv[4], &s);
	} else if (getsockname(fd, (struct sockaddr *)&c, &len) < 0 ||
		   getpeername(fd, (struct sockaddr *)&s, &len) < 0) {
		die("getsockname");
	}
	memcpy(h.nd, b.nd, sizeof(h.nd));
	uls_fab_tuple_make(&h.tuple, (struct sockaddr *)&c, (struct sockaddr *)&s);
	if (!strcmp(kind, "badnd"))
		h.nd[3] ^= 1;
	uls_fab_hello_pack(msg, &h);
	if (!strcmp(kind, "garbage"))
		memset(msg, 'x', sizeof(msg));
	if (!strcmp(kind, "trailing"))
		msg[mlen++] = 0;
	if (strcmp(kind, "none") && send(fd, msg, mlen, MSG_NOSIGNAL) != (ssize_t)mlen)
		die("send");
	n = read_full(fd, buf, sizeof(buf));
	if (n == ULS_FAB_NO_LEN && uls_fab_no_parse(buf, n, &reason) == 0)
		printf("NO reason=%u\n", reason);
	else if (n == ULS_FAB_OFFER_LEN)
		printf("OFFER bytes=%zu\n", n);
	else
		printf("CLOSED bytes=%zu\n", n);
	return 0;
}

static int do_forge(char **argv)
{
	struct sockaddr_in c, s;
	struct uls_fab_reg r;
	char why[160];

	memset(&r, 0, sizeof(r));
	parse_sa(argv[1], &c);
	parse_sa(argv[2], &s);
	uls_fab_tuple_make(&r.tuple, (struct sockaddr *)&c, (struct sockaddr *)&s);
	r.family = 4;
	r.inode = strtoull(argv[3], NULL, 10);
	r.cookie = strtoull(argv[4], NULL, 10);
	fill_where(&r.where, 0);
	if (uls_fab_dir_register(&r, (uint16_t)atoi(argv[0]), why, sizeof(why)) == 0)
		printf("REG sent\n");
	else
		printf("REG failed: %s\n", why);
	return 0;
}

static int do_hold(char **argv)
{
	int fd = tcp_connect(argv[0], atoi(argv[1]));

	printf("CONNECTED\n");
	drain(fd);
	return 0;
}

static int do_listen(int argc, char **argv)
{
	int lfd = tcp_listen(argv[0]), fd = accept(lfd, NULL, NULL);

	if (fd < 0)
		die("accept");
	if (argc > 1 && send(fd, argv[1], strlen(argv[1]), MSG_NOSIGNAL) < 0)
		die("send");
	printf("RECEIVED %zu\n", drain(fd));
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	uls_libc_init();
	if (argc >= 4 && !strcmp(argv[1], "server"))
		return do_server(argc - 2, argv + 2);
	if (argc >= 5 && !strcmp(argv[1], "client"))
		return do_client(argv + 2);
	if (argc >= 5 && !strcmp(argv[1], "raw"))
		return do_raw(argc - 2, argv + 2);
	if (argc >= 7 && !strcmp(argv[1], "forge"))
		return do_forge(argv + 2);
	if (argc >= 4 && !strcmp(argv[1], "hold"))
		return do_hold(argv + 2);
	if (argc >= 3 && !strcmp(argv[1], "listen"))
		return do_listen(argc - 2, argv + 2);
	fprintf(stderr, "usage: see the top of fabric_dir_peer.c\n");
	return 2;
}
