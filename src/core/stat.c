/* SPDX-License-Identifier: MIT */
#include "stat.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"
#include "conn.h"
#include "../os/ownfd.h"
#include "../os/libc.h"

/* The record names a connection's path with the ABI's numbers. */
static_assert((int)ULS_PATH_PENDING == (int)ULSOCK_PATH_PENDING &&
		      (int)ULS_PATH_SHM == (int)ULSOCK_PATH_SHM &&
		      (int)ULS_PATH_KERNEL == (int)ULSOCK_PATH_KERNEL &&
		      (int)ULS_PATH_FABRIC == (int)ULSOCK_PATH_FABRIC &&
		      (int)ULS_SERVER == (int)ULSOCK_ROLE_SERVER &&
		      (int)ULS_CLIENT == (int)ULSOCK_ROLE_CLIENT,
	      "enum uls_path and the roles are the stat ABI's");

static pthread_mutex_t stat_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ulsock_stat_file *stat_map;
static pid_t stat_pid;
static int stat_fd = -1;
static int slot_hint;

static void stat_path(char *buf, size_t len, pid_t pid)
{
	snprintf(buf, len, ULSOCK_STAT_PREFIX "%u.%d", (unsigned)uls_uid(), (int)pid);
}

static struct ulsock_stat_file *stat_open(void)
{
	char path[96];
	void *map;
	int fd;

	if (stat_map && stat_pid == uls_pid())
		return stat_map;
	stat_pid = uls_pid();
	stat_map = NULL;
	stat_path(path, sizeof(path), stat_pid);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return NULL;
	/*
	 * The name goes at once, so nothing is left behind however the process ends;
	 * `ulsock stat` finds the file through /proc/PID/fd, where this descriptor stays.
	 */
	unlink(path);
	fd = uls_own_fd_take(fd, &stat_fd);
	if (ftruncate(fd, sizeof(struct ulsock_stat_file)) == 0) {
		map = mmap(NULL, sizeof(struct ulsock_stat_file), PROT_READ | PROT_WRITE, MAP_SHARED,
			   fd, 0);
		if (map != MAP_FAILED) {
			stat_map = map;
			stat_map->version = ULSOCK_STAT_VERSION;
			stat_map->rec_size = sizeof(struct ulsock_stat_rec);
			stat_map->pid = (uint32_t)stat_pid;
			stat_map->nslots = ULSOCK_STAT_SLOTS;
			/* Last: a reader that sees the magic sees the header whole. */
			__atomic_store_n(&stat_map->magic, ULSOCK_STAT_MAGIC, __ATOMIC_RELEASE);
		}
	}
	if (!stat_map)
		uls_own_fd_close(&stat_fd);
	return stat_map;
}

struct ulsock_stat_rec *uls_stat_slot(void)
{
	struct ulsock_stat_rec *r = NULL;
	struct ulsock_stat_file *f;

	pthread_mutex_lock(&stat_mu);
	f = stat_open();
	for (unsigned k = 0; f && k < ULSOCK_STAT_SLOTS; k++) {
		unsigned i = ((unsigned)slot_hint + k) % ULSOCK_STAT_SLOTS;
		if (!atomic_load(&f->rec[i].used)) {
			slot_hint = (int)i + 1;
			r = &f->rec[i];
			memset(r, 0, sizeof(*r));
			atomic_store(&r->used, 1);
			break;
		}
	}
	pthread_mutex_unlock(&stat_mu);
	return r;
}

void uls_stat_release(struct ulsock_stat_rec *r)
{
	if (r)
		atomic_store(&r->used, 0);
}

void *uls_stat_atfork_child(void)
{
	struct ulsock_stat_file *parent = stat_map;

	/* The parent's file stays the parent's: the child moves its records to its own. */
	stat_map = NULL;
	uls_own_fd_close(&stat_fd);
	return parent;
}

void uls_stat_unmap(void *parent)
{
	if (parent)
		munmap(parent, sizeof(struct ulsock_stat_file));
}


