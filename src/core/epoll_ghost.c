/* SPDX-License-Identifier: MIT */
/*
 * Registrations that outlive the program's view of them: ghosts (deleted by the program,
 * still in the kernel set) and orphans (their fd closed while a dup keeps the socket).
 */
#include "event_int.h"

#include <errno.h>
#include <stdlib.h>

#include "conn.h"
#include "fdtable.h"
#include "../os/libc.h"

/*
 * A ghost is a ring conn's registration that the program deleted while ulsock kept it in
 * the kernel set: event loops such as redis-benchmark's add and delete a socket's
 * registration around every request, and for a ring conn the kernel's part never changes
 * (its wake-up bytes make it readable), so a later add costs no system call. A ghost the
 * kernel reports is deleted for real then; so is one whose fd is closed (before the close,
 * so that a descriptor left open elsewhere cannot keep it alive). Only in sets no other
 * process can see: a fork or an exec deletes them all first.
 */
int uls_make_ghost(struct uls_epoll *ep, struct epreg *r)
{
	struct uls_conn *c = uls_ring_conn(r->fd);

	if (!r->ring || !c || ep->shared || ep->epfd < 0)
		return 0;
	r->ghost = 1;
	ep->nghost++;
	r->ghost_conn = c;
	r->ghost_id = c->tp_id;
	uls_watch_del(ep, r->fd);
	return 1;
}

void uls_drop_ghost(struct uls_epoll *ep, int epfd, int fd)
{
	struct epreg *r = ep->regs[fd];

	if (epfd >= 0)
		uls_libc.epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
	ep->nghost -= r->ghost;
	free(r);
	ep->regs[fd] = NULL;
}

/* The program adds a ghost again: the kernel part changes only if the conn did. */
int uls_epoll_revive(struct uls_epoll *ep, int epfd, struct epreg *r, struct epoll_event *ev)
{
	uint32_t was = r->kev;
	int err = 0;

	r->ghost = 0;
	ep->nghost--;
	r->events = ev->events;
	r->data = ev->data;
	r->fired = 0;
	r->gen = 0;
	r->kev = uls_kernel_epoll_events(r);
	if (r->kev != was)
		err = uls_kernel_ctl(ep, epfd, EPOLL_CTL_MOD, r);
	if (err < 0) {
		uls_drop_ghost(ep, -1, r->fd);
		return err;
	}
	uls_watch_add(ep, r->fd);
	return 0;
}

/* Another descriptor of c's socket in this process than fd, or -1. */
int uls_other_fd(struct uls_conn *c, int fd)
{
	int max = uls_fd_max();

	for (int i = 0; i <= max; i++) {
		struct uls_fd *e = uls_fd_get(i);
		if (i != fd && e && atomic_load(&e->kind) == ULS_FD_CONN && e->conn == c)
			return i;
	}
	return -1;
}

void uls_orphan_drop(struct uls_epoll *ep, int i)
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
int uls_epoll_orphan(struct uls_epoll *ep, struct epreg *r, int fd)
{
	struct uls_conn *c = uls_ring_conn(fd);
	int ofd = c ? uls_other_fd(c, fd) : -1;

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
	uls_watch_del(ep, fd);
	return 1;
}

/* The orphan a kernel event names, if it is still one. */
struct epreg *uls_orphan_of(struct uls_epoll *ep, uint64_t data)
{
	for (int i = 0; i < ep->norph; i++)
		if ((ORPHAN_TAG | (uintptr_t)ep->orph[i]) == data)
			return ep->orph[i];
	return NULL;
}

/* An orphan whose descriptor was closed behind ulsock's back is dropped. */
int uls_orphan_valid(struct epreg *r)
{
	return uls_fd_conn(r->ofd) == r->oconn;
}
