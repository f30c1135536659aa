/* SPDX-License-Identifier: MIT */
/*
 * Kernel TCP as a transport (core/transport.h, src/transport/kernel): a connection that
 * no fast path took is served by the pass-through, and every operation is the kernel's
 * answer on the socket. A loopback TCP pair made with plain libc calls (no preload); the
 * client's side is a conn on the kernel transport, as uls_conn_alloc makes it, and each
 * operation's result is compared with what the kernel says for the same socket directly.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "core/conn.h"
#include "os/libc.h"

static void tcp_pair(int *client, int *server)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	CHECK(l >= 0);
	CHECK(bind(l, (struct sockaddr *)&a, sizeof(a)) == 0);
	CHECK(listen(l, 1) == 0);
	CHECK(getsockname(l, (struct sockaddr *)&a, &len) == 0);
	*client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(*client >= 0);
	CHECK(connect(*client, (struct sockaddr *)&a, sizeof(a)) == 0);
	*server = accept(l, NULL, NULL);
	CHECK(*server >= 0);
	close(l);
}

static ssize_t conn_recv(struct uls_conn *c, int fd, void *buf, size_t len, int flags)
{
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};

	return uls_conn_recv(c, fd, &m, flags);
}

/* Waits until the kernel says fd has n bytes to read. */
static void wait_inq(int fd, int n)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	int have = 0;

	for (int i = 0; i < 1000 && have < n; i++) {
		CHECK(poll(&p, 1, 100) >= 0);
		CHECK(ioctl(fd, FIONREAD, &have) == 0);
	}
	CHECK_INT(have, ==, n);
}

int main(void)
{
	int cfd, sfd, v;
	char buf[64];

	uls_libc_init();
	tcp_pair(&cfd, &sfd);
	struct uls_conn *c = uls_conn_alloc();
	CHECK(c != NULL);
	CHECK(c->tp == &uls_kernel_transport);
	CHECK(strcmp(c->tp->name, "kernel") == 0);

	/* Readiness is the kernel's alone: nothing in user space, nothing to arm or drain. */
	CHECK_INT(uls_conn_kernel_parts(c), ==, ULS_KERNEL_RX | ULS_KERNEL_TX);
	CHECK_INT(uls_conn_ready(c, POLLIN | POLLOUT), ==, 0);
	CHECK_INT(uls_conn_sleep_recv(c, cfd), ==, 0);
	uls_conn_arm(c, POLLIN, -1);
	uls_conn_drain(c, cfd);

	/* Bytes both ways, with the kernel's counts. */
	struct iovec iov[2] = {{.iov_base = "hel", .iov_len = 3}, {.iov_base = "lo", .iov_len = 2}};
	CHECK_INT(uls_conn_send(c, cfd, iov, 2, 0), ==, 5);
	wait_inq(sfd, 5);
	CHECK_INT(read(sfd, buf, sizeof(buf)), ==, 5);
	CHECK(memcmp(buf, "hello", 5) == 0);
	CHECK_INT(write(sfd, "world!", 6), ==, 6);
	wait_inq(cfd, 6);
	CHECK_INT(uls_conn_inq(c, cfd, &v), ==, 0);
	CHECK_INT(v, ==, 6);
	CHECK_INT(conn_recv(c, cfd, buf, 2, MSG_PEEK), ==, 2);
	CHECK_INT(conn_recv(c, cfd, buf, sizeof(buf), 0), ==, 6);
	CHECK(memcmp(buf, "world!", 6) == 0);
	CHECK_INT(conn_recv(c, cfd, buf, sizeof(buf), MSG_DONTWAIT), ==, -EAGAIN);
	CHECK_INT(uls_conn_outq(c, cfd, &v), ==, 0);
	CHECK_INT(v, >=, 0);
	CHECK_INT(uls_conn_atmark(c, cfd, &v), ==, 0);
	CHECK_INT(v, ==, 0);

	/* Nothing to move back; then the kernel's shutdown and its EOF and errors. */
	CHECK_INT(uls_conn_revert(c, cfd, 100), ==, 0);
	CHECK_INT(uls_conn_tx_to_kernel(c, cfd), ==, 0);
	CHECK_INT(uls_conn_shutdown(c, cfd, SHUT_WR), ==, 0);
	CHECK_INT(read(sfd, buf, sizeof(buf)), ==, 0);
	CHECK_INT(uls_conn_send(c, cfd, iov, 1, MSG_NOSIGNAL), ==, -EPIPE);
	CHECK_INT(uls_conn_shutdown(c, cfd, 7), ==, -EINVAL);
	close(sfd);
	CHECK_INT(conn_recv(c, cfd, buf, sizeof(buf), 0), ==, 0);
	CHECK_INT(uls_conn_inq(c, -1, &v), ==, -EBADF);
	close(cfd);
	return CHECK_PASS;
}
