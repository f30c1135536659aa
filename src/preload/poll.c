/* SPDX-License-Identifier: MIT */
/* Interposed readiness calls. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>

#include "preload.h"
#include "../core/conn.h"
#include "../core/event.h"
#include "../os/cpu.h"
#include "../core/fdtable.h"

extern void __chk_fail(void) __attribute__((noreturn));

static int64_t ms_to_ns(int ms)
{
	return ms < 0 ? -1 : (int64_t)ms * 1000000;
}

static int64_t ts_to_ns(const struct timespec *ts)
{
	return ts ? (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec : -1;
}

ULS_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	if (!uls_enter())
		return uls_libc.poll(fds, n, timeout);
	return (int)uls_ret(uls_poll(fds, n, ms_to_ns(timeout), NULL));
}

ULS_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	return poll(fds, n, timeout);
}

ULS_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts,
		     const sigset_t *mask)
{
	if (!uls_enter())
		return uls_libc.ppoll(fds, n, ts, mask);
	return (int)uls_ret(uls_poll(fds, n, ts_to_ns(ts), mask));
}

ULS_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts,
			   const sigset_t *mask, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	return ppoll(fds, n, ts, mask);
}

static struct uls_epoll *ep_of(int epfd)
{
	struct uls_fd *e = uls_fd_get(epfd);

	if (!e || atomic_load(&e->kind) != ULS_FD_EPOLL)
		return NULL;
	return e->ep;
}

/* Is ulsock's poll needed: a connection, or an epoll set that may hold one (poll.c)? */
static int any_conn(int nfds, fd_set *r, fd_set *w)
{
	for (int fd = 0; fd < nfds; fd++)
		if (((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w))) &&
		    (uls_fd_conn(fd) || (r && FD_ISSET(fd, r) && ep_of(fd))))
			return 1;
	return 0;
}

static int select_common(int nfds, fd_set *r, fd_set *w, fd_set *x, int64_t ns,
			 const sigset_t *mask)
{
	struct pollfd *p;
	int n = 0, count = 0, res;

	if (nfds < 0 || nfds > FD_SETSIZE)
		return (int)uls_ret(-EINVAL);
	p = calloc((size_t)(nfds ? nfds : 1), sizeof(*p));
	if (!p)
		return (int)uls_ret(-ENOMEM);
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;
		if (r && FD_ISSET(fd, r))
			ev |= POLLIN;
		if (w && FD_ISSET(fd, w))
			ev |= POLLOUT;
		if (x && FD_ISSET(fd, x))
			ev |= POLLPRI;
		if (ev)
			p[n++] = (struct pollfd){.fd = fd, .events = ev};
	}
	res = uls_poll(p, (nfds_t)n, ns, mask);
	if (res < 0) {
		free(p);
		return (int)uls_ret(res);
	}
	for (int i = 0; i < n; i++)
		if (p[i].revents & POLLNVAL) {
			free(p);
			return (int)uls_ret(-EBADF);
		}
	if (r)
		FD_ZERO(r);
	if (w)
		FD_ZERO(w);
	if (x)
		FD_ZERO(x);
	for (int i = 0; i < n; i++) {
		short ev = p[i].events, rv = p[i].revents;
		if (r && (ev & POLLIN) && (rv & (POLLIN | POLLHUP | POLLERR | POLLRDHUP))) {
			FD_SET(p[i].fd, r);
			count++;
		}
		if (w && (ev & POLLOUT) && (rv & (POLLOUT | POLLERR))) {
			FD_SET(p[i].fd, w);
			count++;
		}
		if (x && (ev & POLLPRI) && (rv & POLLPRI)) {
			FD_SET(p[i].fd, x);
			count++;
		}
	}
	free(p);
	return count;
}

ULS_EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *x, struct timeval *tv)
{
	if (!uls_enter() || !any_conn(nfds, r, w))
		return uls_libc.select(nfds, r, w, x, tv);
	int64_t ns = tv ? (int64_t)tv->tv_sec * 1000000000 + (int64_t)tv->tv_usec * 1000 : -1;
	uint64_t start = uls_now_ns();
	int res = select_common(nfds, r, w, x, ns, NULL);
	if (tv && res >= 0) {
		/* Linux reports the time left. */
		int64_t left = ns - (int64_t)(uls_now_ns() - start);
		if (left < 0)
			left = 0;
		tv->tv_sec = left / 1000000000;
		tv->tv_usec = (left % 1000000000) / 1000;
	}
	return res;
}

ULS_EXPORT int pselect(int nfds, fd_set *r, fd_set *w, fd_set *x, const struct timespec *ts,
		       const sigset_t *mask)
{
	if (!uls_enter() || !any_conn(nfds, r, w))
		return uls_libc.pselect(nfds, r, w, x, ts, mask);
	return select_common(nfds, r, w, x, ts_to_ns(ts), mask);
}

static int epoll_created(int epfd)
{
	struct uls_fd *e = uls_fd_get(epfd);

	if (epfd < 0 || !e)
		return epfd;
	uls_fd_clear(epfd);
	e->ep = uls_epoll_create(epfd);
	atomic_store(&e->kind, e->ep ? ULS_FD_EPOLL : ULS_FD_PLAIN);
	return epfd;
}

ULS_EXPORT int epoll_create(int size)
{
	if (!uls_enter()) /* a library's inside ulsock: close-on-exec (preload/socket.c) */
		return size > 0 ? uls_libc.epoll_create1(EPOLL_CLOEXEC) : uls_libc.epoll_create(size);
	return epoll_created(uls_libc.epoll_create(size));
}

ULS_EXPORT int epoll_create1(int flags)
{
	if (!uls_enter())
		return uls_libc.epoll_create1(flags | EPOLL_CLOEXEC);
	return epoll_created(uls_libc.epoll_create1(flags));
}

ULS_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	struct uls_epoll *ep = uls_enter() ? ep_of(epfd) : NULL;

	if (!ep)
		return uls_libc.epoll_ctl(epfd, op, fd, ev);
	return (int)uls_ret(uls_epoll_ctl(ep, epfd, op, fd, ev));
}

static int ep_wait(int epfd, struct epoll_event *evs, int max, int64_t ns, const sigset_t *mask)
{
	struct uls_epoll *ep = uls_enter() ? ep_of(epfd) : NULL;

	if (!ep) {
		int ms = ns < 0 ? -1 : (int)((ns + 999999) / 1000000);
		return uls_libc.epoll_pwait(epfd, evs, max, ms, mask);
	}
	return (int)uls_ret(uls_epoll_wait(ep, epfd, evs, max, ns, mask));
}

ULS_EXPORT int epoll_wait(int epfd, struct epoll_event *evs, int max, int timeout)
{
	return ep_wait(epfd, evs, max, ms_to_ns(timeout), NULL);
}

ULS_EXPORT int epoll_pwait(int epfd, struct epoll_event *evs, int max, int timeout,
			   const sigset_t *mask)
{
	return ep_wait(epfd, evs, max, ms_to_ns(timeout), mask);
}

ULS_EXPORT int epoll_pwait2(int epfd, struct epoll_event *evs, int max,
			    const struct timespec *ts, const sigset_t *mask)
{
	return ep_wait(epfd, evs, max, ts_to_ns(ts), mask);
}
