/*
 * calls_other: sockets ulsock must leave alone behave normally under it: UDP over IPv4 and
 * IPv6 (datagram boundaries, truncation, source addresses, connected UDP, FIONREAD) and
 * AF_UNIX stream, datagram and seqpacket sockets, all between two processes.
 * Usage: calls_other CASE.
 */
#include "calls_common.h"

#include <stddef.h>
#include <sys/un.h>

#define SEED 71u

static int udp_bound(int family, struct calls_addr *a)
{
	int fd = socket(family, SOCK_DGRAM, 0);

	CHECK(fd >= 0);
	calls_loopback(family, a, 0);
	CHECK(bind(fd, (struct sockaddr *)&a->ss, a->len) == 0);
	a->len = sizeof(a->ss);
	CHECK(getsockname(fd, (struct sockaddr *)&a->ss, &a->len) == 0);
	return fd;
}

/*
 * Datagrams from a forked child keep their boundaries and source address; a short buffer
 * truncates (MSG_TRUNC in msg_flags; recv with MSG_TRUNC reports the real size); FIONREAD is
 * the size of the next datagram; a connected UDP socket sends and receives with send/recv.
 */
static void udp_case(int family)
{
	static unsigned char buf[65536];
	const size_t sizes[] = {1, 1000, 60000, 0, 7};
	const int nsizes = sizeof(sizes) / sizeof(sizes[0]);
	struct calls_addr pa, ca;

	calls_require_family(family);
	int pfd = udp_bound(family, &pa);
	int cfd = udp_bound(family, &ca);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		calls_child_setup();
		close(pfd);
		uint64_t off = 0;
		for (int i = 0; i < nsizes; i++) {
			calls_pat_fill(buf, off, sizes[i], SEED);
			CHECK_EQ(sendto(cfd, buf, sizes[i], 0, (struct sockaddr *)&pa.ss, pa.len),
				 sizes[i]);
			off += sizes[i];
		}
		/* Connected: send/recv without addresses. */
		CHECK(connect(cfd, (struct sockaddr *)&pa.ss, pa.len) == 0);
		CHECK_EQ(send(cfd, "conn", 4, 0), 4);
		CHECK_EQ(recv(cfd, buf, sizeof(buf), 0), 5);
		CHECK_EQ(memcmp(buf, "reply", 5), 0);
		_exit(0);
	}
	close(cfd);
	uint64_t off = 0;
	for (int i = 0; i < nsizes; i++) {
		struct calls_addr from;
		CHECK(calls_wait_for(pfd, POLLIN, 5000) & POLLIN);
		CHECK_EQ(calls_fionread(pfd), sizes[i]);
		if (sizes[i] == 1000) {
			/* Truncation: 10 bytes copied, the rest of the datagram dropped. */
			struct iovec iov = {buf, 10};
			struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
			m.msg_name = &from.ss;
			m.msg_namelen = sizeof(from.ss);
			CHECK_EQ(recv(pfd, buf, 10, MSG_PEEK | MSG_TRUNC), 1000);
			CHECK_EQ(recvmsg(pfd, &m, 0), 10);
			CHECK(m.msg_flags & MSG_TRUNC);
			CHECK_PAT(buf, off, 10, SEED);
			from.len = m.msg_namelen;
		} else {
			from.len = sizeof(from.ss);
			CHECK_EQ(recvfrom(pfd, buf, sizeof(buf), 0, (struct sockaddr *)&from.ss,
					  &from.len),
				 sizes[i]);
			CHECK_PAT(buf, off, sizes[i], SEED);
		}
		CHECK_EQ(from.len, ca.len);
		CHECK_EQ(memcmp(&from.ss, &ca.ss, ca.len), 0);
		off += sizes[i];
	}
	CHECK_EQ(recv(pfd, buf, sizeof(buf), 0), 4);
	CHECK_EQ(memcmp(buf, "conn", 4), 0);
	CHECK_EQ(sendto(pfd, "reply", 5, 0, (struct sockaddr *)&ca.ss, ca.len), 5);
	calls_wait_child(pid);
	CHECK_ERR(recv(pfd, buf, sizeof(buf), MSG_DONTWAIT), EAGAIN);
	close(pfd);
}

static void case_udp(CALLS_ARGS)
{
	udp_case(AF_INET);
}

static void case_udp6(CALLS_ARGS)
{
	udp_case(AF_INET6);
}

/* A stream socketpair shared with a forked child: exact bytes both ways, EOF, FIONREAD. */
static void case_unix_pair(CALLS_ARGS)
{
	const size_t n = 2u << 20;
	int sv[2];

	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		calls_child_setup();
		close(sv[0]);
		calls_send_pat(sv[1], 0, n, SEED);
		calls_recv_pat(sv[1], 0, n, SEED + 1);
		calls_write_all(sv[1], "tail", 4);
		_exit(0);
	}
	close(sv[1]);
	calls_recv_pat(sv[0], 0, n, SEED);
	calls_send_pat(sv[0], 0, n, SEED + 1);
	calls_wait_child(pid);
	CHECK_EQ(calls_fionread(sv[0]), 4);
	char buf[8];
	calls_read_exact(sv[0], buf, 4);
	CHECK_EQ(memcmp(buf, "tail", 4), 0);
	calls_expect_eof(sv[0]);
	close(sv[0]);
}

/* A listening AF_UNIX stream socket (abstract name): accept/connect, names, data, shutdown. */
static void case_unix_listen(CALLS_ARGS)
{
	struct sockaddr_un sa;
	char name[64];
	socklen_t len;

	snprintf(name, sizeof(name), "calls_other_%d", (int)getpid());
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path + 1, name, strlen(name));
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
	int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	CHECK(lfd >= 0);
	CHECK(bind(lfd, (struct sockaddr *)&sa, len) == 0);
	CHECK(listen(lfd, 4) == 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		calls_child_setup();
		close(lfd);
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);
		CHECK(fd >= 0);
		CHECK(connect(fd, (struct sockaddr *)&sa, len) == 0);
		struct sockaddr_un peer;
		socklen_t plen = sizeof(peer);
		CHECK(getpeername(fd, (struct sockaddr *)&peer, &plen) == 0);
		CHECK_EQ(plen, len);
		CHECK_EQ(memcmp(&peer, &sa, len), 0);
		calls_send_pat(fd, 0, 500000, SEED);
		CHECK(shutdown(fd, SHUT_WR) == 0);
		calls_recv_pat(fd, 0, 1000, SEED + 1);
		calls_expect_eof(fd);
		_exit(0);
	}
	int fd = calls_accept(lfd);
	close(lfd);
	struct sockaddr_un local;
	socklen_t llen = sizeof(local);
	CHECK(getsockname(fd, (struct sockaddr *)&local, &llen) == 0);
	CHECK_EQ(llen, len);
	calls_recv_pat(fd, 0, 500000, SEED);
	calls_expect_eof(fd);
	calls_send_pat(fd, 0, 1000, SEED + 1);
	close(fd);
	calls_wait_child(pid);
}

/* AF_UNIX datagram and seqpacket pairs keep message boundaries; dgram truncates. */
static void case_unix_dgram(CALLS_ARGS)
{
	const int types[] = {SOCK_DGRAM, SOCK_SEQPACKET};
	static unsigned char buf[70000];

	for (int t = 0; t < 2; t++) {
		int sv[2];
		CHECK(socketpair(AF_UNIX, types[t], 0, sv) == 0);
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0) {
			calls_child_setup();
			close(sv[0]);
			const size_t sizes[] = {3, 5000, 1, 60000};
			uint64_t off = 0;
			for (int i = 0; i < 4; i++) {
				calls_pat_fill(buf, off, sizes[i], SEED);
				CHECK_EQ(send(sv[1], buf, sizes[i], 0), sizes[i]);
				off += sizes[i];
			}
			_exit(0);
		}
		close(sv[1]);
		const size_t sizes[] = {3, 5000, 1, 60000};
		uint64_t off = 0;
		for (int i = 0; i < 4; i++) {
			if (i == 1) {
				struct iovec iov = {buf, 100};
				struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
				CHECK_EQ(recvmsg(sv[0], &m, 0), 100);
				CHECK(m.msg_flags & MSG_TRUNC);
				CHECK_PAT(buf, off, 100, SEED);
			} else {
				CHECK_EQ(recv(sv[0], buf, sizeof(buf), 0), sizes[i]);
				CHECK_PAT(buf, off, sizes[i], SEED);
			}
			off += sizes[i];
		}
		calls_wait_child(pid);
		if (types[t] == SOCK_SEQPACKET)
			CHECK_EQ(recv(sv[0], buf, sizeof(buf), 0), 0);
		else
			CHECK_ERR(recv(sv[0], buf, sizeof(buf), MSG_DONTWAIT), EAGAIN);
		close(sv[0]);
	}
}

static const struct calls_case cases[] = {
	{"udp", case_udp},
	{"udp6", case_udp6},
	{"unix_pair", case_unix_pair},
	{"unix_listen", case_unix_listen},
	{"unix_dgram", case_unix_dgram},
	{NULL, NULL},
};

int main(int argc, char **argv)
{
	return calls_main(argc, argv, cases);
}
