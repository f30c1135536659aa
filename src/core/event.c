/* SPDX-License-Identifier: MIT */
#include "event.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "bell.h"
#include "config.h"
#include "conn.h"
#include "../os/cpu.h"
#include "fdtable.h"
#include "log.h"
#include "spin.h"
#include "../os/libc.h"

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
	int parts = uls_conn_kernel_parts(c), k = POLLIN | POLLRDHUP | (events & POLLPRI);

	if ((parts & ULS_KERNEL_TX) && (events & POLLOUT))
		k |= POLLOUT;
	return k;
}

/* Readiness of a ring conn given what the kernel reported for its socket. */
static int merge(struct uls_conn *c, int fd, int events, int krev)
{
	int was = uls_conn_kernel_parts(c), parts, r;

	/* Not with an error pending: the drain's read would take it, and the kernel keeps
	 * reporting it until the program's own call does. */
	if ((krev & (POLLIN | POLLRDHUP | POLLHUP)) && !(krev & POLLERR) && !(was & ULS_KERNEL_RX))
		uls_conn_drain(c, fd);
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
	 * urgent data, which never travels on the rings (conn_io.c, MSG_OOB).
	 */
	r |= krev & (POLLHUP | POLLERR | (events & POLLPRI));
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
		/* A number closed meanwhile by another thread: the kernel's answer stands. */
		if (krev & POLLNVAL)
			fds[i].revents = POLLNVAL;
		else
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

/* A sleep that could not register its bell everywhere looks again this often. */
#define BOUNDED_SLEEP_NS 10000000

/*
 * Before the first sleep of a poll in a multi-threaded process: the thread's bell joins
 * the kernel wait set (at k[n]) and becomes the current one. Returns the bell or -1;
 * *bounded is set when the sleep must not last.
 */
static int poll_bell(struct pollfd *k, nfds_t n, int *bounded)
{
	int bell = uls_bell_thread();

	if (bell < 0) {
		*bounded = 1;
		return -1;
	}
	uls_bell_begin(bell);
	k[n] = (struct pollfd){.fd = uls_bell_fd(bell), .events = POLLIN};
	uls_bell_current = bell;
	return bell;
}

int uls_poll(struct pollfd *fds, nfds_t n, int64_t timeout_ns, const sigset_t *mask)
{
	struct pollfd kst[65], *k = kst;
	struct uls_conn *cst[64], **cs = cst;
	uint64_t start = uls_now_ns(), deadline = start + (uint64_t)(timeout_ns > 0 ? timeout_ns : 0);
	int nconn = 0, r, bell = -1, bounded = 0, was_current = uls_bell_current;
	unsigned spins = 0;
	struct uls_spin spin;

	if (n > 64) {
		k = malloc((n + 1) * sizeof(*k));
		cs = malloc(n * sizeof(*cs));
		if (!k || !cs) {
			free(k == kst ? NULL : k);
			free(cs == cst ? NULL : cs);
			return -ENOMEM;
		}
	}
	for (nfds_t i = 0; i < n; i++) {
		cs[i] = fds[i].fd >= 0 ? ring_conn(fds[i].fd) : NULL;
		/* Held, as the kernel holds the files a poll names: a close by another thread
		 * leaves the conn to this call (conn.c, kept_for_calls). */
		if (cs[i] && !uls_conn_hold(cs[i]))
			cs[i] = NULL;
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
			r = kernel_ppoll(k, n + (bell >= 0), 0, mask);
		} else if (uls_spin_more(&spin)) {
			continue;
		} else {
			if (bell < 0 && !bounded && !ULS_SINGLE_THREADED())
				bell = poll_bell(k, n, &bounded);
			for (nfds_t i = 0; i < n; i++) {
				if (!cs[i])
					continue;
				/* The bell first, then the arm (bell.h). */
				if (bell >= 0 && !uls_bells_add(&cs[i]->bells, bell))
					bounded = 1;
				uls_conn_arm(cs[i], fds[i].events);
			}
			if (any_user_ready(fds, cs, n))
				continue;
			sleeping = 1;
			if (bounded && (left < 0 || left > BOUNDED_SLEEP_NS))
				left = BOUNDED_SLEEP_NS;
			r = kernel_ppoll(k, n + (bell >= 0), left, mask);
		}
		if (r < 0)
			goto out;
		if (bell >= 0 && k[n].revents)
			uls_bell_clear(bell);
		r = poll_collect(fds, k, cs, n, 1);
		if (r > 0 || left == 0 || (sleeping && remaining(deadline, timeout_ns) == 0))
			goto out;
	}
out:
	uls_bell_current = was_current;
	for (nfds_t i = 0; i < n; i++)
		if (cs[i])
			uls_conn_unhold(cs[i]);
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
	unsigned told;    /* the set's cycle when it was last reported (fair_skip) */
	uint64_t seq;     /* when it was last reported, in the set's count of reports */
	int ghost;        /* deleted by the program, still registered with the kernel */
	struct uls_conn *ghost_conn; /* the ghost's conn and its segment's inode: an fd */
	uint64_t ghost_ino;          /* closed behind ulsock's back has another */
	int closed;       /* its fd was closed: the kernel may still report it (a dup) */
	struct uls_conn *oconn; /* an orphan (see orphan()): its conn, and a descriptor */
	int ofd;                /* of its socket still open in this process */
};

/* Kernel data of an orphan: the tag and the epreg's address (user addresses are < 2^63). */
#define ORPHAN_TAG (1ull << 63)
/* Kernel data of the set's bell (descriptors and user addresses stay below it). */
#define BELL_TAG (1ull << 62)

struct uls_epoll {
	pthread_mutex_t mu;
	int refs;
	struct epreg **regs; /* indexed by fd */
	int cap;
	unsigned round;
	/*
	 * Fairness across the two sources of events, the rings and the kernel: within a
	 * cycle each registration is reported once, and a new cycle starts when a wait finds
	 * only registrations reported in this one. With maxevents below the number ready, a
	 * level-triggered member is then reported again only after every other member was,
	 * as the kernel's ready list does it; and no kernel descriptor waits behind a set of
	 * busy rings for more than a cycle.
	 */
	unsigned cycle;
	int stale; /* ready registrations this wait skipped as reported in this cycle */
	int *watch;  /* fds whose readiness ulsock may decide: TCP sockets, nested epolls */
	int nwatch, capwatch;
	uint64_t seq;       /* reports so far (epreg.seq) */
	struct epcand *cand; /* user_pass's scratch list, under mu */
	int capcand;
	int epfd;    /* the descriptor the last epoll_ctl named, -1 once closed */
	int shared;  /* another process may use the kernel epoll set (fork): no ghosts */
	uint64_t kernel_seen; /* when a wait last asked the kernel (ns) */
	int bell;             /* the set's bell (bell.h) in its kernel set, or -1 */
	int bounded;          /* this wait could not register the bell everywhere */
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
	ep->bell = -1;
	ep->cycle = 1; /* registrations start with told 0: never reported */
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
	uls_bell_put(ep->bell);
	for (int i = 0; i < ep->cap; i++)
		free(ep->regs[i]);
	for (int i = 0; i < ep->norph; i++)
		free(ep->orph[i]);
	free(ep->orph);
	free(ep->regs);
	free(ep->watch);
	free(ep->cand);
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

void uls_epoll_atfork_child(void)
{
	/* The child's bells are new (bell.h): its sets get theirs at their next wait. */
	pthread_mutex_init(&eplist_mu, NULL);
	for (int i = 0; i < neplist; i++) {
		pthread_mutex_init(&eplist[i]->mu, NULL);
		eplist[i]->bell = -1;
	}
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

static int has_ring(struct uls_epoll *ep)
{
	return ep->nwatch > 0 || ep->norph > 0;
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
	uint32_t kev = kernel_epoll_events(r);

	if (kev != r->kev || was != r->ring) {
		r->kev = kev;
		kernel_ctl(ep, epfd, EPOLL_CTL_MOD, r);
	}
}

static int inner_ready(struct uls_epoll *ep, int arm, int depth);

/* Arms c for a wait on ep, its bell joining c first when it has one (bell.h). */
static void arm_conn(struct uls_epoll *ep, struct uls_conn *c, int events)
{
	if (ep->bell >= 0 && !uls_bells_add(&c->bells, ep->bell))
		ep->bounded = 1;
	uls_conn_arm(c, events);
}

/*
 * Before a wait that arms in a multi-threaded process: the set's bell (made and put into
 * the kernel set on first use, edge-triggered, tagged) starts a new wait.
 */
static void bell_begin(struct uls_epoll *ep, int epfd)
{
	ep->bounded = 0;
	if (ULS_SINGLE_THREADED())
		return;
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
		ep->bounded = 1;
		return;
	}
	uls_bell_begin(ep->bell);
}

/* User-space readiness of one watched registration (0 when the kernel decides). */
static int watched_ready(struct uls_epoll *ep, int epfd, struct epreg *r, int arm, int depth)
{
	if (r->oconn) {
		if (r->fired || !orphan_valid(r))
			return 0;
		if (arm)
			arm_conn(ep, r->oconn, poll_bits(r->events));
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
		arm_conn(ep, c, poll_bits(r->events));
	int ready = uls_conn_ready(c, poll_bits(r->events));
	/* Urgent data is the kernel's alone (conn_io.c): asked only by who wants EPOLLPRI. */
	if (ready && (r->events & EPOLLPRI)) {
		struct pollfd p = {.fd = r->fd, .events = POLLPRI};
		if (uls_libc.poll(&p, 1, 0) > 0)
			ready |= p.revents & POLLPRI;
	}
	return ready & poll_bits(r->events | EPOLLERR | EPOLLHUP);
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
				arm_conn(ep, c, poll_bits(r->events));
			any |= c && (uls_conn_ready(c, poll_bits(r->events)) & poll_bits(r->events));
		}
	}
	for (int i = 0; i < ep->norph && (arm || !any); i++) {
		struct epreg *r = ep->orph[i];
		if (!r->fired && orphan_valid(r)) {
			if (arm)
				arm_conn(ep, r->oconn, poll_bits(r->events));
			any |= uls_conn_ready(r->oconn, poll_bits(r->events)) & poll_bits(r->events);
		}
	}
	pthread_mutex_unlock(&ep->mu);
	(void)depth;
	return any;
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

	for (int i = 0; i < ep->nwatch; i++) {
		struct epreg *r = ep->regs[ep->watch[i]];
		if (r && !add_cand(ep, &nc, r, watched_ready(ep, epfd, r, arm, 0)))
			break;
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
		uls_seg_reap();
	r = uls_libc.epoll_pwait(epfd, evs, max, ms, mask);
	pthread_mutex_lock(&ep->mu);
	if (r < 0)
		return -errno;
	for (int i = 0; i < r && n < max; i++) {
		struct epoll_event k = evs[i];
		if (k.data.u64 == BELL_TAG) {
			/* Rung: the caller's pass over the rings follows. */
			if (ep->bell >= 0)
				uls_bell_clear(ep->bell);
			continue;
		}
		if (k.data.u64 & ORPHAN_TAG) {
			struct epreg *o = orphan_of(ep, k.data.u64);
			if (!o || !orphan_valid(o))
				continue;
			int ready = merge(o->oconn, o->ofd, poll_bits(o->events), (int)k.events);
			n += emit(ep, o, ready & poll_bits(o->events | EPOLLERR | EPOLLHUP), &evs[n]);
			continue;
		}
		int fd = (int)k.data.u64;
		struct epreg *reg = fd >= 0 && fd < ep->cap ? ep->regs[fd] : NULL;
		if (!reg)
			continue;
		if (reg->ghost) {
			drop_ghost(ep, epfd, fd);
			continue;
		}
		if (!reg->ring) {
			if (reg->round == ep->round || fair_skip(ep, reg))
				continue;
			reg->round = ep->round;
			reg->told = ep->cycle;
			evs[n].events = k.events;
			evs[n].data = reg->data;
			n++;
			continue;
		}
		struct uls_conn *c = uls_fd_conn(fd);
		int ready = c ? merge(c, fd, poll_bits(reg->events), (int)k.events) : 0;
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
	uls_spin_start(&spin);
	pthread_mutex_lock(&ep->mu);
	/* Drains in this wait do not ring the set's own bell. */
	uls_bell_current = ep->bell;
	if (!has_ring(ep)) {
		ep->round++;
		n = kernel_pass(ep, epfd, evs, max, timeout_ns, mask);
		pthread_mutex_unlock(&ep->mu);
		uls_bell_current = was_current;
		return n;
	}
	for (;;) {
		int64_t left = remaining(deadline, timeout_ns);
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
		/* Spin unlocked, so epoll_ctl from other threads goes on meanwhile. */
		pthread_mutex_unlock(&ep->mu);
		int more = uls_spin_more(&spin);
		pthread_mutex_lock(&ep->mu);
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
		n = kernel_pass(ep, epfd, evs, max, left, mask);
		if (n == 0 && ep->stale) {
			ep->cycle++;
			continue;
		}
		if (n != 0 || remaining(deadline, timeout_ns) == 0)
			break;
	}
	if (n > 0)
		n = refill(ep, epfd, evs, n, max, mask);
	pthread_mutex_unlock(&ep->mu);
	uls_bell_current = was_current;
	return n;
}

