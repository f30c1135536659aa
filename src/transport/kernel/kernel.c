/* SPDX-License-Identifier: MIT */
/*
 * Kernel TCP as a transport (core/transport.h): the pass-through. Each operation is the
 * kernel's own call on the socket, on the descriptor a close by another thread kept for
 * the calls still inside (uls_conn_fd). The kernel decides all readiness, so there is
 * nothing to arm or drain, and nothing to move back.
 */
#include <errno.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>

#include "../../core/conn.h"
#include "../../core/wait.h"
#include "../../os/cpu.h"
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

/*
 * Before a blocking receive sleeps in the kernel: while another transport has work that
 * nothing will wake this thread for (nap_ns: a fabric provider with manual progress
 * moves posted sends only in calls into it), the wait goes in naps of that length, each
 * after the transports' idle work (which pushes those sends), until the socket is
 * readable. A program that sends on a fabric connection and then blocks reading a TCP
 * one would otherwise hold its last message back. The socket's receive timeout and the
 * program's signals end the wait as they would end the kernel's. 0: go on with the
 * kernel's call; -EAGAIN, -EINTR: the call's result.
 */
static int k_wait_pushing(struct uls_conn *c, int kfd, int flags)
{
	uint64_t nap = uls_transports_nap_ns(), deadline = 0;

	if (!nap || (flags & MSG_DONTWAIT) || atomic_load(&c->nonblock))
		return 0;
	if (c->rcvtimeo_ns)
		deadline = uls_now_ns() + c->rcvtimeo_ns;
	for (; nap; nap = uls_transports_nap_ns()) {
		uint64_t now = uls_now_ns();
		if (deadline && now >= deadline)
			return -EAGAIN;
		int ms = (int)((nap + 999999) / 1000000);
		if (deadline && (deadline - now) / 1000000 < (uint64_t)ms)
			ms = (int)((deadline - now + 999999) / 1000000);
		uls_transports_idle();
		uls_signal_clear();
		struct pollfd p = {.fd = kfd, .events = POLLIN};
		int r = uls_libc.poll(&p, 1, ms);
		if (r > 0)
			return 0;
		if (r < 0 && errno == EINTR && (deadline || uls_signals_interrupt()))
			return -EINTR;
		if (r < 0 && errno != EINTR)
			return 0; /* the kernel's call says what is wrong */
	}
	return 0;
}

static ssize_t k_recv(struct uls_conn *c, int fd, struct msghdr *msg, int flags)
{
	int kfd = uls_conn_fd(c, fd), r = k_wait_pushing(c, kfd, flags);

	if (r < 0)
		return r;
	return result(uls_libc.recvmsg(kfd, msg, flags));
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

static void k_arm(struct uls_conn *c, int events, int bell)
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
