/* SPDX-License-Identifier: MIT */
/*
 * epoll_wait: passes over the rings and the kernel, fairness cycles across the two, the
 * bell and arming before a sleep, and the wait loop.
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

static int poll_bits(uint32_t e)
{
	return (int)(e & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLERR | EPOLLHUP));
}

static int has_ring(struct uls_epoll *ep)
{
	return ep->nwatch > 0 || ep->norph > 0;
}

/* Is there anything of ulsock's in ep's kernel set, which poll must not take for the
 * program's (settle)? Ring members, ghosts, the bell, a transport's wait descriptor. */
static int holds_ours(struct uls_epoll *ep)
{
	return has_ring(ep) || ep->nghost > 0 || ep->bell >= 0 || ep->wait_fd >= 0;
}

/*
 * Was r reported in this cycle already? (Only sets with rings mix two sources.) An event
 * the kernel hands over for an edge-triggered or one-shot registration it decides is
 * never held back: the kernel would not hand it over again.
 */
static int fair_skip(struct uls_epoll *ep, struct epreg *r)
{
	if (r->told != ep->cycle || !has_ring(ep))
		return 0;
	if (!r->ring && (r->events & (EPOLLET | EPOLLONESHOT)))
		return 0;
	ep->stale++;
	return 1;
}

/* Emits an event for r if it is ready; returns 1 when emitted. */
static int emit(struct uls_epoll *ep, struct epreg *r, int ready, struct epoll_event *out)
{
	struct uls_conn *c;

	if (!ready || r->fired || r->round == ep->round || fair_skip(ep, r))
		return 0;
	if (r->ring && (r->events & EPOLLET)) {
		c = r->oconn ? r->oconn : uls_fd_conn(r->fd);
		uint64_t g = c ? uls_conn_gen(c, poll_bits(r->events)) + (uint64_t)ready : 0;
		if (g == r->gen)
			return 0;
		r->gen = g;
	}
	if (r->events & EPOLLONESHOT)
		r->fired = 1;
	r->round = ep->round;
	r->told = ep->cycle;
	r->seq = ++ep->seq;
	out->events = (uint32_t)ready;
	out->data = r->data;
	return 1;
}

/* Upgrades registrations whose fd became (or stopped being) a ring conn. */
static void refresh(struct uls_epoll *ep, int epfd, struct epreg *r)
{
	int was = r->ring;
	uint32_t kev = uls_kernel_epoll_events(r);

	if (kev != r->kev || was != r->ring) {
		r->kev = kev;
		uls_kernel_ctl(ep, epfd, EPOLL_CTL_MOD, r);
	}
}

static int inner_ready(struct uls_epoll *ep, int arm, int bell, int *bounded, int depth);

/*
 * Arms c for a sleep on bell (-1: none), which joins c first in a multi-threaded process
 * (bell.h); *bounded set where it cannot.
 */
static void arm_with(struct uls_conn *c, int events, int bell, int *bounded)
{
	if (bell >= 0 && !ULS_SINGLE_THREADED() && !uls_bells_add(&c->bells, bell))
		*bounded = 1;
	uls_conn_arm(c, events, bell);
}

/* Arms c for a wait on ep, its bell joining c first when it has one. */
static void arm_conn(struct uls_epoll *ep, struct uls_conn *c, int events)
{
	arm_with(c, events, ep->bell, &ep->bounded);
}

/*
 * Before a wait that arms: the set's bell (made and put into the kernel set on first use,
 * edge-triggered, tagged) starts a new wait. Without one, a multi-threaded process sleeps
 * in bounded slices (bell.h).
 */
static void bell_begin(struct uls_epoll *ep, int epfd)
{
	ep->bounded = 0;
	if (ep->bell < 0) {
		int bell = uls_bell_get();
		struct epoll_event kev = {.events = EPOLLIN | EPOLLET, .data.u64 = BELL_TAG};
		if (bell >= 0 && uls_libc.epoll_ctl(epfd, EPOLL_CTL_ADD, uls_bell_fd(bell), &kev) < 0) {
			uls_bell_put(bell);
			bell = -1;
		}
		ep->bell = bell;
	}
	if (ep->bell < 0) {
		ep->bounded = !ULS_SINGLE_THREADED();
		return;
	}
	uls_bell_begin(ep->bell);
}

/*
 * Before a sleep: a transport's wait descriptor (transport.h) joins the kernel set once,
 * edge-triggered and tagged. A set that cannot take it sleeps in bounded slices.
 */
static void wait_fd_join(struct uls_epoll *ep, int epfd)
{
	int wfd = uls_transports_wait_fd();

	if (wfd < 0 || wfd == ep->wait_fd)
		return;
	struct epoll_event kev = {.events = EPOLLIN | EPOLLET, .data.u64 = WAIT_FD_TAG};
	if (ep->wait_fd >= 0)
		uls_libc.epoll_ctl(epfd, EPOLL_CTL_DEL, ep->wait_fd, NULL);
	if (uls_libc.epoll_ctl(epfd, EPOLL_CTL_ADD, wfd, &kev) == 0 || errno == EEXIST)
		ep->wait_fd = wfd;
	else
		ep->bounded = 1;
}

/* The epoll set of a watched registration that is a nested set, or NULL. */
static struct uls_epoll *nested_set(struct uls_epoll *ep, struct epreg *r)
{
	struct uls_fd *e = uls_fd_get(r->fd);

	if (!e || atomic_load(&e->kind) != ULS_FD_EPOLL || !e->ep || e->ep == ep)
		return NULL;
	return e->ep;
}

/* User-space readiness of one watched registration (0 when the kernel decides). */
static int watched_ready(struct uls_epoll *ep, int epfd, struct epreg *r, int arm, int depth)
{
	if (r->oconn) {
		if (r->fired || !uls_orphan_valid(r))
			return 0;
		if (arm)
			arm_conn(ep, r->oconn, poll_bits(r->events));
		return uls_conn_ready(r->oconn, poll_bits(r->events)) &
		       poll_bits(r->events | EPOLLERR | EPOLLHUP);
	}
	struct uls_epoll *in = depth < 4 ? nested_set(ep, r) : NULL;

	if (in) {
		/* A nested epoll set: readable when one of its accelerated sockets is. Its
		 * members are armed with this set's bell, which this wait sleeps on. */
		int rd = inner_ready(in, arm, ep->bell, &ep->bounded, depth + 1);
		return (r->events & EPOLLIN) && rd ? EPOLLIN : 0;
	}
	refresh(ep, epfd, r);
	if (!r->ring || r->fired)
		return 0;
	struct uls_conn *c = uls_fd_conn(r->fd);
	if (!c)
		return 0;
	if (arm)
		arm_conn(ep, c, poll_bits(r->events));
	int ready = uls_conn_ready(c, poll_bits(r->events));
	/* Urgent data is the kernel's alone (transport/shm/io.c): asked only by who wants EPOLLPRI. */
	if (ready && (r->events & EPOLLPRI)) {
		struct pollfd p = {.fd = r->fd, .events = POLLPRI};
		if (uls_libc.poll(&p, 1, 0) > 0)
			ready |= p.revents & POLLPRI;
	}
	return ready & poll_bits(r->events | EPOLLERR | EPOLLHUP);
}

/*
 * Is one of ep's ring members ready (in a nested set of it too, down to depth 4)? With
 * arm, every one is armed for a sleep, bell joining it first. What poll and an outer set
 * see of a set: whether a wait on it would report a ring member.
 */
static int inner_ready(struct uls_epoll *ep, int arm, int bell, int *bounded, int depth)
{
	int any = 0;

	pthread_mutex_lock(&ep->mu);
	for (int i = 0; i < ep->nwatch && (arm || !any); i++) {
		struct epreg *r = ep->regs[ep->watch[i]];
		if (!r || r->fired)
			continue;
		if (!r->ring) {
			struct uls_epoll *in = depth < 4 ? nested_set(ep, r) : NULL;
			if (in && (r->events & EPOLLIN))
				any |= inner_ready(in, arm, bell, bounded, depth + 1);
			continue;
		}
		struct uls_conn *c = uls_fd_conn(r->fd);
		if (c && arm)
			arm_with(c, poll_bits(r->events), bell, bounded);
		any |= c && (uls_conn_ready(c, poll_bits(r->events)) & poll_bits(r->events));
	}
	for (int i = 0; i < ep->norph && (arm || !any); i++) {
		struct epreg *r = ep->orph[i];
		if (!r->fired && uls_orphan_valid(r)) {
			if (arm)
				arm_with(r->oconn, poll_bits(r->events), bell, bounded);
			any |= uls_conn_ready(r->oconn, poll_bits(r->events)) & poll_bits(r->events);
		}
	}
	pthread_mutex_unlock(&ep->mu);
	return any;
}

/*
 * poll, select and an outer set ask about an epoll descriptor (poll.c, kernel_pass). The
 * kernel's answer counts what ulsock put in the set beside the program's descriptors:
 * the sockets of ring members, ghosts and orphans, readable with a wake-up byte that can
 * come after the ring bytes it announced were read (its waker was slow to send it);
 * nested sets holding such sockets; the set's bell and a transport's wait descriptor.
 * settle() looks at all of them in one poll: a ring member (or nested set) that is
 * ready makes the set readable; wake-up bytes are drained and a readable ghost deleted
 * for real (as kernel_pass does), and the kernel is asked again (SETTLE_AGAIN). With
 * none of them readable the kernel's answer is a plain member's; where the bell or the
 * wait descriptor is readable too, the plain members are asked one by one.
 */
#define SETTLE_AGAIN (-1)

enum settle_kind { SK_RING, SK_ORPHAN, SK_NESTED, SK_GHOST, SK_OWN };

static int kernel_ready(struct uls_epoll *ep, int epfd, int depth);

/* Level readiness of the set's plain members (the kernel decides theirs). */
static int plain_ready(struct uls_epoll *ep)
{
	int n = 0, ready = 0;
	struct pollfd *p = malloc((size_t)(ep->cap ? ep->cap : 1) * sizeof(*p));

	if (!p)
		return POLLIN; /* the kernel's answer stands */
	for (int fd = 0; fd < ep->cap; fd++) {
		struct epreg *r = ep->regs[fd];
		if (r && !r->ring && !r->ghost && !r->closed && !nested_set(ep, r))
			p[n++] = (struct pollfd){.fd = fd, .events = (short)poll_bits(r->events)};
	}
	if (n && uls_libc.poll(p, (nfds_t)n, 0) > 0)
		for (int i = 0; i < n && !ready; i++)
			ready = (p[i].revents & (p[i].events | POLLERR | POLLHUP)) != 0;
	free(p);
	return ready ? POLLIN : 0;
}

static int settle(struct uls_epoll *ep, int epfd, int depth)
{
	int n = 0, max = ep->nwatch + ep->norph + 2, res = 0, ours = 0, own = 0;

	for (int fd = 0; fd < ep->cap; fd++)
		max += ep->regs[fd] && ep->regs[fd]->ghost;
	struct pollfd *p = malloc((size_t)max * (sizeof(*p) + sizeof(struct epreg *) + 1));
	if (!p)
		return POLLIN;
	struct epreg **who = (struct epreg **)(p + max);
	unsigned char *kind = (unsigned char *)(who + max);
#define SETTLE_ADD(f, r_, k_) \
	(p[n] = (struct pollfd){.fd = (f), .events = POLLIN | POLLRDHUP}, who[n] = (r_), kind[n++] = (k_))
	for (int i = 0; i < ep->nwatch; i++) {
		struct epreg *r = ep->regs[ep->watch[i]];
		if (r && r->ring)
			SETTLE_ADD(r->fd, r, SK_RING);
		else if (r && depth < 4 && nested_set(ep, r))
			SETTLE_ADD(r->fd, r, SK_NESTED);
	}
	for (int i = 0; i < ep->norph; i++)
		if (uls_orphan_valid(ep->orph[i]))
			SETTLE_ADD(ep->orph[i]->ofd, ep->orph[i], SK_ORPHAN);
	for (int fd = 0; fd < ep->cap; fd++)
		if (ep->regs[fd] && ep->regs[fd]->ghost)
			SETTLE_ADD(fd, ep->regs[fd], SK_GHOST);
	if (ep->bell >= 0)
		SETTLE_ADD(uls_bell_fd(ep->bell), NULL, SK_OWN);
	if (ep->wait_fd >= 0)
		SETTLE_ADD(ep->wait_fd, NULL, SK_OWN);
#undef SETTLE_ADD
	if (n && uls_libc.poll(p, (nfds_t)n, 0) < 0)
		n = 0;
	for (int i = 0; i < n && !res; i++) {
		struct epreg *r = who[i];
		int krev = p[i].revents, bits = r ? poll_bits(r->events | EPOLLERR | EPOLLHUP) : 0;
		if (!krev)
			continue;
		if (kind[i] == SK_OWN) {
			own = 1;
			continue;
		}
		ours = 1;
		if (kind[i] == SK_GHOST) {
			uls_drop_ghost(ep, epfd, p[i].fd);
		} else if (kind[i] == SK_NESTED) {
			struct uls_epoll *in = nested_set(ep, r);
			if (in && (r->events & EPOLLIN) && !r->fired)
				res = kernel_ready(in, r->fd, depth + 1);
		} else {
			struct uls_conn *c = kind[i] == SK_ORPHAN ? r->oconn : uls_fd_conn(r->fd);
			int ready = c ? uls_ready_merge(c, p[i].fd, poll_bits(r->events), krev) : 0;
			res = !r->fired && (ready & bits) ? POLLIN : 0;
		}
	}
	free(p);
	if (res || !ours)
		return res ? res : !own ? POLLIN : plain_ready(ep);
	return SETTLE_AGAIN;
}

static int kernel_ready(struct uls_epoll *ep, int epfd, int depth)
{
	int r = SETTLE_AGAIN;

	pthread_mutex_lock(&ep->mu);
	for (int tries = 0; tries < 4 && r == SETTLE_AGAIN; tries++) {
		struct pollfd p = {.fd = epfd, .events = POLLIN};
		if (uls_libc.poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN))
			r = 0;
		else
			r = holds_ours(ep) ? settle(ep, epfd, depth) : POLLIN;
	}
	pthread_mutex_unlock(&ep->mu);
	return r == SETTLE_AGAIN ? POLLIN : r;
}

struct uls_epoll *uls_ring_epoll(int fd)
{
	struct uls_fd *e = uls_fd_get(fd);
	struct uls_epoll *ep = e && atomic_load(&e->kind) == ULS_FD_EPOLL ? e->ep : NULL;

	if (!ep)
		return NULL;
	uls_epoll_get(ep);
	pthread_mutex_lock(&ep->mu);
	int ours = holds_ours(ep);
	pthread_mutex_unlock(&ep->mu);
	if (!ours) {
		uls_epoll_put(ep);
		return NULL;
	}
	return ep;
}

int uls_epoll_rings_ready(struct uls_epoll *ep, int arm, int bell, int *bounded)
{
	return inner_ready(ep, arm, bell, bounded, 0) ? POLLIN : 0;
}

int uls_epoll_kernel_ready(struct uls_epoll *ep, int epfd)
{
	return kernel_ready(ep, epfd, 0);
}

/* A registration user_pass may report, and how it is ready. */
struct epcand {
	struct epreg *r;
	int ready;
};

static int by_seq(const void *a, const void *b)
{
	uint64_t x = ((const struct epcand *)a)->r->seq, y = ((const struct epcand *)b)->r->seq;

	return x < y ? -1 : x > y;
}

/* Adds r to the scratch list when it may be reported now; 0 when the list cannot grow. */
static int add_cand(struct uls_epoll *ep, int *nc, struct epreg *r, int ready)
{
	if (!ready || r->fired || r->round == ep->round || fair_skip(ep, r))
		return 1;
	if (*nc == ep->capcand) {
		int cap = ep->capcand ? 2 * ep->capcand : 64;
		struct epcand *m = realloc(ep->cand, (size_t)cap * sizeof(*m));
		if (!m)
			return 0;
		ep->cand = m;
		ep->capcand = cap;
	}
	ep->cand[(*nc)++] = (struct epcand){r, ready};
	return 1;
}

/*
 * Reports the ring members that are ready, up to max. When more are ready than fit, the
 * ones reported longest ago go first, as the kernel's ready list hands out its members
 * (a reported level-triggered member goes to its back): successive waits with a small
 * maxevents go round all of them. Every member is looked at (and armed, with arm), as a
 * wait that sleeps afterwards needs.
 */
static int user_pass(struct uls_epoll *ep, int epfd, struct epoll_event *evs, int max, int arm)
{
	int n = 0, nc = 0;

	for (int i = 0; i < ep->nwatch;) {
		struct epreg *r = ep->regs[ep->watch[i]];
		if (r && !add_cand(ep, &nc, r, watched_ready(ep, epfd, r, arm, 0)))
			break;
		/* Moved back to kernel TCP for good: the kernel reports it from now on. */
		if (r && !r->ring && uls_kernel_for_good(r->fd)) {
			ep->watch[i] = ep->watch[--ep->nwatch];
			continue;
		}
		i++;
	}
	for (int i = 0; i < ep->norph; i++)
		if (!add_cand(ep, &nc, ep->orph[i], watched_ready(ep, epfd, ep->orph[i], arm, 0)))
			break;
	if (nc > max)
		qsort(ep->cand, (size_t)nc, sizeof(*ep->cand), by_seq);
	for (int i = 0; i < nc && n < max; i++)
		n += emit(ep, ep->cand[i].r, ep->cand[i].ready, &evs[n]);
	return n;
}

/*
 * Asks the kernel for up to max events and turns them into the program's, in place: the
 * kernel writes its keyed events into evs and each is read before anything is written at
 * its index or below, so no buffer limits how many one call returns.
 */
static int kernel_pass(struct uls_epoll *ep, int epfd, struct epoll_event *evs, int max,
		       int64_t ns, const sigset_t *mask)
{
	int n = 0, r, ms;

	ms = ns < 0 ? -1 : (int)((ns + 999999) / 1000000);
	ep->kernel_seen = uls_now_ns();
	pthread_mutex_unlock(&ep->mu);
	if (ms != 0)
		uls_transports_idle();
	r = uls_libc.epoll_pwait(epfd, evs, max, ms, mask);
	pthread_mutex_lock(&ep->mu);
	if (r < 0)
		return -errno;
	for (int i = 0; i < r && n < max; i++) {
		struct epoll_event k = evs[i];
		if (k.data.u64 == WAIT_FD_TAG)
			continue; /* the caller's pass over the conns reads the news */
		if (k.data.u64 == BELL_TAG) {
			/* Rung: the caller's pass over the rings follows. */
			if (ep->bell >= 0)
				uls_bell_clear(ep->bell);
			continue;
		}
		if (k.data.u64 & ORPHAN_TAG) {
			struct epreg *o = uls_orphan_of(ep, k.data.u64);
			if (!o || !uls_orphan_valid(o))
				continue;
			int ready = uls_ready_merge(o->oconn, o->ofd, poll_bits(o->events), (int)k.events);
			n += emit(ep, o, ready & poll_bits(o->events | EPOLLERR | EPOLLHUP), &evs[n]);
			continue;
		}
		int fd = (int)k.data.u64;
		struct epreg *reg = fd >= 0 && fd < ep->cap ? ep->regs[fd] : NULL;
		if (!reg)
			continue;
		if (reg->ghost) {
			uls_drop_ghost(ep, epfd, fd);
			continue;
		}
		if (!reg->ring) {
			if (reg->round == ep->round || fair_skip(ep, reg))
				continue;
			/* A nested set that holds ring members: readable for the kernel may mean
			 * wake-up bytes only. */
			struct uls_epoll *in = nested_set(ep, reg);
			if (in && !kernel_ready(in, fd, 1))
				continue;
			reg->round = ep->round;
			reg->told = ep->cycle;
			evs[n].events = k.events;
			evs[n].data = reg->data;
			n++;
			continue;
		}
		struct uls_conn *c = uls_fd_conn(fd);
		int ready = c ? uls_ready_merge(c, fd, poll_bits(reg->events), (int)k.events) : 0;
		n += emit(ep, reg, ready & poll_bits(reg->events | EPOLLERR | EPOLLHUP), &evs[n]);
	}
	return n;
}

#define KERNEL_LOOK_NS 50000u

/*
 * A wait that reported n < max events and skipped members reported in this cycle starts
 * the next cycle and goes on with those, as the kernel's ready list hands out the members
 * it moved to its back: a level-triggered set with more members ready than max gives max
 * events per call. The kernel is asked again only when it was not a moment ago (plain
 * members it skipped are level-triggered: it reports them again at the next look).
 */
static int refill(struct uls_epoll *ep, int epfd, struct epoll_event *evs, int n, int max,
		  const sigset_t *mask)
{
	while (n < max && ep->stale) {
		ep->cycle++;
		ep->stale = 0;
		n += user_pass(ep, epfd, evs + n, max - n, 0);
		if (n < max && uls_now_ns() - ep->kernel_seen >= KERNEL_LOOK_NS) {
			int k = kernel_pass(ep, epfd, evs + n, max - n, 0, mask);
			n += k > 0 ? k : 0;
		}
	}
	return n;
}


int uls_epoll_wait(struct uls_epoll *ep, int epfd, struct epoll_event *evs, int max,
		   int64_t timeout_ns, const sigset_t *mask)
{
	uint64_t start = uls_now_ns(), deadline = start + (uint64_t)(timeout_ns > 0 ? timeout_ns : 0);
	unsigned spins = 0;
	struct uls_spin spin;
	int n, was_current = uls_bell_current;

	if (max <= 0)
		return -EINVAL;
	pthread_mutex_lock(&ep->mu);
	/* Drains in this wait do not ring the set's own bell. */
	uls_bell_current = ep->bell;
	if (!holds_ours(ep)) {
		ep->round++;
		/* Plain descriptors only: in naps while a transport has work nothing wakes
		 * this thread for (poll.c, kernel_ppoll_pushing). A pass that had nothing for
		 * the program before the program's timeout (a registration the kernel holds
		 * and ulsock does not) goes on: epoll_wait without a timeout never returns 0.
		 * A set with anything of ulsock's in the kernel set (ring members, ghosts of
		 * closed ones, the bell, a transport's descriptor) takes the loop below, which
		 * reads all of that. */
		for (;;) {
			int64_t ns = uls_ns_remaining(deadline, timeout_ns);
			uls_nap_cap(&ns);
			n = kernel_pass(ep, epfd, evs, max, ns, mask);
			if (n != 0 || uls_ns_remaining(deadline, timeout_ns) == 0)
				break;
		}
		pthread_mutex_unlock(&ep->mu);
		uls_bell_current = was_current;
		return n;
	}
	/* Only a wait that may spin opens one: a plain set's wait would count as a spin that
	 * met its event at once (spin.c), and teach that spinning pays. */
	uls_spin_start(&spin);
	for (;;) {
		int64_t left = uls_ns_remaining(deadline, timeout_ns);
		ep->round++;
		ep->stale = 0;
		n = user_pass(ep, epfd, evs, max, 0);
		/* While rings keep it busy, a wait asks the kernel (plain descriptors, wake-up
		 * bytes, a peer's FIN) at most every KERNEL_LOOK_NS: one system call saved per
		 * event-loop turn. */
		if (n > 0 && uls_now_ns() - ep->kernel_seen < KERNEL_LOOK_NS)
			break;
		/* Only members reported in this cycle are ready, and the kernel was asked a
		 * moment ago: the next cycle starts without asking it again (one connection in
		 * an event loop is ready on every turn; the question cost a system call each). */
		if (n == 0 && ep->stale && uls_now_ns() - ep->kernel_seen < KERNEL_LOOK_NS) {
			ep->cycle++;
			continue;
		}
		if (n > 0 || ep->stale || left == 0 || (++spins & 63) == 0) {
			if (n == max)
				break;
			int k = kernel_pass(ep, epfd, evs + n, max - n, 0, mask);
			if (k < 0 && n == 0) {
				n = k;
				break;
			}
			n += k > 0 ? k : 0;
			if (n > 0)
				break;
			/* Only members reported in this cycle are ready: the next cycle starts. */
			if (ep->stale) {
				ep->cycle++;
				continue;
			}
			if (left == 0)
				break;
			continue;
		}
		/* Spin unlocked, so epoll_ctl from other threads goes on meanwhile; only for
		 * rings: a set that holds nothing but ulsock's leftovers (ghosts, the bell) and
		 * kernel members sleeps at once, as one without them does. */
		int more = 0;
		if (has_ring(ep)) {
			pthread_mutex_unlock(&ep->mu);
			more = uls_spin_more(&spin);
			pthread_mutex_lock(&ep->mu);
		}
		if (more)
			continue;
		bell_begin(ep, epfd);
		uls_bell_current = ep->bell;
		ep->stale = 0;
		n = user_pass(ep, epfd, evs, max, 1);
		if (n > 0)
			break;
		if (ep->stale) {
			ep->cycle++;
			continue;
		}
		if (ep->bounded && (left < 0 || left > BOUNDED_SLEEP_NS))
			left = BOUNDED_SLEEP_NS;
		wait_fd_join(ep, epfd);
		uls_nap_cap(&left);
		n = kernel_pass(ep, epfd, evs, max, left, mask);
		if (n == 0 && ep->stale) {
			ep->cycle++;
			continue;
		}
		if (n != 0 || uls_ns_remaining(deadline, timeout_ns) == 0)
			break;
	}
	if (n > 0)
		n = refill(ep, epfd, evs, n, max, mask);
	pthread_mutex_unlock(&ep->mu);
	uls_bell_current = was_current;
	return n;
}
