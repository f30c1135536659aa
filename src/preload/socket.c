/* SPDX-License-Identifier: MIT */
/* Interposed set-up, teardown, option and descriptor calls. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/close_range.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/pidfd.h>
#include <sys/syscall.h>
#include <linux/sockios.h>
#include <unistd.h>

#include "preload.h"
#include "../core/config.h"
#include "../core/conn.h"
#include "../core/event.h"
#include "../core/fdtable.h"
#include "../core/handoff.h"
#include "../os/ownfd.h"

static int is_tcp(int domain, int type, int protocol)
{
	int base = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);

	return (domain == AF_INET || domain == AF_INET6) && base == SOCK_STREAM &&
	       (protocol == 0 || protocol == IPPROTO_TCP);
}

/*
 * Descriptors that a library ulsock calls opens (libfabric's providers: their sockets,
 * socket pairs and epoll sets) are close-on-exec, whatever it asked: they are ulsock's,
 * and a program the process execs must not inherit them (os/guard.h).
 */
#define INSIDE_CLOEXEC SOCK_CLOEXEC

/*
 * Such a descriptor is the library's for good: marked plain, so that a scan of the
 * table (a fork's or an exec's move back, say) never classifies it, and never takes a
 * provider's own TCP connection for a program's socket that came without ulsock state.
 */
static int library_fd(int fd)
{
	struct uls_fd *e = uls_fd_get(fd);

	if (e) {
		uls_fd_clear(fd);
		atomic_store(&e->kind, ULS_FD_PLAIN);
	}
	return fd;
}

ULS_EXPORT int socket(int domain, int type, int protocol)
{
	if (!uls_enter())
		return library_fd(uls_libc.socket(domain, type | INSIDE_CLOEXEC, protocol));
	int fd = uls_libc.socket(domain, type, protocol);
	/* The spare segment's descriptor was the one the program lacked: give it back. */
	if (fd < 0 && errno == EMFILE && uls_transports_fd_shortage())
		fd = uls_libc.socket(domain, type, protocol);
	struct uls_fd *e = uls_fd_get(fd);

	if (e) {
		uls_fd_clear(fd);
		e->nonblock = (type & SOCK_NONBLOCK) != 0;
		atomic_store(&e->kind, is_tcp(domain, type, protocol) ? ULS_FD_TCP : ULS_FD_PLAIN);
	}
	return fd;
}

ULS_EXPORT int socketpair(int domain, int type, int protocol, int sv[2])
{
	if (!uls_enter())
		return uls_libc.socketpair(domain, type | INSIDE_CLOEXEC, protocol, sv);
	return uls_libc.socketpair(domain, type, protocol, sv);
}

ULS_EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	if (!uls_enter())
		return uls_libc.connect(fd, addr, len);
	struct uls_fd *e = uls_fd_classify(fd);
	struct uls_conn *c = NULL;
	int r, err;

	if (!e || atomic_load(&e->kind) != ULS_FD_TCP || !addr ||
	    (addr->sa_family != AF_INET && addr->sa_family != AF_INET6))
		return uls_libc.connect(fd, addr, len);
	struct uls_conn_hints hints = {.sndbuf = e->sndbuf, .rcvbuf = e->rcvbuf};
	/* Born until the entry names it, when a transport took it (conn.h): an exec's walk
	 * of the table would miss it. One on kernel TCP is born at once. */
	uls_conn_birth_begin();
	c = uls_conn_connect_prepare(fd, addr, len, &hints);
	int born = uls_conn_accelerated(c);
	if (!born)
		uls_conn_birth_end();
	r = uls_libc.connect(fd, addr, len);
	err = r < 0 ? errno : 0;
	if (c)
		c = uls_conn_connect_done(c, fd, err);
	if (c) {
		atomic_store(&c->nonblock, e->nonblock);
		c->rcvtimeo_ns = e->rcvtimeo_ns;
		c->sndtimeo_ns = e->sndtimeo_ns;
		if (e->rcvlowat > 1)
			uls_conn_adopt_rcvlowat(c, fd, e->rcvlowat);
		e->conn = c;
		atomic_store(&e->kind, ULS_FD_CONN);
	}
	if (born)
		uls_conn_birth_end();
	errno = err;
	return r;
}

/*
 * The kernel's accept fills ulsock's own buffer (the conn needs the peer's address
 * anyway); the program gets its copy, truncated and with the full length, as accept does.
 */
static int do_accept(int lfd, struct sockaddr *addr, socklen_t *len, int flags, int four)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct uls_fd *e, *le;
	struct uls_conn *c;
	int fd, lowat;

	if (!uls_enter())
		return library_fd(uls_libc.accept4(lfd, addr, len, flags | INSIDE_CLOEXEC));
	/* An accepted socket inherits the listener's options, its SO_RCVLOWAT among them. */
	le = uls_fd_get(lfd);
	lowat = le ? le->rcvlowat : 0;
	fd = four ? uls_libc.accept4(lfd, (struct sockaddr *)&ss, &sl, flags)
		  : uls_libc.accept(lfd, (struct sockaddr *)&ss, &sl);
	if (fd < 0 && errno == EMFILE && uls_transports_fd_shortage()) {
		sl = sizeof(ss);
		fd = four ? uls_libc.accept4(lfd, (struct sockaddr *)&ss, &sl, flags)
			  : uls_libc.accept(lfd, (struct sockaddr *)&ss, &sl);
	}
	if (fd < 0)
		return fd;
	if (addr && len) {
		memcpy(addr, &ss, *len < sl ? *len : sl);
		*len = sl;
	} else if (len) {
		*len = sl;
	}
	e = uls_fd_get(fd);
	if (!e)
		return fd;
	uls_fd_clear(fd);
	if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6) {
		atomic_store(&e->kind, ULS_FD_PLAIN);
		return fd;
	}
	uls_conn_birth_begin(); /* as in connect */
	c = uls_conn_accept(fd, (struct sockaddr *)&ss, sl);
	if (!c) {
		uls_conn_birth_end();
		atomic_store(&e->kind, ULS_FD_PLAIN);
		return fd;
	}
	atomic_store(&c->nonblock, (flags & SOCK_NONBLOCK) != 0);
	if (lowat > 1)
		uls_conn_adopt_rcvlowat(c, fd, lowat);
	e->conn = c;
	atomic_store(&e->kind, ULS_FD_CONN);
	uls_conn_birth_end();
	return fd;
}

ULS_EXPORT int accept(int lfd, struct sockaddr *addr, socklen_t *len)
{
	return do_accept(lfd, addr, len, 0, 0);
}

ULS_EXPORT int accept4(int lfd, struct sockaddr *addr, socklen_t *len, int flags)
{
	return do_accept(lfd, addr, len, flags, 1);
}

static void forget(int fd)
{
	struct uls_fd *e = uls_fd_get(fd);

	if (e && atomic_load(&e->kind) == ULS_FD_EPOLL && e->ep)
		uls_epoll_put(e->ep);
	uls_epoll_forget_fd(fd);
	uls_fd_clear(fd);
}

ULS_EXPORT int close(int fd)
{
	if (!uls_enter())
		return uls_libc.close(fd);
	struct uls_fd *e = uls_fd_get(fd);
	struct uls_conn *c;

	if (uls_vfork_child())
		return uls_libc.close(fd); /* the parent's tables are not the child's (clone.c) */
	if (uls_own_fd_is(fd))
		return 0; /* the library's own: out of the program's reach (os/ownfd.h) */

	if (!e || atomic_load(&e->kind) != ULS_FD_CONN || !e->conn) {
		forget(fd);
		return uls_libc.close(fd);
	}
	c = e->conn;
	forget(fd);
	return uls_conn_close(c, fd, 1);
}

ULS_EXPORT int shutdown(int fd, int how)
{
	if (!uls_enter())
		return uls_libc.shutdown(fd, how);
	struct uls_conn *c = uls_fd_conn(fd);

	if (!uls_conn_accelerated(c))
		return uls_libc.shutdown(fd, how);
	return (int)uls_ret(uls_conn_shutdown(c, fd, how));
}

static uint64_t tv_ns(const void *val, socklen_t len)
{
	const struct timeval *tv = val;

	if (!val || len < sizeof(*tv))
		return 0;
	return (uint64_t)tv->tv_sec * 1000000000u + (uint64_t)tv->tv_usec * 1000u;
}

/*
 * After a move back for TCP_ZEROCOPY_RECEIVE: the bytes the program could read before it
 * (had) are on their way into the kernel's queue, since the peer sends again on TCP what
 * this side had not read (protocol.md 8, 9.10), and may still be: the kernel maps only
 * what has come. Waits until they have, up to 2 s, as a read of them would.
 */
static void zerocopy_wait_queue(int fd, int had)
{
	for (int ms = 0; ms < 2000; ms++) {
		int q = 0;
		if (uls_libc.ioctl(fd, FIONREAD, &q) < 0 || q >= had)
			return;
		uls_libc.poll(NULL, 0, 1); /* 1 ms */
	}
}

ULS_EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	if (!uls_enter())
		return uls_libc.getsockopt(fd, level, name, val, len);
	struct uls_conn *c;

	/* Receiving by mapping the socket's pages is the kernel's: its bytes must be there. */
	if (level == IPPROTO_TCP && name == TCP_ZEROCOPY_RECEIVE && (c = uls_fd_accel(fd)) != NULL) {
		int had = 0;
		if (uls_conn_inq(c, fd, &had) < 0)
			had = 0;
		int err = uls_conn_revert(c, fd, 2000);
		if (err < 0)
			return (int)uls_ret(err);
		zerocopy_wait_queue(fd, had);
	}
	int r = uls_libc.getsockopt(fd, level, name, val, len);

	if (r == 0 && level == IPPROTO_TCP && name == TCP_NODELAY && val && len &&
	    *len >= sizeof(int) && (c = uls_fd_accel(fd)) != NULL &&
	    atomic_load(&c->nodelay_forced))
		*(int *)val = atomic_load(&c->app_nodelay);
	if (r == 0 && level == SOL_SOCKET && name == SO_RCVLOWAT && val && len &&
	    *len >= sizeof(int) && (c = uls_fd_accel(fd)) != NULL && atomic_load(&c->rcvlowat))
		*(int *)val = atomic_load(&c->rcvlowat);
	if (r == 0 && level == SOL_SOCKET && name == SO_PEEK_OFF && val && len &&
	    *len >= sizeof(int) && (c = uls_fd_accel(fd)) != NULL)
		*(int *)val = atomic_load(&c->peek_off);
	if (r == 0 && level == IPPROTO_TCP && name == TCP_INFO && val && len &&
	    (c = uls_fd_accel(fd)) != NULL)
		uls_conn_fix_tcp_info(c, val, *len);
	return r;
}

ULS_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	if (!uls_enter())
		return uls_libc.setsockopt(fd, level, name, val, len);
	struct uls_conn *c;
	struct uls_fd *e;
	int r;

	if (level == IPPROTO_TCP && name == TCP_NODELAY && val && len >= sizeof(int) &&
	    (c = uls_fd_accel(fd)) != NULL) {
		/* Once wake-ups flow the socket keeps TCP_NODELAY: the choice is remembered. */
		return uls_conn_set_app_nodelay(c, fd, *(const int *)val);
	}
	if (level == SOL_SOCKET && name == SO_RCVLOWAT && val && len >= sizeof(int) &&
	    (c = uls_fd_accel(fd)) != NULL)
		return uls_conn_set_rcvlowat(c, fd, *(const int *)val);
	if (level == IPPROTO_TCP && name == TCP_INQ && val && len >= sizeof(int) &&
	    (c = uls_fd_accel(fd)) != NULL) {
		r = uls_libc.setsockopt(fd, level, name, val, len);
		if (r == 0)
			atomic_store(&c->tcp_inq, *(const int *)val != 0);
		return r;
	}
	r = uls_libc.setsockopt(fd, level, name, val, len);

	if (r < 0 || level != SOL_SOCKET)
		return r;
	/* The kernel took the value: the ring follows it. */
	if ((name == SO_ZEROCOPY || name == SO_PEEK_OFF) && val && len >= sizeof(int) &&
	    (c = uls_fd_accel(fd)) != NULL) {
		if (name == SO_ZEROCOPY)
			uls_conn_zc_set(c, *(const int *)val != 0);
		else
			atomic_store(&c->peek_off, *(const int *)val < 0 ? -1 : *(const int *)val);
	}
	e = uls_fd_get(fd);
	if (!e)
		return r;
	uint8_t kind = atomic_load(&e->kind);
	if (kind != ULS_FD_TCP && kind != ULS_FD_CONN)
		return r;
	/* Kernel options stay the kernel's; ulsock also sizes rings and timeouts from them. */
	if (name == SO_RCVLOWAT && kind == ULS_FD_TCP) {
		int eff = 1;
		socklen_t el = sizeof(eff);
		if (uls_libc.getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &eff, &el) == 0)
			e->rcvlowat = eff;
	} else if ((name == SO_SNDBUF || name == SO_RCVBUF) && val && len >= sizeof(int)) {
		int v = *(const int *)val;
		if (name == SO_SNDBUF)
			e->sndbuf = v > 0 ? (uint32_t)v : 0;
		else
			e->rcvbuf = v > 0 ? (uint32_t)v : 0;
	} else if (name == SO_LINGER && val && len >= sizeof(struct linger) && kind == ULS_FD_CONN &&
		   e->conn) {
		const struct linger *l = val;
		atomic_store(&e->conn->linger_reset, l->l_onoff && l->l_linger == 0);
	} else if (name == SO_RCVTIMEO || name == SO_SNDTIMEO) {
		uint64_t ns = tv_ns(val, len);
		if (name == SO_RCVTIMEO)
			e->rcvtimeo_ns = ns;
		else
			e->sndtimeo_ns = ns;
		if (kind == ULS_FD_CONN && e->conn) {
			if (name == SO_RCVTIMEO)
				e->conn->rcvtimeo_ns = ns;
			else
				e->conn->sndtimeo_ns = ns;
		}
	}
	return r;
}

static void set_nonblock(int fd, int on)
{
	struct uls_fd *e = uls_fd_get(fd);

	if (!e)
		return;
	e->nonblock = (uint8_t)on;
	if (atomic_load(&e->kind) == ULS_FD_CONN && e->conn)
		atomic_store(&e->conn->nonblock, on);
}

static int dup_result(int oldfd, int newfd)
{
	if (newfd >= 0)
		uls_fd_dup(oldfd, newfd);
	return newfd;
}

ULS_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	long arg;
	int r;
	struct uls_conn *c;

	va_start(ap, cmd);
	arg = va_arg(ap, long);
	va_end(ap);
	if (!uls_enter())
		return uls_libc.fcntl(fd, cmd, arg);
	r = uls_libc.fcntl(fd, cmd, arg);
	if (r < 0 || uls_vfork_child())
		return r;
	if (cmd == F_SETFL) {
		set_nonblock(fd, (arg & O_NONBLOCK) != 0);
		if ((arg & O_ASYNC) && (c = uls_fd_accel(fd)) != NULL)
			uls_conn_async(c, fd);
	} else if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) {
		dup_result(fd, r);
		uls_handoff_stdio(r);
	}
	return r;
}

ULS_EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	long arg;

	va_start(ap, cmd);
	arg = va_arg(ap, long);
	va_end(ap);
	return fcntl(fd, cmd, arg);
}

ULS_EXPORT int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	void *arg;
	struct uls_conn *c;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (!uls_enter())
		return uls_libc.ioctl(fd, req, arg);
	if (req == SIOCATMARK && arg && (c = uls_fd_accel(fd)) != NULL)
		return (int)uls_ret(uls_conn_atmark(c, fd, arg));
	if (req == FIONREAD || req == SIOCOUTQ) {
		c = uls_fd_conn(fd);
		if (c && uls_conn_kernel_parts(c) != (ULS_KERNEL_RX | ULS_KERNEL_TX) && arg)
			return (int)uls_ret(req == FIONREAD ? uls_conn_inq(c, fd, arg)
							    : uls_conn_outq(c, fd, arg));
	}
	int r = uls_libc.ioctl(fd, req, arg);
	if (r == 0 && req == FIONBIO && arg)
		set_nonblock(fd, *(int *)arg != 0);
	if (r == 0 && req == FIOASYNC && arg && *(int *)arg && (c = uls_fd_accel(fd)) != NULL)
		uls_conn_async(c, fd);
	return r;
}

ULS_EXPORT int dup(int fd)
{
	if (!uls_enter() || uls_vfork_child())
		return uls_libc.dup(fd);
	int r = dup_result(fd, uls_libc.dup(fd));
	uls_handoff_stdio(r); /* close(0); dup(sock): inetd's way onto standard input */
	return r;
}

/*
 * pidfd_getfd: a copy of another process's descriptor. An accelerated socket is found
 * again through its segment (as after SCM_RIGHTS), now, so that this process joins the
 * connection's side (uls_conn_join_side) before the giver can close its copy: the giver
 * then knows the socket is held elsewhere. A taker without ulsock reads the socket past
 * it (README, limitations).
 */
ULS_EXPORT int pidfd_getfd(int pidfd, int targetfd, unsigned int flags)
{
	uls_ensure_init();
	int fd = uls_libc.pidfd_getfd ? uls_libc.pidfd_getfd(pidfd, targetfd, flags)
		      : (int)uls_syscall(SYS_pidfd_getfd, pidfd, targetfd, flags);
	if (fd >= 0 && !uls_vfork_child()) {
		uls_fd_clear(fd);
		uls_fd_classify(fd);
	}
	return fd;
}

/* dup2 and dup3 close newfd first, inside the kernel: drop what ulsock held for it. */
static void before_replace(int oldfd, int newfd)
{
	struct uls_fd *e = uls_fd_get(newfd);

	if (oldfd == newfd || !e)
		return;
	if (atomic_load(&e->kind) == ULS_FD_CONN && e->conn) {
		struct uls_conn *c = e->conn;
		forget(newfd);
		uls_conn_close(c, newfd, 0);
		return;
	}
	forget(newfd);
}

ULS_EXPORT int dup2(int oldfd, int newfd)
{
	if (!uls_enter() || uls_vfork_child())
		return uls_libc.dup2(oldfd, newfd);
	if (fcntl(oldfd, F_GETFD) < 0)
		return -1;
	if (oldfd != newfd)
		uls_own_fd_evict(newfd);
	before_replace(oldfd, newfd);
	int r = uls_libc.dup2(oldfd, newfd);
	if (oldfd == newfd)
		return r;
	dup_result(oldfd, r);
	uls_handoff_stdio(r);
	return r;
}

ULS_EXPORT int dup3(int oldfd, int newfd, int flags)
{
	if (!uls_enter() || uls_vfork_child())
		return uls_libc.dup3(oldfd, newfd, flags);
	if (oldfd != newfd && fcntl(oldfd, F_GETFD) >= 0) {
		uls_own_fd_evict(newfd);
		before_replace(oldfd, newfd);
	}
	int r = dup_result(oldfd, uls_libc.dup3(oldfd, newfd, flags));
	uls_handoff_stdio(r);
	return r;
}

/* ---- closefrom and close_range: around the library's own descriptors ---- */

/* The kernel's close_range over [lo, hi], skipping the library's own descriptors. */
static void close_gaps(unsigned lo, unsigned hi)
{
	int own[64], k;

	do {
		k = uls_own_fds_in(lo, hi, own, 64);
		for (int i = 0; i < k; i++) {
			if ((unsigned)own[i] > lo)
				uls_syscall(SYS_close_range, lo, (unsigned)own[i] - 1, 0);
			lo = (unsigned)own[i] + 1; /* a descriptor is an int: no wrap */
		}
	} while (k == 64);
	if (lo <= hi)
		uls_syscall(SYS_close_range, lo, hi, 0);
}

/*
 * Closes the open descriptors in [first, last] but the library's own, each through
 * close(), so that connections and epoll sets among them are taken down as a close()
 * would. The numbers come from /proc/self/fd by getdents64 into a stack buffer (no
 * allocation: a fork child of a threaded program calls this before exec). Without /proc,
 * the library closes what it tracks and the kernel the rest.
 */
static void close_through(unsigned first, unsigned last)
{
	_Alignas(8) char buf[4096];
	int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	long n = -1;

	while (dir >= 0 && (n = uls_syscall(SYS_getdents64, dir, buf, sizeof(buf))) > 0) {
		for (long off = 0; off < n;) {
			struct dirent64 *de = (struct dirent64 *)(buf + off);
			char *end;
			unsigned long fd = strtoul(de->d_name, &end, 10);

			off += de->d_reclen;
			if (end == de->d_name || *end || fd > UINT_MAX || (int)fd == dir ||
			    fd < first || fd > last || uls_own_fd_is((int)fd))
				continue;
			close((int)fd);
		}
	}
	if (dir >= 0)
		uls_libc.close(dir);
	if (n == 0)
		return;
	int top = uls_fd_max() - 1; /* -1 without a table: nothing tracked */
	for (unsigned fd = first; top >= 0 && fd <= last && fd <= (unsigned)top; fd++) {
		struct uls_fd *e = uls_fd_get((int)fd);
		if (e && atomic_load(&e->kind) != ULS_FD_UNKNOWN && !uls_own_fd_is((int)fd))
			close((int)fd);
	}
	close_gaps(first, last);
}

ULS_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
	/* Marking close-on-exec closes nothing; bad arguments get the kernel's answer. */
	if (!uls_enter() || (flags & CLOSE_RANGE_CLOEXEC) || first > last || uls_vfork_child() ||
	    (flags & ~(CLOSE_RANGE_CLOEXEC | CLOSE_RANGE_UNSHARE)))
		return (int)uls_syscall(SYS_close_range, first, last, flags);
	if ((flags & CLOSE_RANGE_UNSHARE) && unshare(CLONE_FILES) < 0)
		return -1;
	close_through(first, last);
	return 0;
}

ULS_EXPORT void closefrom(int lowfd)
{
	if (!uls_enter() || uls_vfork_child()) {
		uls_syscall(SYS_close_range, lowfd < 0 ? 0u : (unsigned)lowfd, ~0u, 0);
		return;
	}
	close_through(lowfd < 0 ? 0 : (unsigned)lowfd, UINT_MAX);
}

/* ---- the setuid family: the library's idea of its user follows the program's ---- */

/*
 * A server that starts as root and gives its workers another user (nginx, postgres,
 * sshd's children) must name and check segments as that user from then on: the spare
 * segment made as the old one is dropped, and the uid asked again (core/config.c).
 */
static int uid_result(int r)
{
	if (r == 0 && !uls_vfork_child()) {
		uls_uid_changed();
		uls_transports_uid_changed();
	}
	return r;
}

ULS_EXPORT int setuid(uid_t uid)
{
	uls_ensure_init();
	return uid_result(uls_libc.setuid(uid));
}

ULS_EXPORT int seteuid(uid_t uid)
{
	uls_ensure_init();
	return uid_result(uls_libc.seteuid(uid));
}

ULS_EXPORT int setreuid(uid_t ruid, uid_t euid)
{
	uls_ensure_init();
	return uid_result(uls_libc.setreuid(ruid, euid));
}

ULS_EXPORT int setresuid(uid_t ruid, uid_t euid, uid_t suid)
{
	uls_ensure_init();
	return uid_result(uls_libc.setresuid(ruid, euid, suid));
}
