/* SPDX-License-Identifier: MIT */
/*
 * Ways around the interposed functions:
 * - syscall(2) with a socket call's number: dispatched to the interposed function, so a
 *   program that calls the kernel through glibc's syscall() is served like any other;
 * - preadv2/pwritev2 at offset -1, which on a socket are readv/writev with flags;
 * - io_uring: a ring the kernel works on behind ulsock's back. Once a process sets one
 *   up (liburing's io_uring_queue_init*, or the raw system call through syscall()), its
 *   accelerated sockets move back to kernel TCP in place and it accelerates no new ones;
 * - a seccomp filter (OpenSSH's sandbox allows little beyond read, write and poll, and
 *   kills the process on ulsock's own send, recv and setsockopt): the same, before it
 *   is installed;
 * - POSIX AIO: glibc's helper threads call the kernel directly, so the connection of an
 *   accelerated socket handed to aio_read, aio_write or lio_listio moves back first.
 * A program that makes its system calls itself (a static binary, Go) is not seen at all:
 * it never takes the fast path, and a ulsock peer falls back (README, limitations).
 */
#include <aio.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <errno.h>
#include <limits.h>
#include <linux/aio_abi.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "preload.h"
#include "../core/config.h"
#include "../core/conn.h"
#include "../core/fdtable.h"
#include "../core/log.h"

/* ---- leaving the rings ---- */

/*
 * Every accelerated socket of this process moves back to kernel TCP, and no new one is
 * accelerated (core/conn.c reads off_reason). Best effort per connection: a peer that
 * does not answer in time keeps that one on the ring, with an error logged.
 */
static void leave_rings(const char *why)
{
	const char *none = NULL;

	if (!atomic_compare_exchange_strong(&uls_cfg.off_reason, &none, why))
		return; /* done already */
	uls_info("%s: accelerated sockets move back to kernel TCP, new ones stay there", why);
	int max = uls_fd_max();
	for (int fd = 0; fd < max; fd++) {
		struct uls_conn *c = uls_fd_conn(fd);
		if (!uls_conn_accelerated(c))
			continue;
		int r = uls_conn_revert(c, fd, 2000);
		if (r < 0)
			uls_err("fd=%d: %s, but it could not move back to kernel TCP: %s", fd, why,
				strerror(-r));
	}
}

#define WHY_URING "the process uses io_uring"
#define WHY_SECCOMP "the process installs a seccomp filter"

/* ---- preadv2 and pwritev2 ---- */

typedef ssize_t (*rwv2_fn)(int, const struct iovec *, int, off_t, int);



static ssize_t rwv2(int write, int fd, const struct iovec *iov, int iovcnt, off_t offset,
		    int flags)
{
	static rwv2_fn real[2];
	struct uls_conn *c;
	int mf;

	uls_ensure_init();
	if (!real[write])
		real[write] = (rwv2_fn)dlsym(RTLD_NEXT, write ? "pwritev2" : "preadv2");
	c = uls_fd_accel(fd);
	/* Any other offset: the kernel's ESPIPE or EINVAL, with nothing moved. */
	if (!c || offset != -1)
		return real[write](fd, iov, iovcnt, offset, flags);
	if (iovcnt < 0 || iovcnt > IOV_MAX)
		return uls_ret(-EINVAL);
	/* The RWF_ flags a socket takes (the kernel's kiocb_set_rw_flags): RWF_NOWAIT
	 * means do not wait, the others change nothing on a socket; any other flag is
	 * EOPNOTSUPP. */
	if (flags & ~(RWF_HIPRI | RWF_DSYNC | RWF_SYNC | RWF_NOWAIT | RWF_APPEND | 0x20))
		return uls_ret(-EOPNOTSUPP);
	mf = (flags & RWF_NOWAIT) ? MSG_DONTWAIT : 0;
	if (write)
		return uls_ret(uls_io_send(c, fd, iov, iovcnt, mf));
	struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
	return uls_ret(uls_io_recv(c, fd, &m, mf));
}

ULS_EXPORT ssize_t preadv2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags)
{
	return rwv2(0, fd, iov, iovcnt, offset, flags);
}

ULS_EXPORT ssize_t pwritev2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags)
{
	return rwv2(1, fd, iov, iovcnt, offset, flags);
}

ULS_EXPORT ssize_t preadv64v2(int fd, const struct iovec *iov, int iovcnt, off_t offset,
			      int flags)
{
	return rwv2(0, fd, iov, iovcnt, offset, flags);
}

ULS_EXPORT ssize_t pwritev64v2(int fd, const struct iovec *iov, int iovcnt, off_t offset,
			       int flags)
{
	return rwv2(1, fd, iov, iovcnt, offset, flags);
}

/* ---- POSIX AIO ---- */

static int aio_leaves(int fd)
{
	struct uls_conn *c = uls_fd_accel(fd);

	if (!c)
		return 0;
	int r = uls_conn_revert(c, fd, 2000);
	if (r < 0)
		uls_err("fd=%d: POSIX AIO, but it could not move back to kernel TCP: %s", fd,
			strerror(-r));
	return r;
}

typedef int (*aio_fn)(struct aiocb *);
typedef int (*lio_fn)(int, struct aiocb *const[], int, struct sigevent *);

static int aio_call(const char *name, struct aiocb *cb)
{
	aio_fn real = (aio_fn)dlsym(RTLD_NEXT, name);

	uls_ensure_init();
	if (cb) {
		int r = aio_leaves(cb->aio_fildes);
		if (r < 0)
			return (int)uls_ret(-EAGAIN);
	}
	return real ? real(cb) : (int)uls_ret(-ENOSYS);
}

ULS_EXPORT int aio_read(struct aiocb *cb)
{
	return aio_call("aio_read", cb);
}

ULS_EXPORT int aio_write(struct aiocb *cb)
{
	return aio_call("aio_write", cb);
}

/* The 64 variants take struct aiocb64, the same struct on 64-bit systems. */
ULS_EXPORT int aio_read64(struct aiocb64 *cb)
{
	return aio_call("aio_read64", (struct aiocb *)cb);
}

ULS_EXPORT int aio_write64(struct aiocb64 *cb)
{
	return aio_call("aio_write64", (struct aiocb *)cb);
}

static int lio_call(const char *name, int mode, struct aiocb *const list[], int n,
		    struct sigevent *sev)
{
	lio_fn real = (lio_fn)dlsym(RTLD_NEXT, name);

	uls_ensure_init();
	for (int i = 0; list && i < n; i++)
		if (list[i] && list[i]->aio_lio_opcode != LIO_NOP &&
		    aio_leaves(list[i]->aio_fildes) < 0)
			return (int)uls_ret(-EAGAIN);
	return real ? real(mode, list, n, sev) : (int)uls_ret(-ENOSYS);
}

ULS_EXPORT int lio_listio(int mode, struct aiocb *const list[], int n, struct sigevent *sev)
{
	return lio_call("lio_listio", mode, list, n, sev);
}

ULS_EXPORT int lio_listio64(int mode, struct aiocb64 *const list[], int n,
			    struct sigevent *sev)
{
	return lio_call("lio_listio64", mode, (struct aiocb *const *)list, n, sev);
}

/* ---- the kernel's own AIO (io_submit) ---- */

/* Each accelerated socket an iocb names moves back first (glibc has no wrapper: libaio,
 * and syscall() through the dispatch below). */
static void kernel_aio_leaves(long nr, struct iocb **list)
{
	for (long i = 0; list && i < nr; i++)
		if (list[i])
			aio_leaves((int)list[i]->aio_fildes);
}

typedef struct io_context *io_context_t;
int io_submit(io_context_t ctx, long nr, struct iocb *list[]);

ULS_EXPORT int io_submit(io_context_t ctx, long nr, struct iocb *list[])
{
	typedef int (*submit_fn)(io_context_t, long, struct iocb *[]);
	submit_fn real = (submit_fn)dlsym(RTLD_NEXT, "io_submit");

	uls_ensure_init();
	kernel_aio_leaves(nr, list);
	return real ? real(ctx, nr, list) : -ENOSYS;
}

/* A fork through syscall(): fork's handlers around it, as for _Fork (stdio.c). */
static long raw_fork(void)
{
	uls_atfork_prepare();
	long pid = uls_raw_syscall(SYS_fork, 0, 0, 0, 0, 0, 0);
	if (pid == 0)
		uls_atfork_child();
	return pid;
}

/* The clone system call as a fork (no CLONE_VM, no stack): fork's handlers around it. */
static long raw_clone_fork(long flags, long ptid, long ctid, long tls)
{
	uls_atfork_prepare();
	long pid = uls_raw_syscall(SYS_clone, flags, 0, ptid, ctid, tls, 0);
	if (pid == 0)
		uls_atfork_child();
	return pid;
}

/* ---- io_uring through liburing ---- */

/*
 * liburing's set-up functions, when the program links it: one interposition each, with
 * their arguments passed on untouched (the rings never see them).
 */
#define URING_WRAP(name, params, args)                                                 \
	ULS_EXPORT int name params                                                     \
	{                                                                              \
		typedef int(*fn_t) params;                                             \
		fn_t real = (fn_t)dlsym(RTLD_NEXT, #name);                             \
		uls_ensure_init();                                                     \
		leave_rings(WHY_URING);                                                \
		return real ? real args : -ENOSYS;                                     \
	}

struct io_uring;
struct io_uring_params;
int io_uring_queue_init(unsigned entries, struct io_uring *ring, unsigned flags);
int io_uring_queue_init_params(unsigned entries, struct io_uring *ring,
			       struct io_uring_params *p);
int io_uring_queue_init_mem(unsigned entries, struct io_uring *ring, struct io_uring_params *p,
			    void *buf, size_t size);
int io_uring_setup(unsigned entries, struct io_uring_params *p);
URING_WRAP(io_uring_queue_init, (unsigned entries, struct io_uring *ring, unsigned flags),
	   (entries, ring, flags))
URING_WRAP(io_uring_queue_init_params,
	   (unsigned entries, struct io_uring *ring, struct io_uring_params *p),
	   (entries, ring, p))
URING_WRAP(io_uring_queue_init_mem,
	   (unsigned entries, struct io_uring *ring, struct io_uring_params *p, void *buf,
	    size_t size),
	   (entries, ring, p, buf, size))
URING_WRAP(io_uring_setup, (unsigned entries, struct io_uring_params *p), (entries, p))

/* ---- seccomp ---- */

typedef int (*prctl_fn)(int, unsigned long, unsigned long, unsigned long, unsigned long);

ULS_EXPORT int prctl(int option, ...)
{
	static prctl_fn real;
	unsigned long a[4];
	va_list ap;

	va_start(ap, option);
	for (int i = 0; i < 4; i++)
		a[i] = va_arg(ap, unsigned long);
	va_end(ap);
	uls_ensure_init();
	if (!real)
		real = (prctl_fn)dlsym(RTLD_NEXT, "prctl");
	if (option == PR_SET_SECCOMP && !uls_vfork_child())
		leave_rings(WHY_SECCOMP);
	return real(option, a[0], a[1], a[2], a[3]);
}

/* ---- syscall(2) ---- */

/* pselect6's sixth argument: the signal mask and its size. */
struct sigset_arg {
	const sigset_t *ss;
	size_t len;
};

static long dispatch(long nr, long a, long b, long c, long d, long e, long f, int *served)
{
	*served = 1;
	switch (nr) {
	case SYS_read:
		return read((int)a, (void *)b, (size_t)c);
	case SYS_write:
		return write((int)a, (const void *)b, (size_t)c);
	case SYS_readv:
		return readv((int)a, (const struct iovec *)b, (int)c);
	case SYS_writev:
		return writev((int)a, (const struct iovec *)b, (int)c);
	case SYS_preadv2:
		/* The offset comes in two halves (pos_l, pos_h); 64-bit takes pos_l. */
		return preadv2((int)a, (const struct iovec *)b, (int)c, (off_t)d, (int)f);
	case SYS_pwritev2:
		return pwritev2((int)a, (const struct iovec *)b, (int)c, (off_t)d, (int)f);
	case SYS_recvfrom:
		return recvfrom((int)a, (void *)b, (size_t)c, (int)d, (struct sockaddr *)e,
				(socklen_t *)f);
	case SYS_sendto:
		return sendto((int)a, (const void *)b, (size_t)c, (int)d,
			      (const struct sockaddr *)e, (socklen_t)f);
	case SYS_recvmsg:
		return recvmsg((int)a, (struct msghdr *)b, (int)c);
	case SYS_sendmsg:
		return sendmsg((int)a, (const struct msghdr *)b, (int)c);
	case SYS_recvmmsg:
		return recvmmsg((int)a, (struct mmsghdr *)b, (unsigned)c, (int)d,
				(struct timespec *)e);
	case SYS_sendmmsg:
		return sendmmsg((int)a, (struct mmsghdr *)b, (unsigned)c, (int)d);
	case SYS_sendfile:
		return sendfile((int)a, (int)b, (off_t *)c, (size_t)d);
	case SYS_splice:
		return splice((int)a, (loff_t *)b, (int)c, (loff_t *)d, (size_t)e,
			      (unsigned)f);
	case SYS_socket:
		return socket((int)a, (int)b, (int)c);
	case SYS_connect:
		return connect((int)a, (const struct sockaddr *)b, (socklen_t)c);
	case SYS_accept:
		return accept((int)a, (struct sockaddr *)b, (socklen_t *)c);
	case SYS_accept4:
		return accept4((int)a, (struct sockaddr *)b, (socklen_t *)c, (int)d);
	case SYS_shutdown:
		return shutdown((int)a, (int)b);
	case SYS_close:
		return close((int)a);
	case SYS_close_range:
		return close_range((unsigned)a, (unsigned)b, (int)c);
	case SYS_dup:
		return dup((int)a);
	case SYS_dup2:
		return dup2((int)a, (int)b);
	case SYS_dup3:
		return dup3((int)a, (int)b, (int)c);
	case SYS_fcntl:
		return fcntl((int)a, (int)b, c);
	case SYS_ioctl:
		return ioctl((int)a, (unsigned long)b, c);
	case SYS_getsockopt:
		return getsockopt((int)a, (int)b, (int)c, (void *)d, (socklen_t *)e);
	case SYS_setsockopt:
		return setsockopt((int)a, (int)b, (int)c, (const void *)d, (socklen_t)e);
	case SYS_poll:
		return poll((struct pollfd *)a, (nfds_t)b, (int)c);
	case SYS_ppoll:
		return ppoll((struct pollfd *)a, (nfds_t)b, (const struct timespec *)c,
			     (const sigset_t *)d);
	case SYS_select:
		return select((int)a, (fd_set *)b, (fd_set *)c, (fd_set *)d, (struct timeval *)e);
	case SYS_pselect6: {
		const struct sigset_arg *s = (const struct sigset_arg *)f;
		return pselect((int)a, (fd_set *)b, (fd_set *)c, (fd_set *)d,
			       (const struct timespec *)e, s ? s->ss : NULL);
	}
	case SYS_epoll_create:
		return epoll_create((int)a);
	case SYS_epoll_create1:
		return epoll_create1((int)a);
	case SYS_epoll_ctl:
		return epoll_ctl((int)a, (int)b, (int)c, (struct epoll_event *)d);
	case SYS_epoll_wait:
		return epoll_wait((int)a, (struct epoll_event *)b, (int)c, (int)d);
	case SYS_epoll_pwait:
		return epoll_pwait((int)a, (struct epoll_event *)b, (int)c, (int)d,
				   (const sigset_t *)e);
	case SYS_epoll_pwait2:
		return epoll_pwait2((int)a, (struct epoll_event *)b, (int)c,
				    (const struct timespec *)d, (const sigset_t *)e);
	case SYS_io_submit:
		kernel_aio_leaves(b, (struct iocb **)c);
		break;
	case SYS_fork:
	case SYS_vfork: /* a vfork may be a fork; one made here could not return to the caller */
		return raw_fork();
	case SYS_clone:
		/* Without CLONE_VM and a stack of its own, a fork with flags: fork's handlers. */
		if (!(a & CLONE_VM) && !b)
			return raw_clone_fork(a, c, d, e);
		break;
	case SYS_execve:
		return execve((const char *)a, (char *const *)b, (char *const *)c);
	case SYS_execveat:
		return execveat((int)a, (const char *)b, (char *const *)c, (char *const *)d, (int)e);
	case SYS_pidfd_getfd:
		return pidfd_getfd((int)a, (int)b, (unsigned)c);
	case SYS_io_uring_setup:
		leave_rings(WHY_URING);
		break;
	case SYS_seccomp:
		if ((a == SECCOMP_SET_MODE_FILTER || a == SECCOMP_SET_MODE_STRICT) &&
		    !uls_vfork_child())
			leave_rings(WHY_SECCOMP);
		break;
	}
	*served = 0;
	return 0;
}

ULS_EXPORT long syscall(long nr, ...)
{
	long a[6];
	va_list ap;
	int served;

	va_start(ap, nr);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	/* An allocator may call syscall() while the library starts (redis's jemalloc
	 * does): straight to the kernel until it is ready. */
	if (!atomic_load_explicit(&uls_ready, memory_order_acquire) || uls_is_inside())
		return uls_raw_syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
	long r = dispatch(nr, a[0], a[1], a[2], a[3], a[4], a[5], &served);
	if (served)
		return r;
	return uls_syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}

/*
 * The double-underscore names glibc still exports for old programs and libraries: each
 * is the function without the underscores, and is served as that one.
 */
ssize_t __read(int fd, void *buf, size_t len);
ssize_t __write(int fd, const void *buf, size_t len);
ssize_t __send(int fd, const void *buf, size_t len, int flags);
int __close(int fd);
int __connect(int fd, const struct sockaddr *addr, socklen_t len);
int __dup2(int oldfd, int newfd);
int __fcntl(int fd, int cmd, ...);
int __poll(struct pollfd *fds, nfds_t n, int timeout);
int __select(int n, fd_set *r, fd_set *w, fd_set *x, struct timeval *tv);

ULS_EXPORT ssize_t __read(int fd, void *buf, size_t len)
{
	return read(fd, buf, len);
}

ULS_EXPORT ssize_t __write(int fd, const void *buf, size_t len)
{
	return write(fd, buf, len);
}

ULS_EXPORT ssize_t __send(int fd, const void *buf, size_t len, int flags)
{
	return send(fd, buf, len, flags);
}

ULS_EXPORT int __close(int fd)
{
	return close(fd);
}

ULS_EXPORT int __connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	return connect(fd, addr, len);
}

ULS_EXPORT int __dup2(int oldfd, int newfd)
{
	return dup2(oldfd, newfd);
}

ULS_EXPORT int __fcntl(int fd, int cmd, ...)
{
	va_list ap;

	va_start(ap, cmd);
	long arg = va_arg(ap, long);
	va_end(ap);
	return fcntl(fd, cmd, arg);
}

ULS_EXPORT int __poll(struct pollfd *fds, nfds_t n, int timeout)
{
	return poll(fds, n, timeout);
}

ULS_EXPORT int __select(int n, fd_set *r, fd_set *w, fd_set *x, struct timeval *tv)
{
	return select(n, r, w, x, tv);
}
