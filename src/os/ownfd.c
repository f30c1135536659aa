/* SPDX-License-Identifier: MIT */
#include "ownfd.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "libc.h"

/*
 * Which numbers are the library's: one bit per descriptor, so that close(), which asks
 * for every descriptor, costs a load. Numbers past the bitmap (a process with more than a
 * million descriptors) are looked up in the slots. The slots say who holds each number,
 * for moves: the log, stat and diag descriptors and one wake-up bell per thread (bell.c),
 * so there are as many as the program has threads that sleep on accelerated sockets.
 */
#define BITMAP_FDS (1u << 20)
static _Atomic uint64_t own_bits[BITMAP_FDS / 64];

struct slot {
	int fd; /* -1: free */
	int *where;
};
static struct slot *slots;
static int nslots, capslots;
static _Atomic int high_own; /* an own number at or past BITMAP_FDS exists */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void mark(int fd, int on)
{
	if (fd < 0)
		return;
	if ((unsigned)fd >= BITMAP_FDS) {
		if (on)
			atomic_store(&high_own, 1);
		return;
	}
	uint64_t bit = 1ull << (fd % 64);
	if (on)
		atomic_fetch_or(&own_bits[fd / 64], bit);
	else
		atomic_fetch_and(&own_bits[fd / 64], ~bit);
}

/* A free slot, growing the array; NULL when out of memory. Caller holds mu. */
static struct slot *free_slot(void)
{
	for (int i = 0; i < nslots; i++)
		if (slots[i].fd < 0)
			return &slots[i];
	if (nslots == capslots) {
		int nc = capslots ? capslots * 2 : 16;
		struct slot *ns = realloc(slots, (size_t)nc * sizeof(*ns));
		if (!ns)
			return NULL;
		slots = ns;
		capslots = nc;
	}
	return &slots[nslots++];
}

int uls_own_fd_take(int fd, int *where)
{
	int hi = uls_libc.fcntl(fd, F_DUPFD_CLOEXEC, ULS_OWN_FD_MIN);

	if (hi >= 0) {
		uls_libc.close(fd);
		fd = hi;
	}
	*where = fd;
	pthread_mutex_lock(&mu);
	struct slot *s = free_slot();
	if (s) {
		s->where = where;
		s->fd = fd;
		mark(fd, 1);
	}
	pthread_mutex_unlock(&mu);
	return fd;
}

static void drop(int *where, int do_close)
{
	pthread_mutex_lock(&mu);
	for (int i = 0; i < nslots; i++) {
		if (slots[i].where == where && slots[i].fd >= 0) {
			mark(slots[i].fd, 0);
			slots[i].fd = -1;
			slots[i].where = NULL;
		}
	}
	if (do_close && *where >= 0)
		uls_libc.close(*where);
	*where = -1;
	pthread_mutex_unlock(&mu);
}

void uls_own_fd_close(int *where)
{
	drop(where, 1);
}

void uls_own_fd_forget(int *where)
{
	drop(where, 0);
}

static int slot_holds(int fd)
{
	int found = 0;

	pthread_mutex_lock(&mu);
	for (int i = 0; i < nslots && !found; i++)
		found = slots[i].fd == fd;
	pthread_mutex_unlock(&mu);
	return found;
}

int uls_own_fd_is(int fd)
{
	if (fd < 0)
		return 0;
	if ((unsigned)fd < BITMAP_FDS)
		return (atomic_load_explicit(&own_bits[fd / 64], memory_order_relaxed) >>
			(fd % 64)) & 1;
	return atomic_load_explicit(&high_own, memory_order_relaxed) && slot_holds(fd);
}

void uls_own_fd_evict(int fd)
{
	if (!uls_own_fd_is(fd))
		return;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < nslots; i++) {
		if (slots[i].fd != fd)
			continue;
		/* fd itself is taken, so the copy lands elsewhere. */
		int hi = uls_libc.fcntl(fd, F_DUPFD_CLOEXEC, ULS_OWN_FD_MIN);
		if (hi >= 0)
			uls_libc.close(fd);
		mark(fd, 0);
		/* Without a free number the library loses it: dup2 replaces it as asked. */
		*slots[i].where = hi;
		slots[i].fd = hi;
		mark(hi, 1);
		if (hi < 0)
			slots[i].where = NULL;
	}
	pthread_mutex_unlock(&mu);
}

int uls_own_fds_in(unsigned first, unsigned last, int *out, int max)
{
	int n = 0;

	pthread_mutex_lock(&mu);
	for (int i = 0; i < nslots; i++) {
		int fd = slots[i].fd;
		if (fd < 0 || (unsigned)fd < first || (unsigned)fd > last || n >= max)
			continue;
		int k = n++;
		while (k > 0 && out[k - 1] > fd) {
			out[k] = out[k - 1];
			k--;
		}
		out[k] = fd;
	}
	pthread_mutex_unlock(&mu);
	return n;
}

int uls_own_fd_count(void)
{
	int n = 0;

	pthread_mutex_lock(&mu);
	for (int i = 0; i < nslots; i++)
		n += slots[i].fd >= 0;
	pthread_mutex_unlock(&mu);
	return n;
}

void uls_own_fd_atfork_child(void)
{
	pthread_mutex_init(&mu, NULL);
}
