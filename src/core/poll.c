/* SPDX-License-Identifier: MIT */
/*
 * poll and select over kernel descriptors and ring conns, and the readiness helpers the
 * epoll files share (event_int.h): which descriptors are ring conns, what the kernel is
 * asked for them, and how its answer merges with the rings'.
 */
#include "event.h"
#include "event_int.h"

#include <errno.h>
#include <stdlib.h>

#include "bell.h"
#include "conn.h"
#include "../os/cpu.h"
#include "fdtable.h"
#include "spin.h"
#include "../os/libc.h"

#define KERNEL_RX_BITS (POLLIN | POLLRDHUP | POLLPRI)
#define KERNEL_TX_BITS (POLLOUT)

/* The conn of fd when its readiness is (partly) in user space, else NULL. */
struct uls_conn *uls_ring_conn(int fd)
{
	struct uls_conn *c = uls_fd_conn(fd);

	/* A client still waiting for its server counts: it must arm wake-ups for the ring. */
	if (!uls_conn_accelerated(c))
		return NULL;
	return c;
}

int uls_kernel_events_for(struct uls_conn *c, int events)
{
	int parts = uls_conn_kernel_parts(c), k = POLLIN | POLLRDHUP | (events & POLLPRI);

	if ((parts & ULS_KERNEL_TX) && (events & POLLOUT))
		k |= POLLOUT;
	return k;
}

/* Readiness of a ring conn given what the kernel reported for its socket. */
int uls_ready_merge(struct uls_conn *c, int fd, int events, int krev)
{
	int was = uls_conn_kernel_parts(c), parts, r;

	/* Not with an error pending: the drain's read would take it, and the kernel keeps
	 * reporting it until the program's own call does. */
	if ((krev & (POLLIN | POLLRDHUP | POLLHUP)) && !(krev & POLLERR) && !(was & ULS_KERNEL_RX))
		uls_conn_drain(c, fd);
	/* The peer may be gone, and a sender waiting for room on the transport would wait
	 * for it for ever (a shm server whose client never sent a byte, killed). */
	else if ((krev & (POLLRDHUP | POLLHUP | POLLERR)) && (events & POLLOUT) &&
		 (was & ULS_KERNEL_RX) && !(was & ULS_KERNEL_TX) && c->tp->tcp_end)
		c->tp->tcp_end(c, fd);
	parts = uls_conn_kernel_parts(c);
	/* The drain followed the peer back to TCP (revert.c): the kernel's readiness was
	 * taken before it read the last wake-ups there, and is asked again. */
	if ((parts & ULS_KERNEL_RX) && !(was & ULS_KERNEL_RX)) {
		struct pollfd p = {.fd = uls_conn_fd(c, fd), .events = (short)(events | POLLRDHUP)};
		krev = uls_libc.poll(&p, 1, 0) > 0 ? p.revents : 0;
	}
	r = uls_conn_ready(c, events);
	/*
	 * Errors and hang-ups of the socket are the kernel's, whichever way the bytes go (a
	 * send after the peer closed goes to the kernel, whose reset ends it), and so is
	 * urgent data, which never travels on the rings (transport/shm/io.c, MSG_OOB).
	 */
	r |= krev & (POLLHUP | POLLERR | (events & POLLPRI));
	if (parts & ULS_KERNEL_RX)
		r |= krev & (KERNEL_RX_BITS | POLLHUP | POLLERR) & (events | POLLHUP | POLLERR);
	if (parts & ULS_KERNEL_TX)
		r |= krev & KERNEL_TX_BITS & events;
	return r;
}

int64_t uls_ns_remaining(uint64_t deadline, int64_t timeout_ns)
{
	uint64_t now;

	if (timeout_ns < 0)
		return -1;
	now = uls_now_ns();
	return now >= deadline ? 0 : (int64_t)(deadline - now);
}

int uls_nap_cap(int64_t *left)
{
	int64_t nap = (int64_t)uls_transports_nap_ns();

	if (!nap || (*left >= 0 && *left <= nap))
		return 0;
	*left = nap;
	return 1;
}

static int kernel_ppoll(struct pollfd *k, nfds_t n, int64_t ns, const sigset_t *mask)
{
	struct timespec ts, *tp = NULL;
	int r;

	if (ns >= 0) {
		ts.tv_sec = ns / 1000000000;
		ts.tv_nsec = ns % 1000000000;
		tp = &ts;
	}
	if (ns != 0)
		uls_transports_idle();
	r = uls_libc.ppoll(k, n, tp, mask);
	return r < 0 ? -errno : r;
}

/*
 * A wait on plain descriptors only. While a transport has work that nothing will wake
 * this thread for (uls_transports_nap_ns: a fabric provider with manual progress moves
 * posted sends only in calls into it), the wait goes in naps of that length, the
 * transports' idle work before each (kernel_ppoll), so that a program that sends on a
 * fabric connection and then waits on other descriptors does not hold its last bytes
 * back; otherwise one kernel wait.
 */
static int kernel_ppoll_pushing(struct pollfd *k, nfds_t n, int64_t timeout_ns,
				uint64_t deadline, const sigset_t *mask)
{
	for (;;) {
		int64_t ns = uls_ns_remaining(deadline, timeout_ns);
		int napped = uls_nap_cap(&ns);
		int r = kernel_ppoll(k, n, ns, mask);
		if (!napped || r != 0)
			return r;
	}
}

/*
 * What ulsock decides of a descriptor in a poll: a ring conn, or an epoll set with ring
 * members (event_int.h: the kernel would count wake-up bytes as readiness), held.
 */
struct pollsrc {
	struct uls_conn *c;
	struct uls_epoll *ep;
};

static int user_ready(struct pollfd *f, struct pollsrc *s)
{
	int unused = 0;

	if (s->c)
		return uls_conn_ready(s->c, f->events);
	return s->ep && (f->events & POLLIN) ? uls_epoll_rings_ready(s->ep, 0, -1, &unused) : 0;
}

/* One pass: user readiness of ring conns and sets merged with a kernel snapshot in k. */
static int poll_collect(struct pollfd *fds, struct pollfd *k, struct pollsrc *src, nfds_t n)
{
	int count = 0;

	for (nfds_t i = 0; i < n; i++) {
		int krev = k[i].revents, r = krev;
		/* A number closed meanwhile by another thread: the kernel's answer stands. */
		if (krev & POLLNVAL)
			r = POLLNVAL;
		else if (src[i].c)
			r = uls_ready_merge(src[i].c, fds[i].fd, fds[i].events, krev);
		else if (src[i].ep && user_ready(&fds[i], &src[i]))
			r = krev | POLLIN;
		else if (src[i].ep && (krev & POLLIN))
			r = (krev & ~POLLIN) | uls_epoll_kernel_ready(src[i].ep, fds[i].fd);
		fds[i].revents = (short)r;
		count += fds[i].revents != 0;
	}
	return count;
}

static int any_user_ready(struct pollfd *fds, struct pollsrc *src, nfds_t n)
{
	for (nfds_t i = 0; i < n; i++)
		if (user_ready(&fds[i], &src[i]))
			return 1;
	return 0;
}

/*
 * Before the first sleep of a poll: the thread's bell joins the kernel wait set (at k[n])
 * and becomes the current one. Returns the bell or -1; *bounded is set when the sleep
 * must not last (another thread could take a wake-up this one needs: bell.h).
 */
static int poll_bell(struct pollfd *k, nfds_t n, int *bounded)
{
	int bell = uls_bell_thread();

	if (bell < 0) {
		*bounded = !ULS_SINGLE_THREADED();
		return -1;
	}
	uls_bell_begin(bell);
	k[n] = (struct pollfd){.fd = uls_bell_fd(bell), .events = POLLIN};
	uls_bell_current = bell;
	return bell;
}

int uls_poll(struct pollfd *fds, nfds_t n, int64_t timeout_ns, const sigset_t *mask)
{
	struct pollfd kst[66], *k = kst;
	struct pollsrc sst[64], *src = sst;
	uint64_t start = uls_now_ns(), deadline = start + (uint64_t)(timeout_ns > 0 ? timeout_ns : 0);
	int nconn = 0, r, bell = -1, bounded = 0, tried_bell = 0, was_current = uls_bell_current;
	unsigned spins = 0;
	struct uls_spin spin;

	if (n > 64) {
		k = malloc((n + 2) * sizeof(*k));
		src = malloc(n * sizeof(*src));
		if (!k || !src) {
			free(k == kst ? NULL : k);
			free(src == sst ? NULL : src);
			return -ENOMEM;
		}
	}
	for (nfds_t i = 0; i < n; i++) {
		struct pollsrc *s = &src[i];
		s->c = fds[i].fd >= 0 ? uls_ring_conn(fds[i].fd) : NULL;
		/* Held, as the kernel holds the files a poll names: a close by another thread
		 * leaves the conn to this call (conn.c, kept_for_calls). */
		if (s->c && !uls_conn_hold(s->c))
			s->c = NULL;
		s->ep = !s->c && fds[i].fd >= 0 && (fds[i].events & POLLIN) ? uls_ring_epoll(fds[i].fd)
									    : NULL;
		nconn += s->c || s->ep;
		k[i] = fds[i];
		if (s->c)
			k[i].events = (short)uls_kernel_events_for(s->c, fds[i].events);
	}
	if (!nconn) {
		r = kernel_ppoll_pushing(fds, n, timeout_ns, deadline, mask);
		goto out;
	}
	uls_spin_start(&spin);
	for (;;) {
		int64_t left = uls_ns_remaining(deadline, timeout_ns);
		int sleeping = 0;
		if (any_user_ready(fds, src, n) || left == 0 || (++spins & 63) == 0) {
			r = kernel_ppoll(k, n + (bell >= 0), 0, mask);
		} else if (uls_spin_more(&spin)) {
			continue;
		} else {
			if (bell < 0 && !bounded && !tried_bell++)
				bell = poll_bell(k, n, &bounded);
			for (nfds_t i = 0; i < n; i++) {
				struct pollsrc *s = &src[i];
				/* The bell first, then the arm (bell.h). */
				if (s->c && bell >= 0 && !ULS_SINGLE_THREADED() &&
				    !uls_bells_add(&s->c->bells, bell))
					bounded = 1;
				if (s->c)
					uls_conn_arm(s->c, fds[i].events, bell);
				else if (s->ep)
					uls_epoll_rings_ready(s->ep, 1, bell, &bounded);
			}
			if (any_user_ready(fds, src, n))
				continue;
			sleeping = 1;
			if (bounded && (left < 0 || left > BOUNDED_SLEEP_NS))
				left = BOUNDED_SLEEP_NS;
			uls_nap_cap(&left);
			/* After the bell, a transport's own wait descriptor (transport.h): its news
			 * are read by the pass over the conns that follows. */
			nfds_t nk = n + (bell >= 0);
			int wfd = uls_transports_wait_fd();
			if (wfd >= 0)
				k[nk++] = (struct pollfd){.fd = wfd, .events = POLLIN};
			r = kernel_ppoll(k, nk, left, mask);
			if (r > 0 && wfd >= 0 && k[nk - 1].revents)
				r--;
		}
		if (r < 0)
			goto out;
		if (bell >= 0 && k[n].revents)
			uls_bell_clear(bell);
		r = poll_collect(fds, k, src, n);
		if (r > 0 || left == 0 || (sleeping && uls_ns_remaining(deadline, timeout_ns) == 0))
			goto out;
	}
out:
	uls_bell_current = was_current;
	for (nfds_t i = 0; i < n; i++) {
		if (src[i].c)
			uls_conn_unhold(src[i].c);
		if (src[i].ep)
			uls_epoll_put(src[i].ep);
	}
	if (k != kst)
		free(k);
	if (src != sst)
		free(src);
	return r;
}
