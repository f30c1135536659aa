/* SPDX-License-Identifier: MIT */
#include "event.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "conn.h"
#include "cpu.h"
#include "fdtable.h"
#include "log.h"
#include "spin.h"
#include "../preload/libc.h"

#define KERNEL_RX_BITS (POLLIN | POLLRDHUP | POLLPRI)
#define KERNEL_TX_BITS (POLLOUT)

/* The conn of fd when its readiness is (partly) in user space, else NULL. */
static struct uls_conn *ring_conn(int fd)
{
	struct uls_conn *c = uls_fd_conn(fd);

	/* A client still waiting for its server counts: it must arm wake-ups for the ring. */
	if (!c || !c->seg.hdr || atomic_load(&c->path) == ULS_PATH_KERNEL)
		return NULL;
	return c;
}

static int kernel_events_for(struct uls_conn *c, int events)
{
	int parts = uls_conn_kernel_parts(c), k = POLLIN | POLLRDHUP;

	if ((parts & ULS_KERNEL_TX) && (events & POLLOUT))
		k |= POLLOUT;
	return k;
}

/* Readiness of a ring conn given what the kernel reported for its socket. */
static int merge(struct uls_conn *c, int fd, int events, int krev)
{
	int parts = uls_conn_kernel_parts(c), r;

	if ((krev & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) && !(parts & ULS_KERNEL_RX))
		uls_conn_drain(c, fd);
	parts = uls_conn_kernel_parts(c);
	r = uls_conn_ready(c, events);
	if (parts & ULS_KERNEL_RX)
		r |= krev & (KERNEL_RX_BITS | POLLHUP | POLLERR) & (events | POLLHUP | POLLERR);
	if (parts & ULS_KERNEL_TX)
		r |= krev & KERNEL_TX_BITS & events;
	return r;
}

static int64_t remaining(uint64_t deadline, int64_t timeout_ns)
{
	uint64_t now;

	if (timeout_ns < 0)
		return -1;
	now = uls_now_ns();
	return now >= deadline ? 0 : (int64_t)(deadline - now);
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
		uls_seg_reap();
	r = uls_libc.ppoll(k, n, tp, mask);
	return r < 0 ? -errno : r;
}

/* One pass: user readiness of ring conns merged with a kernel snapshot in k. */
static int poll_collect(struct pollfd *fds, struct pollfd *k, struct uls_conn **cs, nfds_t n,
			int have_kernel)
{
	int count = 0;

	for (nfds_t i = 0; i < n; i++) {
		int krev = have_kernel ? k[i].revents : 0;
		fds[i].revents = cs[i] ? (short)merge(cs[i], fds[i].fd, fds[i].events, krev)
				       : (short)krev;
		count += fds[i].revents != 0;
	}
	return count;
}

static int any_user_ready(struct pollfd *fds, struct uls_conn **cs, nfds_t n)
{
	for (nfds_t i = 0; i < n; i++)
		if (cs[i] && uls_conn_ready(cs[i], fds[i].events))
			return 1;
	return 0;
}

int uls_poll(struct pollfd *fds, nfds_t n, int64_t timeout_ns, const sigset_t *mask)
{
	struct pollfd kst[64], *k = kst;
	struct uls_conn *cst[64], **cs = cst;
	uint64_t start = uls_now_ns(), deadline = start + (uint64_t)(timeout_ns > 0 ? timeout_ns : 0);
	int nconn = 0, r;
	unsigned spins = 0;
	struct uls_spin spin;

	if (n > 64) {
		k = malloc(n * sizeof(*k));
		cs = malloc(n * sizeof(*cs));
		if (!k || !cs) {
			free(k == kst ? NULL : k);
			free(cs == cst ? NULL : cs);
			return -ENOMEM;
		}
	}
	for (nfds_t i = 0; i < n; i++) {
		cs[i] = fds[i].fd >= 0 ? ring_conn(fds[i].fd) : NULL;
		nconn += cs[i] != NULL;
		k[i] = fds[i];
		if (cs[i])
			k[i].events = (short)kernel_events_for(cs[i], fds[i].events);
	}
	if (!nconn) {
		r = kernel_ppoll(fds, n, timeout_ns, mask);
		goto out;
	}
	uls_spin_start(&spin);
	for (;;) {
		int64_t left = remaining(deadline, timeout_ns);
		int sleeping = 0;
		if (any_user_ready(fds, cs, n) || left == 0 || (++spins & 63) == 0) {
			r = kernel_ppoll(k, n, 0, mask);
		} else if (uls_spin_more(&spin)) {
			continue;
		} else {
			for (nfds_t i = 0; i < n; i++)
				if (cs[i])
					uls_conn_arm(cs[i], fds[i].events);
			if (any_user_ready(fds, cs, n))
				continue;
			sleeping = 1;
			r = kernel_ppoll(k, n, left, mask);
		}
		if (r < 0)
			goto out;
		r = poll_collect(fds, k, cs, n, 1);
		if (r > 0 || left == 0 || (sleeping && remaining(deadline, timeout_ns) == 0))
			goto out;
	}
out:
	if (k != kst)
		free(k);
	if (cs != cst)
		free(cs);
	return r;
}

/* ---- epoll ---- */

struct epreg {
	int fd;
	uint32_t events;  /* what the program asked for */
	epoll_data_t data; /* what the program registered */
	uint64_t gen;     /* edge-triggered: readiness generation last reported */
	int fired;        /* EPOLLONESHOT: reported, disabled until EPOLL_CTL_MOD */
	int ring;         /* the fd is a ring conn: ulsock decides its readiness */
	uint32_t kev;     /* events registered with the kernel */
	unsigned round;   /* last wait round that reported it */
	int ghost;        /* deleted by the program, still registered with the kernel */
	struct uls_conn *ghost_conn; /* the ghost's conn and its segment's inode: an fd */
	uint64_t ghost_ino;          /* closed behind ulsock's back has another */
	int closed;       /* its fd was closed: the kernel may still report it (a dup) */
	struct uls_conn *oconn; /* an orphan (see orphan()): its conn, and a descriptor */
	int ofd;                /* of its socket still open in this process */
};

/* Kernel data of an orphan: the tag and the epreg's address (user addresses are < 2^63). */
#define ORPHAN_TAG (1ull << 63)

struct uls_epoll {
	pthread_mutex_t mu;
	int refs;
	struct epreg **regs; /* indexed by fd */
	int cap;
	unsigned round;
	int *watch;  /* fds whose readiness ulsock may decide: TCP sockets, nested epolls */
	int nwatch, capwatch;
	int next;    /* where the next scan of watch starts, so that all get their turn */
	int epfd;    /* the descriptor the last epoll_ctl named, -1 once closed */
	int shared;  /* another process may use the kernel epoll set (fork): no ghosts */
	uint64_t kernel_seen; /* when a wait last asked the kernel (ns) */
	struct epreg **orph;  /* orphans: registrations that outlived their fd */
	int norph, caporph;
};

static pthread_mutex_t eplist_mu = PTHREAD_MUTEX_INITIALIZER;
static struct uls_epoll **eplist;
static int neplist, capeplist;

struct uls_epoll *uls_epoll_create(int epfd)
{
	struct uls_epoll *ep = calloc(1, sizeof(*ep));

	if (!ep)
		return NULL;
	ep->epfd = epfd;
	pthread_mutex_init(&ep->mu, NULL);
	ep->refs = 1;
	pthread_mutex_lock(&eplist_mu);
	if (neplist == capeplist) {
		int nc = capeplist ? capeplist * 2 : 16;
		struct uls_epoll **nl = realloc(eplist, (size_t)nc * sizeof(*nl));
		if (nl) {
			eplist = nl;
			capeplist = nc;
		}
	}
	if (neplist < capeplist)
		eplist[neplist++] = ep;
	pthread_mutex_unlock(&eplist_mu);
	return ep;
}

void uls_epoll_get(struct uls_epoll *ep)
{
	pthread_mutex_lock(&ep->mu);
	ep->refs++;
	pthread_mutex_unlock(&ep->mu);
}

void uls_epoll_put(struct uls_epoll *ep)
{
	int last;

	pthread_mutex_lock(&ep->mu);
	last = --ep->refs == 0;
	pthread_mutex_unlock(&ep->mu);
	if (!last)
		return;
	pthread_mutex_lock(&eplist_mu);
	for (int i = 0; i < neplist; i++) {
		if (eplist[i] == ep) {
			eplist[i] = eplist[--neplist];
			break;
		}
	}
	pthread_mutex_unlock(&eplist_mu);
	for (int i = 0; i < ep->cap; i++)
		free(ep->regs[i]);
	for (int i = 0; i < ep->norph; i++)
		free(ep->orph[i]);
	free(ep->orph);
	free(ep->regs);
	free(ep->watch);
	pthread_mutex_destroy(&ep->mu);
	free(ep);
}

static int grow(struct uls_epoll *ep, int fd)
{
	int nc = ep->cap ? ep->cap : 64;
	struct epreg **nr;

	while (nc <= fd)
		nc *= 2;
	nr = realloc(ep->regs, (size_t)nc * sizeof(*nr));
	if (!nr)
		return -ENOMEM;
	memset(nr + ep->cap, 0, (size_t)(nc - ep->cap) * sizeof(*nr));
	ep->regs = nr;
	ep->cap = nc;
	return 0;
}

/* Sockets that may become accelerated, and epoll sets that may hold some, are watched. */
static int worth_watching(int fd)
{
	struct uls_fd *e = uls_fd_classify(fd);
	uint8_t kind = e ? atomic_load(&e->kind) : ULS_FD_PLAIN;

	return kind == ULS_FD_CONN || kind == ULS_FD_TCP || kind == ULS_FD_EPOLL;
}

static void watch_add(struct uls_epoll *ep, int fd)
{
	if (!worth_watching(fd))
		return;
	if (ep->nwatch == ep->capwatch) {
		int nc = ep->capwatch ? ep->capwatch * 2 : 16;
		int *nw = realloc(ep->watch, (size_t)nc * sizeof(*nw));
		if (!nw)
			return;
		ep->watch = nw;
		ep->capwatch = nc;
	}
	ep->watch[ep->nwatch++] = fd;
}

static void watch_del(struct uls_epoll *ep, int fd)
{
	for (int i = 0; i < ep->nwatch; i++)
		if (ep->watch[i] == fd) {
			ep->watch[i] = ep->watch[--ep->nwatch];
			return;
		}
}

static uint32_t kernel_epoll_events(struct epreg *r)
{
	struct uls_conn *c;

	r->ring = 0;
	c = ring_conn(r->fd);
	if (!c)
		return r->events;
	r->ring = 1;
	/* Level-triggered in the kernel: ulsock applies EPOLLET and EPOLLONESHOT itself. */
	return (uint32_t)kernel_events_for(c, (int)r->events);
}

static int kernel_ctl(struct uls_epoll *ep, int epfd, int op, struct epreg *r)
{
	struct epoll_event kev = {.events = r->kev, .data.u64 = (uint64_t)r->fd};

	(void)ep;
	return uls_libc.epoll_ctl(epfd, op, r->fd, &kev) < 0 ? -errno : 0;
}

/*
 * A ghost is a ring conn's registration that the program deleted while ulsock kept it in
 * the kernel set: event loops such as redis-benchmark's add and delete a socket's
 * registration around every request, and for a ring conn the kernel's part never changes
 * (its wake-up bytes make it readable), so a later add costs no system call. A ghost the
 * kernel reports is deleted for real then; so is one whose fd is closed (before the close,
 * so that a descriptor left open elsewhere cannot keep it alive). Only in sets no other
 * process can see: a fork or an exec deletes them all first.
 */
static int make_ghost(struct uls_epoll *ep, struct epreg *r)
{
	struct uls_conn *c = ring_conn(r->fd);

	if (!r->ring || !c || ep->shared || ep->epfd < 0)
		return 0;
	r->ghost = 1;
	r->ghost_conn = c;
	r->ghost_ino = c->seg.ino;
	watch_del(ep, r->fd);
	return 1;
}

static void drop_ghost(struct uls_epoll *ep, int epfd, int fd)
{
	struct epreg *r = ep->regs[fd];

	if (epfd >= 0)
		uls_libc.epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
	free(r);
	ep->regs[fd] = NULL;
}

/* The program adds a ghost again: the kernel part changes only if the conn did. */
static int revive(struct uls_epoll *ep, int epfd, struct epreg *r, struct epoll_event *ev)
{
	uint32_t was = r->kev;
	int err = 0;

	r->ghost = 0;
	r->events = ev->events;
	r->data = ev->data;
	r->fired = 0;
	r->gen = 0;
	r->kev = kernel_epoll_events(r);
	if (r->kev != was)
		err = kernel_ctl(ep, epfd, EPOLL_CTL_MOD, r);
	if (err < 0) {
		drop_ghost(ep, -1, r->fd);
		return err;
	}
	watch_add(ep, r->fd);
	return 0;
}

int uls_epoll_ctl(struct uls_epoll *ep, int epfd, int op, int fd, struct epoll_event *ev)
{
	struct epreg *r;
	int err;

	if (fd < 0)
		return -EBADF;
	pthread_mutex_lock(&ep->mu);
	if (fd >= ep->cap && (err = grow(ep, fd)) < 0)
		goto out;
	ep->epfd = epfd;
	r = ep->regs[fd];
	if (r && r->ghost && op != EPOLL_CTL_ADD) {
		err = op == EPOLL_CTL_MOD || op == EPOLL_CTL_DEL ? -ENOENT : -EINVAL;
		goto out;
	}
	switch (op) {
	case EPOLL_CTL_ADD:
		if (!ev) {
			err = -EFAULT;
			break;
		}
		struct uls_conn *c = r && r->ghost ? ring_conn(fd) : NULL;
		if (c && c == r->ghost_conn && c->seg.ino == r->ghost_ino) {
			err = revive(ep, epfd, r, ev);
			break;
		}
		if (r && r->ghost) {
			drop_ghost(ep, epfd, fd);
			r = NULL;
		}
		struct epreg *nr = calloc(1, sizeof(*nr));
		if (!nr) {
			err = -ENOMEM;
			break;
		}
		nr->fd = fd;
		nr->events = ev->events;
		nr->data = ev->data;
		nr->kev = kernel_epoll_events(nr);
		/* The kernel has the final say: a known fd may have been closed and reused
		 * behind ulsock's back; EEXIST keeps the registration there is. */
		err = kernel_ctl(ep, epfd, EPOLL_CTL_ADD, nr);
		if (err < 0) {
			free(nr);
			break;
		}
		free(r);
		ep->regs[fd] = nr;
		watch_del(ep, fd);
		watch_add(ep, fd);
		break;
	case EPOLL_CTL_MOD:
		if (!ev) {
			err = -EFAULT;
			break;
		}
		if (!r || r->closed) {
			struct epoll_event kev = *ev;
			err = uls_libc.epoll_ctl(epfd, op, fd, &kev) < 0 ? -errno : -ENOENT;
			break;
		}
		int was_ring = r->ring;
		uint32_t was = r->kev;
		r->events = ev->events;
		r->data = ev->data;
		r->fired = 0;
		r->gen = 0;
		r->kev = kernel_epoll_events(r);
		/* A ring conn's kernel part rarely changes: then the kernel has nothing to do. */
		err = was_ring && r->ring && r->kev == was ? 0 : kernel_ctl(ep, epfd, EPOLL_CTL_MOD, r);
		break;
	case EPOLL_CTL_DEL:
		if (r && make_ghost(ep, r)) {
			err = 0;
			break;
		}
		err = uls_libc.epoll_ctl(epfd, op, fd, ev) < 0 ? -errno : 0;
		/* A closed fd's registration stays while the kernel keeps it (EBADF). */
		if (err < 0 && r && r->closed)
			break;
		free(r);
		ep->regs[fd] = NULL;
		watch_del(ep, fd);
		break;
	default:
		err = -EINVAL;
	}
out:
	pthread_mutex_unlock(&ep->mu);
	return err;
}

/* Another descriptor of c's socket in this process than fd, or -1. */
static int other_fd(struct uls_conn *c, int fd)
{
	int max = uls_fd_max();

	for (int i = 0; i <= max; i++) {
		struct uls_fd *e = uls_fd_get(i);
		if (i != fd && e && atomic_load(&e->kind) == ULS_FD_CONN && e->conn == c)
			return i;
	}
	return -1;
}

static void orphan_drop(struct uls_epoll *ep, int i)
{
	free(ep->orph[i]);
	ep->orph[i] = ep->orph[--ep->norph];
}

/*
 * The kernel's registration belongs to the open file, not to the number: closing the
 * registered fd while a dup keeps the socket open leaves it in the set, reporting with the
 * program's data, until the last descriptor closes (and EPOLL_CTL_DEL by the old number
 * gives EBADF). A ring conn's registration does so as an orphan: before the close its
 * kernel data is re-keyed to the epreg, whose readiness ulsock keeps deciding through the
 * conn, draining wake-ups through another descriptor of the socket.
 */
static int orphan(struct uls_epoll *ep, struct epreg *r, int fd)
{
	struct uls_conn *c = ring_conn(fd);
	int ofd = c ? other_fd(c, fd) : -1;

	if (ofd < 0 || ep->epfd < 0)
		return 0;
	if (ep->norph == ep->caporph) {
		int nc = ep->caporph ? ep->caporph * 2 : 8;
		struct epreg **no = realloc(ep->orph, (size_t)nc * sizeof(*no));
		if (!no)
			return 0;
		ep->orph = no;
		ep->caporph = nc;
	}
	struct epoll_event kev = {.events = r->kev, .data.u64 = ORPHAN_TAG | (uintptr_t)r};
	if (uls_libc.epoll_ctl(ep->epfd, EPOLL_CTL_MOD, fd, &kev) < 0)
		return 0;
	r->oconn = c;
	r->ofd = ofd;
	ep->orph[ep->norph++] = r;
	ep->regs[fd] = NULL;
	watch_del(ep, fd);
	return 1;
}

/* The orphan a kernel event names, if it is still one. */
static struct epreg *orphan_of(struct uls_epoll *ep, uint64_t data)
{
	for (int i = 0; i < ep->norph; i++)
		if ((ORPHAN_TAG | (uintptr_t)ep->orph[i]) == data)
			return ep->orph[i];
	return NULL;
}

/* An orphan whose descriptor was closed behind ulsock's back is dropped. */
static int orphan_valid(struct epreg *r)
{
	return uls_fd_conn(r->ofd) == r->oconn;
}

void uls_epoll_forget_fd(int fd)
{
	pthread_mutex_lock(&eplist_mu);
	for (int i = 0; i < neplist; i++) {
		struct uls_epoll *ep = eplist[i];
		pthread_mutex_lock(&ep->mu);
		if (ep->epfd == fd)
			ep->epfd = -1;
		/* Orphans that drain through fd need another descriptor, or go with it. */
		for (int k = ep->norph - 1; k >= 0; k--) {
			struct epreg *o = ep->orph[k];
			if (o->ofd == fd && (o->ofd = other_fd(o->oconn, fd)) < 0)
				orphan_drop(ep, k);
		}
		struct epreg *r = fd < ep->cap ? ep->regs[fd] : NULL;
		if (r && r->ghost) {
			drop_ghost(ep, ep->epfd, fd);
		} else if (r && r->ring && orphan(ep, r, fd)) {
			/* kept, as an orphan */
		} else if (r && !r->ring) {
			/* The kernel decides its readiness and keeps reporting it with fd as data
			 * while a dup lives; a new registration of the number replaces it. */
			r->closed = 1;
			watch_del(ep, fd);
		} else if (r) {
			free(r);
			ep->regs[fd] = NULL;
			watch_del(ep, fd);
		}
		pthread_mutex_unlock(&ep->mu);
	}
	pthread_mutex_unlock(&eplist_mu);
}

void uls_epoll_unshare(void)
{
	pthread_mutex_lock(&eplist_mu);
	for (int i = 0; i < neplist; i++) {
		struct uls_epoll *ep = eplist[i];
		pthread_mutex_lock(&ep->mu);
		for (int fd = 0; fd < ep->cap; fd++)
			if (ep->regs[fd] && ep->regs[fd]->ghost)
				drop_ghost(ep, ep->epfd, fd);
		ep->shared = 1;
		pthread_mutex_unlock(&ep->mu);
	}
	pthread_mutex_unlock(&eplist_mu);
}

static int poll_bits(uint32_t e)
{
	return (int)(e & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLERR | EPOLLHUP));
}

/* Emits an event for r if it is ready; returns 1 when emitted. */
static int emit(struct uls_epoll *ep, struct epreg *r, int ready, struct epoll_event *out)
{
	struct uls_conn *c;

	if (!ready || r->fired || r->round == ep->round)
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
	out->events = (uint32_t)ready;
	out->data = r->data;
	return 1;
}

/* Upgrades registrations whose fd became (or stopped being) a ring conn. */
static void refresh(struct uls_epoll *ep, int epfd, struct epreg *r)
{
	int was = r->ring;
	uint32_t kev = kernel_epoll_events(r);

	if (kev != r->kev || was != r->ring) {
		r->kev = kev;
		kernel_ctl(ep, epfd, EPOLL_CTL_MOD, r);
	}
}

static int inner_ready(struct uls_epoll *ep, int arm, int depth);

/* User-space readiness of one watched registration (0 when the kernel decides). */
static int watched_ready(struct uls_epoll *ep, int epfd, struct epreg *r, int arm, int depth)
{
	if (r->oconn) {
		if (r->fired || !orphan_valid(r))
			return 0;
		if (arm)
			uls_conn_arm(r->oconn, poll_bits(r->events));
		return uls_conn_ready(r->oconn, poll_bits(r->events)) &
		       poll_bits(r->events | EPOLLERR | EPOLLHUP);
	}
	struct uls_fd *e = uls_fd_get(r->fd);

	if (e && atomic_load(&e->kind) == ULS_FD_EPOLL && e->ep && e->ep != ep && depth < 4) {
		/* A nested epoll set: readable when one of its accelerated sockets is. */
		int rd = inner_ready(e->ep, arm, depth + 1);
		return (r->events & EPOLLIN) && rd ? EPOLLIN : 0;
	}
	refresh(ep, epfd, r);
	if (!r->ring || r->fired)
		return 0;
	struct uls_conn *c = uls_fd_conn(r->fd);
	if (!c)
		return 0;
	if (arm)
		uls_conn_arm(c, poll_bits(r->events));
	return uls_conn_ready(c, poll_bits(r->events)) & poll_bits(r->events | EPOLLERR | EPOLLHUP);
}

static int inner_ready(struct uls_epoll *ep, int arm, int depth)
{
	int any = 0;

	pthread_mutex_lock(&ep->mu);
	for (int i = 0; i < ep->nwatch && (arm || !any); i++) {
		struct epreg *r = ep->regs[ep->watch[i]];
		if (r && r->ring && !r->fired) {
			struct uls_conn *c = uls_fd_conn(r->fd);
			if (c && arm)
				uls_conn_arm(c, poll_bits(r->events));
			any |= c && (uls_conn_ready(c, poll_bits(r->events)) & poll_bits(r->events));
		}
	}
	for (int i = 0; i < ep->norph && (arm || !any); i++) {
		struct epreg *r = ep->orph[i];
		if (!r->fired && orphan_valid(r)) {
			if (arm)
				uls_conn_arm(r->oconn, poll_bits(r->events));
			any |= uls_conn_ready(r->oconn, poll_bits(r->events)) & poll_bits(r->events);
		}
	}
	pthread_mutex_unlock(&ep->mu);
	(void)depth;
	return any;
}

static int user_pass(struct uls_epoll *ep, int epfd, struct epoll_event *evs, int max, int arm)
{
	int n = 0, count = ep->nwatch, start = ep->next;

	for (int k = 0; k < count && n < max; k++) {
		int i = (start + k) % count;
		struct epreg *r = ep->regs[ep->watch[i]];
		if (!r)
			continue;
		int got = emit(ep, r, watched_ready(ep, epfd, r, arm, 0), &evs[n]);
		n += got;
		if (got)
			ep->next = i + 1;
	}
	for (int i = 0; i < ep->norph && n < max; i++)
		n += emit(ep, ep->orph[i], watched_ready(ep, epfd, ep->orph[i], arm, 0), &evs[n]);
	return n;
}

static int kernel_pass(struct uls_epoll *ep, int epfd, struct epoll_event *evs, int max,
		       int64_t ns, const sigset_t *mask)
{
	struct epoll_event kev[64];
	int n = 0, r, ms;

	ms = ns < 0 ? -1 : (int)((ns + 999999) / 1000000);
	ep->kernel_seen = uls_now_ns();
	pthread_mutex_unlock(&ep->mu);
	if (ms != 0)
		uls_seg_reap();
	r = uls_libc.epoll_pwait(epfd, kev, max < 64 ? max : 64, ms, mask);
	pthread_mutex_lock(&ep->mu);
	if (r < 0)
		return -errno;
	for (int i = 0; i < r && n < max; i++) {
		if (kev[i].data.u64 & ORPHAN_TAG) {
			struct epreg *o = orphan_of(ep, kev[i].data.u64);
			if (!o || !orphan_valid(o))
				continue;
			int ready = merge(o->oconn, o->ofd, poll_bits(o->events), (int)kev[i].events);
			n += emit(ep, o, ready & poll_bits(o->events | EPOLLERR | EPOLLHUP), &evs[n]);
			continue;
		}
		int fd = (int)kev[i].data.u64;
		struct epreg *reg = fd >= 0 && fd < ep->cap ? ep->regs[fd] : NULL;
		if (!reg)
			continue;
		if (reg->ghost) {
			drop_ghost(ep, epfd, fd);
			continue;
		}
		if (!reg->ring) {
			if (reg->round == ep->round)
				continue;
			reg->round = ep->round;
			evs[n].events = kev[i].events;
			evs[n].data = reg->data;
			n++;
			continue;
		}
		struct uls_conn *c = uls_fd_conn(fd);
		int ready = c ? merge(c, fd, poll_bits(reg->events), (int)kev[i].events) : 0;
		n += emit(ep, reg, ready & poll_bits(reg->events | EPOLLERR | EPOLLHUP), &evs[n]);
	}
	return n;
}

#define KERNEL_LOOK_NS 50000u

static int has_ring(struct uls_epoll *ep)
{
	return ep->nwatch > 0 || ep->norph > 0;
}

int uls_epoll_wait(struct uls_epoll *ep, int epfd, struct epoll_event *evs, int max,
		   int64_t timeout_ns, const sigset_t *mask)
{
	uint64_t start = uls_now_ns(), deadline = start + (uint64_t)(timeout_ns > 0 ? timeout_ns : 0);
	unsigned spins = 0;
	struct uls_spin spin;
	int n;

	if (max <= 0)
		return -EINVAL;
	uls_spin_start(&spin);
	pthread_mutex_lock(&ep->mu);
	if (!has_ring(ep)) {
		ep->round++;
		n = kernel_pass(ep, epfd, evs, max, timeout_ns, mask);
		pthread_mutex_unlock(&ep->mu);
		return n;
	}
	for (;;) {
		int64_t left = remaining(deadline, timeout_ns);
		ep->round++;
		n = user_pass(ep, epfd, evs, max, 0);
		/* While rings keep it busy, a wait asks the kernel (plain descriptors, wake-up
		 * bytes, a peer's FIN) at most every KERNEL_LOOK_NS: one system call saved per
		 * event-loop turn. */
		if (n > 0 && uls_now_ns() - ep->kernel_seen < KERNEL_LOOK_NS)
			break;
		if (n > 0 || left == 0 || (++spins & 63) == 0) {
			int k = kernel_pass(ep, epfd, evs + n, max - n, 0, mask);
			if (k < 0 && n == 0) {
				n = k;
				break;
			}
			n += k > 0 ? k : 0;
			if (n > 0 || left == 0)
				break;
			continue;
		}
		/* Spin unlocked, so epoll_ctl from other threads goes on meanwhile. */
		pthread_mutex_unlock(&ep->mu);
		int more = uls_spin_more(&spin);
		pthread_mutex_lock(&ep->mu);
		if (more)
			continue;
		n = user_pass(ep, epfd, evs, max, 1);
		if (n > 0)
			break;
		n = kernel_pass(ep, epfd, evs, max, left, mask);
		if (n != 0 || remaining(deadline, timeout_ns) == 0)
			break;
	}
	pthread_mutex_unlock(&ep->mu);
	return n;
}

