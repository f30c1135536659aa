/* SPDX-License-Identifier: MIT */
#include "handshake.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "../os/ownfd.h"
#include "../os/libc.h"

/* One netlink socket per process, reopened after fork so replies never cross processes. */
static pthread_mutex_t diag_mu = PTHREAD_MUTEX_INITIALIZER;
static int diag_fd = -1;
static pid_t diag_pid;
static uint32_t diag_seq;

static int diag_socket(void)
{
	if (diag_fd >= 0 && diag_pid == uls_pid())
		return diag_fd;
	if (diag_fd >= 0 && diag_pid != uls_pid())
		uls_own_fd_close(&diag_fd); /* the parent's, inherited by fork */
	int fd = uls_libc.socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (fd >= 0)
		uls_own_fd_take(fd, &diag_fd);
	diag_pid = uls_pid();
	return diag_fd;
}

static void fill_id(struct inet_diag_sockid *id, int family, const struct sockaddr *self,
		    const struct sockaddr *other)
{
	memset(id, 0, sizeof(*id));
	if (family == AF_INET) {
		const struct sockaddr_in *s = (const void *)self, *o = (const void *)other;
		id->idiag_sport = s->sin_port;
		id->idiag_dport = o->sin_port;
		memcpy(id->idiag_src, &s->sin_addr, 4);
		memcpy(id->idiag_dst, &o->sin_addr, 4);
	} else {
		const struct sockaddr_in6 *s = (const void *)self, *o = (const void *)other;
		id->idiag_sport = s->sin6_port;
		id->idiag_dport = o->sin6_port;
		memcpy(id->idiag_src, &s->sin6_addr, 16);
		memcpy(id->idiag_dst, &o->sin6_addr, 16);
	}
	id->idiag_cookie[0] = INET_DIAG_NOCOOKIE;
	id->idiag_cookie[1] = INET_DIAG_NOCOOKIE;
}

static int diag_query(int fd, uint32_t seq, int family, const struct sockaddr *self,
		      const struct sockaddr *other, struct uls_sockid *out)
{
	struct {
		struct nlmsghdr nh;
		struct inet_diag_req_v2 req;
	} msg;
	union {
		struct nlmsghdr nh;
		char buf[1024];
	} rep;
	struct sockaddr_nl nl = {.nl_family = AF_NETLINK};
	ssize_t n;

	memset(&msg, 0, sizeof(msg));
	msg.nh.nlmsg_len = sizeof(msg);
	msg.nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	msg.nh.nlmsg_flags = NLM_F_REQUEST;
	msg.nh.nlmsg_seq = seq;
	msg.req.sdiag_family = (uint8_t)family;
	msg.req.sdiag_protocol = IPPROTO_TCP;
	msg.req.idiag_states = ~0u;
	fill_id(&msg.req.id, family, self, other);
	if (uls_libc.sendto(fd, &msg, sizeof(msg), 0, (struct sockaddr *)&nl, sizeof(nl)) < 0)
		return -errno;
	for (;;) {
		n = uls_libc.recv(fd, &rep, sizeof(rep), 0);
		if (n < 0)
			return errno == EINTR ? -EAGAIN : -errno;
		if ((size_t)n < sizeof(struct nlmsghdr) || rep.nh.nlmsg_seq != seq)
			continue; /* a stale reply to an interrupted query */
		if (rep.nh.nlmsg_type == NLMSG_ERROR) {
			struct nlmsgerr *e = NLMSG_DATA(&rep.nh);
			return e->error ? e->error : -ENOENT;
		}
		if (rep.nh.nlmsg_type != SOCK_DIAG_BY_FAMILY ||
		    (size_t)n < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
			return -EPROTO;
		struct inet_diag_msg *m = NLMSG_DATA(&rep.nh);
		out->ino = m->idiag_inode;
		out->uid = m->idiag_uid;
		out->cookie = (uint64_t)m->id.idiag_cookie[0] | (uint64_t)m->id.idiag_cookie[1] << 32;
		return 0;
	}
}

static int is_v4mapped(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 &&
	       IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

static void unmap_v4(const struct sockaddr *sa, struct sockaddr_in *out)
{
	const struct sockaddr_in6 *s6 = (const void *)sa;

	memset(out, 0, sizeof(*out));
	out->sin_family = AF_INET;
	out->sin_port = s6->sin6_port;
	memcpy(&out->sin_addr, &s6->sin6_addr.s6_addr[12], 4);
}

/* The lookup on netlink socket fd; seq numbers its first query, seq + 1 its second. */
static int lookup_on(int fd, uint32_t seq, const struct sockaddr *self,
		     const struct sockaddr *other, struct uls_sockid *out)
{
	struct sockaddr_in s4, o4;
	int err = -EAFNOSUPPORT;

	if (is_v4mapped(self) && is_v4mapped(other)) {
		/* A dual-stack listener's peer is an IPv4 socket (or a v4-mapped IPv6 one). */
		unmap_v4(self, &s4);
		unmap_v4(other, &o4);
		err = diag_query(fd, seq, AF_INET, (struct sockaddr *)&s4, (struct sockaddr *)&o4,
				 out);
		if (err == -ENOENT)
			err = diag_query(fd, seq + 1, AF_INET6, self, other, out);
	} else if (self->sa_family == AF_INET || self->sa_family == AF_INET6) {
		err = diag_query(fd, seq, self->sa_family, self, other, out);
	}
	return err;
}

/*
 * The process's netlink socket serves one query at a time. A lookup never waits for it:
 * the holder may be another thread, or the very code that a signal handler interrupted
 * (close() is async-signal-safe, and a close asks the kernel), which would wait for good.
 * Then the lookup opens a socket of its own for this one query: a socket and a close more,
 * a few microseconds.
 */
int uls_diag_lookup(const struct sockaddr *self, const struct sockaddr *other,
		    struct uls_sockid *out)
{
	int err, fd;

	if (pthread_mutex_trylock(&diag_mu) == 0) {
		fd = diag_socket();
		if (fd < 0) {
			err = -errno;
		} else {
			err = lookup_on(fd, diag_seq + 1, self, other, out);
			diag_seq += 2;
		}
		pthread_mutex_unlock(&diag_mu);
		return err;
	}
	fd = uls_libc.socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (fd < 0)
		return -errno;
	err = lookup_on(fd, 1, self, other, out);
	uls_libc.close(fd);
	return err;
}

uint64_t uls_sock_cookie(int fd)
{
	uint64_t c = 0;
	socklen_t len = sizeof(c);

	if (uls_libc.getsockopt(fd, SOL_SOCKET, SO_COOKIE, &c, &len) < 0)
		return 0;
	return c;
}

/* Interface addresses, refreshed at most once a second. */
static pthread_mutex_t ifa_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ifaddrs *ifa_list;
static time_t ifa_time;
static pid_t ifa_pid;

static int addr_eq(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return 0;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		      &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
}

int uls_addr_is_local(const struct sockaddr *sa)
{
	struct sockaddr_in v4;
	struct timespec now;
	int found = 0;

	if (is_v4mapped(sa)) {
		unmap_v4(sa, &v4);
		sa = (struct sockaddr *)&v4;
	}
	if (sa->sa_family == AF_INET)
		if ((ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127)
			return 1;
	if (sa->sa_family == AF_INET6 &&
	    IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr))
		return 1;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
	pthread_mutex_lock(&ifa_mu);
	if (!ifa_list || now.tv_sec != ifa_time || ifa_pid != uls_pid()) {
		if (ifa_list)
			freeifaddrs(ifa_list);
		ifa_list = NULL;
		if (getifaddrs(&ifa_list) < 0)
			ifa_list = NULL;
		ifa_time = now.tv_sec;
		ifa_pid = uls_pid();
	}
	for (struct ifaddrs *i = ifa_list; i && !found; i = i->ifa_next)
		found = i->ifa_addr && addr_eq(i->ifa_addr, sa);
	pthread_mutex_unlock(&ifa_mu);
	return found;
}

uint16_t uls_addr_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return 0;
}

void uls_addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
	char a[INET6_ADDRSTRLEN] = "?";

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)sa;
		inet_ntop(AF_INET, &s->sin_addr, a, sizeof(a));
		snprintf(buf, len, "%s:%u", a, ntohs(s->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)sa;
		inet_ntop(AF_INET6, &s->sin6_addr, a, sizeof(a));
		snprintf(buf, len, "[%s]:%u", a, ntohs(s->sin6_port));
	} else {
		snprintf(buf, len, "?");
	}
}

