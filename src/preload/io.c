/* SPDX-License-Identifier: MIT */
/* Interposed data calls: every read and write family member ends in uls_conn_recv/send. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/stat.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include "preload.h"
#include "../core/conn.h"
#include "../core/fdtable.h"
#include "../core/handoff.h"
#include "../core/config.h"
#include "../core/log.h"

extern void __chk_fail(void) __attribute__((noreturn));

/* The conn of fd when some of its data goes through ulsock, else NULL. */
static inline struct uls_conn *accel(int fd)
{
	if (!uls_enter())
		return NULL;
	struct uls_fd *e = uls_fd_get(fd);

	if (!e)
		return NULL;
	uint8_t kind = atomic_load_explicit(&e->kind, memory_order_acquire);
	if (kind == ULS_FD_PLAIN || kind == ULS_FD_TCP || kind == ULS_FD_EPOLL)
		return NULL;
	struct uls_conn *c = kind == ULS_FD_CONN ? e->conn : uls_fd_conn(fd);
	if (!c || atomic_load_explicit(&c->path, memory_order_relaxed) == ULS_PATH_KERNEL)
		return NULL;
	return c;
}

static ssize_t conn_recv_buf(struct uls_conn *c, int fd, void *buf, size_t len, int flags)
{
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};

	return uls_ret(uls_io_recv(c, fd, &m, flags));
}

/*
 * A send on the ring copies before it returns: MSG_ZEROCOPY is done with at once, and
 * with SO_ZEROCOPY on, the completion the program waits for is queued here for its
 * MSG_ERRQUEUE receive (core/sockinfo.c), numbered as the kernel numbers them.
 */
static ssize_t conn_sendv(struct uls_conn *c, int fd, const struct iovec *iov, int iovcnt,
			  int flags)
{
	ssize_t n = uls_io_send(c, fd, iov, iovcnt, flags & ~MSG_ZEROCOPY);

	if (n > 0 && (flags & MSG_ZEROCOPY) && uls_conn_zc_enabled(c, fd))
		uls_conn_zc_sent(c);
	return uls_ret(n);
}

static ssize_t conn_send_buf(struct uls_conn *c, int fd, const void *buf, size_t len, int flags)
{
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};

	return conn_sendv(c, fd, &iov, 1, flags);
}

/* MSG_FASTOPEN on a connected socket fails (EISCONN, or EOPNOTSUPP with fast open off):
 * the kernel says which, on a send of no bytes. */
static ssize_t fastopen_refused(int fd)
{
	if (uls_libc.send(fd, "", 0, MSG_FASTOPEN | MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		return -1;
	return uls_ret(-EISCONN);
}

/* Receives the kernel serves itself: urgent data and the error queue never use the ring. */
#define KERNEL_RECV_FLAGS (MSG_OOB | MSG_ERRQUEUE)

/*
 * Urgent data goes on kernel TCP, behind everything this side put on the ring: its
 * sending direction moves back to TCP first (transport/shm/revert.c), for good.
 */
static ssize_t send_urgent(struct uls_conn *c, int fd, const struct msghdr *m, int flags)
{
	int r = uls_conn_tx_to_kernel(c, fd);

	if (r < 0)
		return uls_ret(r);
	return uls_libc.sendmsg(fd, m, flags);
}

static ssize_t send_urgent_buf(struct uls_conn *c, int fd, const void *buf, size_t len,
			       int flags)
{
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};

	return send_urgent(c, fd, &m, flags);
}

ULS_EXPORT ssize_t read(int fd, void *buf, size_t len)
{
	struct uls_conn *c = accel(fd);
	return c ? conn_recv_buf(c, fd, buf, len, 0) : uls_libc.read(fd, buf, len);
}

ULS_EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
	struct uls_conn *c = accel(fd);
	return c ? conn_send_buf(c, fd, buf, len, 0) : uls_libc.write(fd, buf, len);
}

ULS_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
	struct uls_conn *c = accel(fd);
	struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};

	if (!c)
		return uls_libc.readv(fd, iov, iovcnt);
	if (iovcnt < 0 || iovcnt > IOV_MAX)
		return uls_ret(-EINVAL);
	return uls_ret(uls_io_recv(c, fd, &m, 0));
}

ULS_EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	struct uls_conn *c = accel(fd);

	if (!c)
		return uls_libc.writev(fd, iov, iovcnt);
	if (iovcnt < 0 || iovcnt > IOV_MAX)
		return uls_ret(-EINVAL);
	return uls_ret(uls_io_send(c, fd, iov, iovcnt, 0));
}

/* recv and recvfrom with MSG_ERRQUEUE: the completions made here come first. */
static ssize_t errqueue_recv(struct uls_conn *c, int fd, void *buf, size_t len, int flags)
{
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	ssize_t r = uls_conn_zc_report(c, &m);

	return r != -EAGAIN ? uls_ret(r) : uls_libc.recv(fd, buf, len, flags);
}

ULS_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	struct uls_conn *c = accel(fd);

	if (c && (flags & MSG_ERRQUEUE))
		return errqueue_recv(c, fd, buf, len, flags);
	if (!c || (flags & KERNEL_RECV_FLAGS))
		return uls_libc.recv(fd, buf, len, flags);
	return conn_recv_buf(c, fd, buf, len, flags);
}

ULS_EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	struct uls_conn *c = accel(fd);

	if (!c)
		return uls_libc.send(fd, buf, len, flags);
	if (flags & MSG_FASTOPEN)
		return fastopen_refused(fd);
	if (flags & MSG_OOB)
		return send_urgent_buf(c, fd, buf, len, flags);
	return conn_send_buf(c, fd, buf, len, flags);
}

ULS_EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *addr,
			    socklen_t *alen)
{
	struct uls_conn *c = accel(fd);

	if (c && (flags & MSG_ERRQUEUE))
		return errqueue_recv(c, fd, buf, len, flags);
	if (!c || (flags & KERNEL_RECV_FLAGS))
		return uls_libc.recvfrom(fd, buf, len, flags, addr, alen);
	/* A connected stream socket reports no source address, as TCP does. */
	if (addr && alen)
		*alen = 0;
	return conn_recv_buf(c, fd, buf, len, flags);
}

ULS_EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags,
			  const struct sockaddr *addr, socklen_t alen)
{
	struct uls_conn *c = accel(fd);

	if (!c)
		return uls_libc.sendto(fd, buf, len, flags, addr, alen);
	if (flags & MSG_FASTOPEN)
		return fastopen_refused(fd);
	if (flags & MSG_OOB)
		return send_urgent_buf(c, fd, buf, len, flags);
	return conn_send_buf(c, fd, buf, len, flags);
}

/* TCP_INQ: the bytes left to read, as the kernel adds them to every receive's control. */
static void add_inq(struct uls_conn *c, int fd, struct msghdr *msg, size_t room)
{
	int left = 0;

	if (!msg->msg_control || room < CMSG_LEN(sizeof(int))) {
		msg->msg_flags |= MSG_CTRUNC;
		return;
	}
	uls_conn_inq(c, fd, &left);
	/* The kernel counts the peer's FIN as a byte still to read (tcp_inq). */
	if (uls_conn_ready(c, POLLRDHUP) & POLLRDHUP)
		left++;
	struct cmsghdr *cm = (struct cmsghdr *)msg->msg_control;
	cm->cmsg_level = SOL_TCP;
	cm->cmsg_type = TCP_CM_INQ;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &left, sizeof(int));
	msg->msg_controllen = CMSG_SPACE(sizeof(int)) <= room ? CMSG_SPACE(sizeof(int))
							     : CMSG_LEN(sizeof(int));
}

ULS_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	struct uls_conn *c = accel(fd);

	if (c && (flags & MSG_ERRQUEUE) && msg) {
		ssize_t r = uls_conn_zc_report(c, msg);
		if (r != -EAGAIN)
			return uls_ret(r);
	}
	if (!c || (flags & KERNEL_RECV_FLAGS)) {
		ssize_t r = uls_libc.recvmsg(fd, msg, flags);
		if (r >= 0 && msg && msg->msg_controllen)
			uls_handoff_received(msg);
		return r;
	}
	size_t room = msg->msg_controllen;
	socklen_t namelen = msg->msg_namelen;
	msg->msg_namelen = 0;
	msg->msg_controllen = 0;
	ssize_t n = uls_io_recv(c, fd, msg, flags & ~MSG_CMSG_CLOEXEC);
	if (n < 0) {
		/* A failed receive leaves the message header as the program set it. */
		msg->msg_namelen = namelen;
		msg->msg_controllen = room;
	} else if (atomic_load(&c->tcp_inq)) {
		add_inq(c, fd, msg, room);
	}
	return uls_ret(n);
}

ULS_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	struct uls_conn *c = accel(fd);

	if (msg && msg->msg_controllen && !uls_is_inside())
		uls_handoff_sent(msg);
	if (c && msg->msg_controllen) {
		/* TCP takes a few control messages (timestamping requests) and refuses the
		 * rest: the kernel judges them on a send of no bytes, the bytes go the ring. */
		struct msghdr m = *msg;
		m.msg_iov = NULL;
		m.msg_iovlen = 0;
		if (uls_libc.sendmsg(fd, &m, (flags & ~(MSG_ZEROCOPY | MSG_OOB)) | MSG_DONTWAIT) < 0)
			return -1;
	}
	if (!c)
		return uls_libc.sendmsg(fd, msg, flags);
	if (flags & MSG_FASTOPEN)
		return fastopen_refused(fd);
	if (flags & MSG_OOB)
		return send_urgent(c, fd, msg, flags);
	return conn_sendv(c, fd, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

ULS_EXPORT int recvmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags,
			struct timespec *timeout)
{
	struct uls_conn *c = accel(fd);
	unsigned int i;

	if (!c) {
		int r = uls_libc.recvmmsg(fd, v, n, flags, timeout);
		for (int k = 0; k < r; k++)
			if (v[k].msg_hdr.msg_controllen)
				uls_handoff_received(&v[k].msg_hdr);
		return r;
	}
	for (i = 0; i < n; i++) {
		int f = flags & ~MSG_WAITFORONE;
		if (i > 0 && (flags & MSG_WAITFORONE))
			f |= MSG_DONTWAIT;
		ssize_t r = recvmsg(fd, &v[i].msg_hdr, f);
		if (r < 0)
			return i ? (int)i : -1;
		v[i].msg_len = (unsigned int)r;
		if (r == 0)
			return (int)i + 1;
	}
	return (int)i;
}

ULS_EXPORT int sendmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags)
{
	struct uls_conn *c = accel(fd);
	unsigned int i;

	if (!c) {
		/* A unix socket may carry descriptors in any of the messages (sendmsg). */
		for (i = 0; v && i < n && !uls_is_inside(); i++)
			if (v[i].msg_hdr.msg_controllen)
				uls_handoff_sent(&v[i].msg_hdr);
		return uls_libc.sendmmsg(fd, v, n, flags);
	}
	for (i = 0; i < n; i++) {
		ssize_t r = sendmsg(fd, &v[i].msg_hdr, flags);
		if (r < 0)
			return i ? (int)i : -1;
		v[i].msg_len = (unsigned int)r;
	}
	return (int)i;
}

static ssize_t sendfile_to_conn(struct uls_conn *c, int out, int in, off_t *offset,
				size_t count, char *buf)
{
	size_t done = 0;

	while (done < count) {
		size_t want = count - done < ULS_CHUNK ? count - done : ULS_CHUNK;
		ssize_t n = offset ? pread(in, buf, want, *offset) : uls_libc.read(in, buf, want);
		if (n < 0)
			return done ? (ssize_t)done : -1;
		if (n == 0)
			break;
		ssize_t w = conn_send_buf(c, out, buf, (size_t)n, 0);
		if (w < 0) {
			if (!offset && done == 0)
				return -1;
			return done ? (ssize_t)done : -1;
		}
		if (offset)
			*offset += w;
		else if (w < n)
			lseek(in, (off_t)w - n, SEEK_CUR);
		done += (size_t)w;
		if (w < n)
			break;
	}
	return (ssize_t)done;
}

ULS_EXPORT ssize_t sendfile(int out, int in, off_t *offset, size_t count)
{
	struct uls_conn *c = accel(out);

	/* An accelerated socket as the input: the kernel takes one only into a pipe, as a
	 * splice (and refuses an offset on it), which splice.c serves; into a socket, EINVAL
	 * (the kernel's socket would be read: wake-up bytes). */
	if (accel(in)) {
		struct stat st;
		if (offset)
			return uls_ret(-ESPIPE);
		if (c)
			return uls_ret(-EINVAL);
		if (fstat(out, &st) == 0 && S_ISFIFO(st.st_mode))
			return splice(in, NULL, out, NULL, count, 0);
	}
	if (!c)
		return uls_libc.sendfile(out, in, offset, count);
	/* The kernel reads only a regular file or a block device into a socket (with an
	 * offset, something it cannot seek is ESPIPE first); anything else is EINVAL. */
	struct stat st;
	if (fstat(in, &st) < 0)
		return -1;
	if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
		if (offset && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))
			return uls_ret(-ESPIPE);
		return uls_ret(-EINVAL);
	}
	char *buf = uls_chunk_take();
	if (!buf)
		return uls_ret(-ENOMEM);
	ssize_t n = sendfile_to_conn(c, out, in, offset, count, buf);
	uls_chunk_give(buf);
	return n;
}

ULS_EXPORT ssize_t sendfile64(int out, int in, off_t *offset, size_t count)
{
	return sendfile(out, in, offset, count);
}

ULS_EXPORT ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen)
{
	if (len > buflen)
		__chk_fail();
	return read(fd, buf, len);
}

ULS_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags)
{
	if (len > buflen)
		__chk_fail();
	return recv(fd, buf, len, flags);
}

ULS_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
				  struct sockaddr *addr, socklen_t *alen)
{
	if (len > buflen)
		__chk_fail();
	return recvfrom(fd, buf, len, flags, addr, alen);
}
