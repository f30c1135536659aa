/* SPDX-License-Identifier: MIT */
/*
 * The sock_diag lookup behind the handshake, on real loopback connections made inside the
 * test process with plain libc sockets (no preload): the kernel must report the inode,
 * cookie and owner of exactly the socket named by a 4-tuple, in IPv4, IPv6 and on a
 * dual-stack listener. Also uls_addr_is_local, which never sends a packet.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "core/config.h"
#include "core/handshake.h"
#include "os/libc.h"

struct pair {
	int lfd, cfd, afd; /* listener, client, accepted */
	struct sockaddr_storage c_local, c_peer, a_local, a_peer;
};

static void get_names(int fd, struct sockaddr_storage *local, struct sockaddr_storage *peer)
{
	socklen_t len = sizeof(*local);

	CHECK_EQ(getsockname(fd, (struct sockaddr *)local, &len), 0);
	len = sizeof(*peer);
	CHECK_EQ(getpeername(fd, (struct sockaddr *)peer, &len), 0);
}

/*
 * Listens on `laddr` (port 0) and connects a client of family cfam to `caddr` at the
 * listener's port. Returns 0, or -errno from socket/bind when the family is unavailable.
 */
static int make_pair(struct pair *p, int lfam, const char *laddr, int v6only, int cfam,
		     const char *caddr)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int one = 1;

	memset(p, 0, sizeof(*p));
	memset(&ss, 0, sizeof(ss));
	if (lfam == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)&ss;
		s->sin_family = AF_INET;
		CHECK_EQ(inet_pton(AF_INET, laddr, &s->sin_addr), 1);
		len = sizeof(*s);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;
		s->sin6_family = AF_INET6;
		CHECK_EQ(inet_pton(AF_INET6, laddr, &s->sin6_addr), 1);
		len = sizeof(*s);
	}
	p->lfd = socket(lfam, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (p->lfd < 0)
		return -errno;
	setsockopt(p->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (lfam == AF_INET6)
		CHECK_EQ(setsockopt(p->lfd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only)),
			 0);
	if (bind(p->lfd, (struct sockaddr *)&ss, len) < 0) {
		int err = -errno;
		close(p->lfd);
		return err;
	}
	CHECK_EQ(listen(p->lfd, 4), 0);
	CHECK_EQ(getsockname(p->lfd, (struct sockaddr *)&ss, &len), 0);
	uint16_t port = lfam == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
					: ((struct sockaddr_in6 *)&ss)->sin6_port;

	memset(&ss, 0, sizeof(ss));
	if (cfam == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)&ss;
		s->sin_family = AF_INET;
		s->sin_port = port;
		CHECK_EQ(inet_pton(AF_INET, caddr, &s->sin_addr), 1);
		len = sizeof(*s);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = port;
		CHECK_EQ(inet_pton(AF_INET6, caddr, &s->sin6_addr), 1);
		len = sizeof(*s);
	}
	p->cfd = socket(cfam, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(p->cfd >= 0);
	CHECK_EQ(connect(p->cfd, (struct sockaddr *)&ss, len), 0);
	p->afd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
	CHECK(p->afd >= 0);
	get_names(p->cfd, &p->c_local, &p->c_peer);
	get_names(p->afd, &p->a_local, &p->a_peer);
	return 0;
}

static void close_pair(struct pair *p)
{
	close(p->cfd);
	close(p->afd);
	close(p->lfd);
}

/* The lookup of (self, other) must name exactly socket fd. */
static void expect_socket(const struct sockaddr_storage *self,
			  const struct sockaddr_storage *other, int fd)
{
	struct uls_sockid id;
	struct stat st;

	memset(&id, 0xff, sizeof(id));
	CHECK_EQ(fstat(fd, &st), 0);
	CHECK_EQ(uls_diag_lookup((const struct sockaddr *)self, (const struct sockaddr *)other,
				 &id),
		 0);
	CHECK_U64(id.ino, ==, st.st_ino);
	CHECK_U64(id.cookie, ==, uls_sock_cookie(fd));
	CHECK_U64(id.cookie, !=, 0);
	CHECK_INT(id.uid, ==, geteuid());
}

static void set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}

static uint16_t get_port(const struct sockaddr_storage *ss)
{
	return ntohs(ss->ss_family == AF_INET ? ((const struct sockaddr_in *)ss)->sin_port
					      : ((const struct sockaddr_in6 *)ss)->sin6_port);
}

/* Both ends of a connected pair, and tuples that name no socket. */
static void check_pair(struct pair *p)
{
	struct sockaddr_storage bad;
	struct uls_sockid id;

	expect_socket(&p->c_local, &p->c_peer, p->cfd);
	expect_socket(&p->a_local, &p->a_peer, p->afd);
	/* The two ends are distinct sockets with distinct cookies. */
	CHECK_U64(uls_sock_cookie(p->cfd), !=, uls_sock_cookie(p->afd));

	/* A port nobody uses on either side of the tuple. */
	bad = p->c_local;
	set_port(&bad, (uint16_t)(get_port(&p->c_local) ^ 0x5a5a) | 1);
	CHECK_INT(uls_diag_lookup((struct sockaddr *)&bad, (struct sockaddr *)&p->c_peer, &id),
		  ==, -ENOENT);
	bad = p->c_peer;
	set_port(&bad, 1);
	CHECK_INT(uls_diag_lookup((struct sockaddr *)&p->c_local, (struct sockaddr *)&bad, &id),
		  ==, -ENOENT);
}

static void test_ipv4(void)
{
	struct pair p;
	struct uls_sockid id;

	check_context("IPv4 127.0.0.1");
	CHECK_EQ(make_pair(&p, AF_INET, "127.0.0.1", 0, AF_INET, "127.0.0.1"), 0);
	check_pair(&p);
	/* After close, the tuple names nothing (the client lingers in TIME_WAIT at most,
	 * which has no inode): the lookup fails or reports no inode of ours. */
	struct sockaddr_storage cl = p.c_local, cp = p.c_peer;
	struct stat st;
	CHECK_EQ(fstat(p.cfd, &st), 0);
	close_pair(&p);
	int r = uls_diag_lookup((struct sockaddr *)&cl, (struct sockaddr *)&cp, &id);
	CHECK(r == -ENOENT || (r == 0 && id.ino != st.st_ino));
}

static void test_ipv6(void)
{
	struct pair p;
	int r;

	check_context("IPv6 ::1");
	r = make_pair(&p, AF_INET6, "::1", 1, AF_INET6, "::1");
	if (r < 0) {
		fprintf(stderr, "note: no IPv6 loopback (%s): IPv6 case skipped\n", strerror(-r));
		return;
	}
	check_pair(&p);
	close_pair(&p);
}

/* A dual-stack listener accepts an IPv4 client: the accepted socket's names are
 * v4-mapped, and the server looks up its peer with them, as server_attach does. */
static void test_dual_stack(void)
{
	struct pair p;
	int r;

	check_context("dual stack");
	r = make_pair(&p, AF_INET6, "::", 0, AF_INET, "127.0.0.1");
	if (r < 0) {
		fprintf(stderr, "note: no IPv6 (%s): dual-stack case skipped\n", strerror(-r));
		return;
	}
	CHECK_INT(p.a_local.ss_family, ==, AF_INET6);
	CHECK(IN6_IS_ADDR_V4MAPPED(&((struct sockaddr_in6 *)&p.a_local)->sin6_addr));
	CHECK(IN6_IS_ADDR_V4MAPPED(&((struct sockaddr_in6 *)&p.a_peer)->sin6_addr));
	CHECK_INT(p.c_local.ss_family, ==, AF_INET);
	/* The server's view: self = the client's address, other = the server's. */
	expect_socket(&p.a_peer, &p.a_local, p.cfd);
	/* And the accepted (IPv6) socket through its own mapped names. */
	expect_socket(&p.a_local, &p.a_peer, p.afd);
	/* The client's plain IPv4 names still work. */
	check_pair(&p);
	/* A mapped tuple that names nothing is not found by either family's query. */
	struct sockaddr_storage bad = p.a_peer;
	struct uls_sockid id;
	set_port(&bad, 1);
	CHECK_INT(uls_diag_lookup((struct sockaddr *)&bad, (struct sockaddr *)&p.a_local, &id),
		  ==, -ENOENT);
	CHECK(uls_addr_is_local((struct sockaddr *)&p.a_peer));
	close_pair(&p);
}

/*
 * The owner the kernel reports is the socket's, not the caller's: a client socket created
 * under another effective uid (possible only as root) is reported with that uid.
 */
static void test_other_owner(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_storage local, peer;
	socklen_t len = sizeof(sa);
	struct uls_sockid id;
	struct stat st;
	int lfd, cfd, afd;

	check_context("socket owned by another uid");
	if (geteuid() != 0) {
		fprintf(stderr, "note: not root: other-owner case skipped\n");
		return;
	}
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(lfd >= 0);
	CHECK_EQ(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	CHECK_EQ(listen(lfd, 1), 0);
	CHECK_EQ(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
	/* The socket's owner is the effective uid at socket(). */
	if (seteuid(65534) < 0) {
		fprintf(stderr, "note: seteuid: %s: other-owner case skipped\n", strerror(errno));
		close(lfd);
		return;
	}
	cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK_EQ(seteuid(0), 0);
	CHECK(cfd >= 0);
	CHECK_EQ(connect(cfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	afd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	CHECK(afd >= 0);
	get_names(cfd, &local, &peer);
	CHECK_EQ(fstat(cfd, &st), 0);
	CHECK_EQ(uls_diag_lookup((struct sockaddr *)&local, (struct sockaddr *)&peer, &id), 0);
	CHECK_U64(id.ino, ==, st.st_ino);
	CHECK_INT(id.uid, ==, 65534);
	/* And the server's end of the same connection is root's. */
	expect_socket(&peer, &local, afd);
	close(cfd);
	close(afd);
	close(lfd);
}

static void check_local(int family, const char *addr, int want)
{
	struct sockaddr_storage ss;

	check_context("uls_addr_is_local(%s)", addr);
	memset(&ss, 0, sizeof(ss));
	ss.ss_family = (sa_family_t)family;
	if (family == AF_INET)
		CHECK_EQ(inet_pton(AF_INET, addr, &((struct sockaddr_in *)&ss)->sin_addr), 1);
	else
		CHECK_EQ(inet_pton(AF_INET6, addr, &((struct sockaddr_in6 *)&ss)->sin6_addr), 1);
	CHECK_INT(uls_addr_is_local((struct sockaddr *)&ss), ==, want);
}

/*
 * A lookup from a signal handler that interrupted another lookup of the same thread (a
 * close() in a handler asks the kernel too): it must not wait for the process's netlink
 * socket, which the interrupted code holds, and must answer right. A timer fires every
 * 50 us while the thread looks up in a loop, until 20 handler lookups landed inside one
 * of the thread's (a lookup that waited would hang the test).
 */
static struct sockaddr_storage sig_self, sig_other;
static uint64_t sig_ino;
static volatile sig_atomic_t sig_inside, sig_hits, sig_runs, sig_bad;

static void lookup_in_handler(int sig)
{
	struct uls_sockid id;
	int saved = errno;

	(void)sig;
	sig_runs++;
	if (uls_diag_lookup((struct sockaddr *)&sig_self, (struct sockaddr *)&sig_other, &id) != 0 ||
	    id.ino != sig_ino)
		sig_bad++;
	if (sig_inside)
		sig_hits++;
	errno = saved;
}

static void test_lookup_in_handler(void)
{
	struct itimerval every = {.it_interval = {.tv_usec = 50}, .it_value = {.tv_usec = 50}};
	struct itimerval off = {{0, 0}, {0, 0}};
	struct sigaction sa;
	struct uls_sockid id;
	struct stat st;
	struct pair p;

	check_context("lookup in a signal handler");
	CHECK_EQ(make_pair(&p, AF_INET, "127.0.0.1", 0, AF_INET, "127.0.0.1"), 0);
	CHECK_EQ(fstat(p.cfd, &st), 0);
	sig_self = p.c_local;
	sig_other = p.c_peer;
	sig_ino = st.st_ino;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = lookup_in_handler;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	CHECK_EQ(sigaction(SIGALRM, &sa, NULL), 0);
	CHECK_EQ(setitimer(ITIMER_REAL, &every, NULL), 0);
	for (int i = 0; i < 1000000 && sig_hits < 20; i++) {
		sig_inside = 1;
		int r = uls_diag_lookup((struct sockaddr *)&p.a_local, (struct sockaddr *)&p.a_peer,
					&id);
		sig_inside = 0;
		/* A recv the signal cut short answers -EAGAIN (the caller asks again). */
		CHECK(r == 0 || r == -EAGAIN);
	}
	CHECK_EQ(setitimer(ITIMER_REAL, &off, NULL), 0);
	signal(SIGALRM, SIG_DFL);
	fprintf(stderr, "note: %d handler lookups, %d inside the thread's\n", (int)sig_runs,
		(int)sig_hits);
	CHECK_INT(sig_bad, ==, 0);
	CHECK_INT(sig_hits, >=, 20);
	close_pair(&p);
}

static void test_is_local(void)
{
	check_local(AF_INET, "127.0.0.1", 1);
	check_local(AF_INET, "127.1.2.3", 1);
	check_local(AF_INET6, "::1", 1);
	check_local(AF_INET6, "::ffff:127.0.0.1", 1);
	/* TEST-NET-1 and the IPv6 documentation prefix: never assigned to a host. */
	check_local(AF_INET, "192.0.2.1", 0);
	check_local(AF_INET6, "2001:db8::1", 0);
	check_local(AF_INET6, "::ffff:192.0.2.1", 0);
}

static void test_addr_str(void)
{
	struct sockaddr_in s4 = {.sin_family = AF_INET, .sin_port = htons(8080)};
	struct sockaddr_in6 s6 = {.sin6_family = AF_INET6, .sin6_port = htons(443)};
	char buf[64];

	check_context("uls_addr_str");
	inet_pton(AF_INET, "127.0.0.1", &s4.sin_addr);
	inet_pton(AF_INET6, "::1", &s6.sin6_addr);
	uls_addr_str((struct sockaddr *)&s4, buf, sizeof(buf));
	CHECK(strcmp(buf, "127.0.0.1:8080") == 0);
	uls_addr_str((struct sockaddr *)&s6, buf, sizeof(buf));
	CHECK(strcmp(buf, "[::1]:443") == 0);
}

int main(void)
{
	uls_libc_init();
	uls_config_load();

	/* Without NETLINK_SOCK_DIAG (some sandboxes) nothing here can run. */
	int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, 0 /* NETLINK_ROUTE */);
	if (nl < 0)
		CHECK_SKIP("no netlink sockets: %s", strerror(errno));
	close(nl);

	test_ipv4();
	test_ipv6();
	test_dual_stack();
	test_other_owner();
	test_lookup_in_handler();
	test_is_local();
	test_addr_str();
	check_context("%s", "");
	return CHECK_PASS;
}
