/* SPDX-License-Identifier: MIT */
/*
 * Kernel TCP as a transport (core/transport.h): the pass-through. Each operation is the
 * kernel's own call on the socket, on the descriptor a close by another thread kept for
 * the calls still inside (uls_conn_fd). The kernel decides all readiness, so there is
 * nothing to arm or drain, and nothing to move back.
 */
#include <errno.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>

#include "../../core/conn.h"
#include "../../os/libc.h"

static ssize_t result(ssize_t r)
{
	return r < 0 ? -errno : r;
}

static ssize_t k_send(struct uls_conn *c, int fd, const struct iovec *iov, int iovcnt,
		      int flags)
{
	struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};

	return result(uls_libc.sendmsg(uls_conn_fd(c, fd), &m, flags));
}

static ssize_t k_recv(struct uls_conn *c, int fd, struct msghdr *msg, int flags)
{
	return result(uls_libc.recvmsg(uls_conn_fd(c, fd), msg, flags));
}

static int k_shutdown(struct uls_conn *c, int fd, int how)
{
	return (int)result(uls_libc.shutdown(uls_conn_fd(c, fd), how));
}

static int k_kernel_parts(struct uls_conn *c)
{
	return ULS_KERNEL_RX | ULS_KERNEL_TX;
}

static int k_ready(struct uls_conn *c, int events)
{
	return 0;
}

static void k_arm(struct uls_conn *c, int events)
{
}

static void k_drain(struct uls_conn *c, int fd)
{
}

static int k_sleep_recv(struct uls_conn *c, int fd)
{
	return 0;
}

static uint64_t k_gen(struct uls_conn *c, int events)
{
	return 0;
}

static int k_ioctl(struct uls_conn *c, int fd, unsigned long req, int *out)
{
	return (int)result(uls_libc.ioctl(uls_conn_fd(c, fd), req, out));
}

static int k_inq(struct uls_conn *c, int fd, int *out)
{
	return k_ioctl(c, fd, FIONREAD, out);
}

static int k_outq(struct uls_conn *c, int fd, int *out)
{
	return k_ioctl(c, fd, SIOCOUTQ, out);
}

static int k_atmark(struct uls_conn *c, int fd, int *out)
{
	return k_ioctl(c, fd, SIOCATMARK, out);
}

static int k_revert(struct uls_conn *c, int fd, int timeout_ms)
{
	return 0;
}

static int k_tx_to_kernel(struct uls_conn *c, int fd)
{
	return 0;
}

static void k_async(struct uls_conn *c, int fd)
{
}

static void k_settled(struct uls_conn *c)
{
}

static void k_closing(struct uls_conn *c, int fd)
{
}

static int k_close(struct uls_conn *c, int fd)
{
	return uls_libc.close(fd);
}

static void k_wake(struct uls_conn *c)
{
}

static void k_destroy(struct uls_conn *c)
{
}

static int k_joined(struct uls_conn *c)
{
	return 0;
}

static void k_tcp_info(struct uls_conn *c, void *info, socklen_t len)
{
}

/* Every connection starts here, so it has no set-up or process operations of its own
 * (and is not in the transport table). */
const struct uls_transport_ops uls_kernel_transport = {
	.name = "kernel",
	.send = k_send,
	.recv = k_recv,
	.shutdown = k_shutdown,
	.kernel_parts = k_kernel_parts,
	.ready = k_ready,
	.arm = k_arm,
	.drain = k_drain,
	.sleep_recv = k_sleep_recv,
	.gen = k_gen,
	.inq = k_inq,
	.outq = k_outq,
	.atmark = k_atmark,
	.revert = k_revert,
	.tx_to_kernel = k_tx_to_kernel,
	.async = k_async,
	.settled = k_settled,
	.closing = k_closing,
	.close = k_close,
	.wake = k_wake,
	.destroy = k_destroy,
	.joined = k_joined,
	.tcp_info = k_tcp_info,
};
