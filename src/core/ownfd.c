/* SPDX-License-Identifier: MIT */
#include "ownfd.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>

#include "../preload/libc.h"

/* Log, stat, diag, spare, and room to spare. */
#define SLOTS 8

static struct {
	_Atomic int fd; /* -1: free */
	int *where;
} slots[SLOTS] = {
	[0 ... SLOTS - 1] = {.fd = -1},
};
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

int uls_own_fd_take(int fd, int *where)
{
	int hi = uls_libc.fcntl(fd, F_DUPFD_CLOEXEC, ULS_OWN_FD_MIN);

	if (hi >= 0) {
		uls_libc.close(fd);
		fd = hi;
	}
	*where = fd;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < SLOTS; i++) {
		if (atomic_load(&slots[i].fd) < 0) {
			slots[i].where = where;
			atomic_store(&slots[i].fd, fd);
			break;
		}
	}
	pthread_mutex_unlock(&mu);
	return fd;
}

static void drop(int *where, int do_close)
{
	pthread_mutex_lock(&mu);
	for (int i = 0; i < SLOTS; i++) {
		if (slots[i].where == where && atomic_load(&slots[i].fd) >= 0) {
			atomic_store(&slots[i].fd, -1);
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

int uls_own_fd_is(int fd)
{
	if (fd < 0)
		return 0;
	for (int i = 0; i < SLOTS; i++)
		if (atomic_load_explicit(&slots[i].fd, memory_order_relaxed) == fd)
			return 1;
	return 0;
}

void uls_own_fd_evict(int fd)
{
	if (!uls_own_fd_is(fd))
		return;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < SLOTS; i++) {
		if (atomic_load(&slots[i].fd) != fd)
			continue;
		/* fd itself is taken, so the copy lands elsewhere. */
		int hi = uls_libc.fcntl(fd, F_DUPFD_CLOEXEC, ULS_OWN_FD_MIN);
		if (hi >= 0)
			uls_libc.close(fd);
		/* Without a free number the library loses it: dup2 replaces it as asked. */
		*slots[i].where = hi;
		atomic_store(&slots[i].fd, hi);
		if (hi < 0)
			slots[i].where = NULL;
	}
	pthread_mutex_unlock(&mu);
}

int uls_own_fds_in(unsigned first, unsigned last, int *out, int max)
{
	int n = 0;

	pthread_mutex_lock(&mu);
	for (int i = 0; i < SLOTS; i++) {
		int fd = atomic_load(&slots[i].fd);
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
