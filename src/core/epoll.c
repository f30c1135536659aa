/* SPDX-License-Identifier: MIT */
/*
 * epoll sets: the process's list of them, their life, the shadow table of registrations
 * with its watch list, epoll_ctl, and what a close, fork or exec does to every set.
 * Ghosts and orphans are in epoll_ghost.c, the wait in epoll_wait.c.
 */
#include "event.h"
#include "event_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bell.h"
#include "conn.h"
#include "fdtable.h"
#include "../os/libc.h"

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
	ep->wait_fd = -1;
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

/*
 * Sockets that may become accelerated, and epoll sets that may hold some, are watched. A
 * connection on the kernel path stays there (nothing moves it back onto a transport): the
 * kernel decides its readiness alone, and a set of such members is the kernel's. So does
 * a listening socket (its connections are other descriptors): a set that holds one must
 * not count as a set with rings, whose waits spin first, or a server with only kernel
 * TCP connections (remote clients, ULSOCK_DISABLE) would spin in every wait. One
 * getsockopt per registration of an unconnected TCP socket, which is nearly always a
 * listener (a connecting socket is a connection already).
 */
static int worth_watching(int fd)
{
	struct uls_fd *e = uls_fd_classify(fd);
	uint8_t kind = e ? atomic_load(&e->kind) : ULS_FD_PLAIN;

	if (kind == ULS_FD_CONN)
		return !uls_kernel_for_good(fd);
	if (kind == ULS_FD_TCP)
		return !uls_fd_listening(fd);
	return kind == ULS_FD_EPOLL;
}

int uls_kernel_for_good(int fd)
{
	struct uls_conn *c = uls_fd_conn(fd);

	return c && atomic_load(&c->path) == ULS_PATH_KERNEL;
}

void uls_watch_add(struct uls_epoll *ep, int fd)
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

void uls_watch_del(struct uls_epoll *ep, int fd)
{
	for (int i = 0; i < ep->nwatch; i++)
		if (ep->watch[i] == fd) {
			ep->watch[i] = ep->watch[--ep->nwatch];
			return;
		}
}

uint32_t uls_kernel_epoll_events(struct epreg *r)
{
	struct uls_conn *c;

	r->ring = 0;
	c = uls_ring_conn(r->fd);
	if (!c)
		return r->events;
	r->ring = 1;
	/* Level-triggered in the kernel: ulsock applies EPOLLET and EPOLLONESHOT itself. */
	return (uint32_t)uls_kernel_events_for(c, (int)r->events);
}

int uls_kernel_ctl(struct uls_epoll *ep, int epfd, int op, struct epreg *r)
{
	struct epoll_event kev = {.events = r->kev, .data.u64 = (uint64_t)r->fd};

	(void)ep;
	return uls_libc.epoll_ctl(epfd, op, r->fd, &kev) < 0 ? -errno : 0;
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
		struct uls_conn *c = r && r->ghost ? uls_ring_conn(fd) : NULL;
		if (c && c == r->ghost_conn && c->tp_id == r->ghost_id) {
			err = uls_epoll_revive(ep, epfd, r, ev);
			break;
		}
		if (r && r->ghost) {
			uls_drop_ghost(ep, epfd, fd);
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
		nr->kev = uls_kernel_epoll_events(nr);
		/* The kernel has the final say: a known fd may have been closed and reused
		 * behind ulsock's back; EEXIST keeps the registration there is. */
		err = uls_kernel_ctl(ep, epfd, EPOLL_CTL_ADD, nr);
		if (err < 0) {
			free(nr);
			break;
		}
		free(r);
		ep->regs[fd] = nr;
		uls_watch_del(ep, fd);
		uls_watch_add(ep, fd);
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
		r->kev = uls_kernel_epoll_events(r);
		/* A ring conn's kernel part rarely changes: then the kernel has nothing to do. */
		err = was_ring && r->ring && r->kev == was ? 0 : uls_kernel_ctl(ep, epfd, EPOLL_CTL_MOD, r);
		break;
	case EPOLL_CTL_DEL:
		if (r && uls_make_ghost(ep, r)) {
			err = 0;
			break;
		}
		err = uls_libc.epoll_ctl(epfd, op, fd, ev) < 0 ? -errno : 0;
		/* A closed fd's registration stays while the kernel keeps it (EBADF). */
		if (err < 0 && r && r->closed)
			break;
		free(r);
		ep->regs[fd] = NULL;
		uls_watch_del(ep, fd);
		break;
	default:
		err = -EINVAL;
	}
out:
	pthread_mutex_unlock(&ep->mu);
	return err;
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
			if (o->ofd == fd && (o->ofd = uls_other_fd(o->oconn, fd)) < 0)
				uls_orphan_drop(ep, k);
		}
		struct epreg *r = fd < ep->cap ? ep->regs[fd] : NULL;
		if (r && r->ghost) {
			uls_drop_ghost(ep, ep->epfd, fd);
		} else if (r && r->ring && uls_epoll_orphan(ep, r, fd)) {
			/* kept, as an orphan */
		} else if (r && !r->ring) {
			/* The kernel decides its readiness and keeps reporting it with fd as data
			 * while a dup lives; a new registration of the number replaces it. */
			r->closed = 1;
			uls_watch_del(ep, fd);
		} else if (r) {
			free(r);
			ep->regs[fd] = NULL;
			uls_watch_del(ep, fd);
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
				uls_drop_ghost(ep, ep->epfd, fd);
		ep->shared = 1;
		pthread_mutex_unlock(&ep->mu);
	}
	pthread_mutex_unlock(&eplist_mu);
}
