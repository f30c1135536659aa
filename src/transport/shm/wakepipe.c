/* SPDX-License-Identifier: MIT */
#include "wakepipe.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../core/config.h"
#include "../../os/cpu.h"
#include "../../os/ownfd.h"
#include "../../os/libc.h"

/*
 * The pipes this process writes, by name: at most WP_SLOTS open at once (own descriptors,
 * ownfd.h), the least recently used closed for a new one. A refused name is kept too,
 * with no descriptor, so that a peer whose pipe cannot be opened costs one try per
 * WP_RETRY_NS, not one per wake-up. A name cannot come back for another pipe while it is
 * kept open here: the inode is held.
 */
#define WP_SLOTS 64
#define WP_RETRY_NS 1000000000ull

struct wp_slot {
	uint64_t who, ino;
	int fd;           /* own descriptor, or -1: refused */
	uint64_t used_ns; /* last use; 0: the slot is free */
};

static struct wp_slot slots[WP_SLOTS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

int uls_wakepipe_allowed(long long peer_uid)
{
	if (peer_uid >= 0)
		return (uid_t)peer_uid == uls_uid();
	/*
	 * A client's segment is its user's file, mode 0600: without ULSOCK_TRUST_UIDS only
	 * that user or root attached to it, and root may write any pipe it likes.
	 */
	return uls_cfg.ntrusted == 0;
}

/* Opens the pipe (who, ino) names and checks it: the descriptor, or -1. */
static int wp_open(uint64_t who, uint64_t ino)
{
	char path[48];
	struct stat st;
	unsigned pid = (unsigned)(who >> 32), num = (unsigned)who;

	if (pid == 0 || pid > (1u << 22) || num > (1u << 30) || ino == 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%u/fd/%u", pid, num);
	/* Nothing but a pipe is opened: opening a device can do things. */
	if (stat(path, &st) < 0 || !S_ISFIFO(st.st_mode) || (uint64_t)st.st_ino != ino)
		return -1;
	/* Read and write: a reader of our own keeps a write from ever raising SIGPIPE once
	 * the sleeper is gone (the pipe then fills, and writes find it full). */
	int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0 || !S_ISFIFO(st.st_mode) || (uint64_t)st.st_ino != ino ||
	    st.st_uid != uls_uid()) {
		uls_libc.close(fd);
		return -1;
	}
	return fd;
}

/* The slot for (who, ino), opened if need be; under mu. NULL when none can be had. */
static struct wp_slot *wp_find(uint64_t who, uint64_t ino, uint64_t now)
{
	struct wp_slot *victim = &slots[0];

	for (int i = 0; i < WP_SLOTS; i++) {
		struct wp_slot *s = &slots[i];
		if (s->used_ns && s->who == who && s->ino == ino) {
			if (s->fd < 0 && now - s->used_ns >= WP_RETRY_NS) {
				victim = s;
				break;
			}
			if (s->fd >= 0)
				s->used_ns = now;
			return s;
		}
		if (s->used_ns < victim->used_ns)
			victim = s;
	}
	if (victim->fd >= 0 && victim->used_ns)
		uls_own_fd_close(&victim->fd);
	victim->who = who;
	victim->ino = ino;
	victim->used_ns = now;
	victim->fd = -1;
	int fd = wp_open(who, ino);
	if (fd >= 0)
		uls_own_fd_take(fd, &victim->fd);
	return victim;
}

int uls_wakepipe_write(uint64_t who, uint64_t ino)
{
	int done = 0;

	pthread_mutex_lock(&mu);
	struct wp_slot *s = wp_find(who, ino, uls_now_ns());
	if (s && s->fd >= 0) {
		ssize_t r = uls_libc.write(s->fd, "", 1);
		done = r == 1 || (r < 0 && errno == EAGAIN);
		if (!done)
			uls_own_fd_close(&s->fd); /* refused from now on */
	}
	pthread_mutex_unlock(&mu);
	return done;
}

void uls_wakepipe_atfork_child(void)
{
	/* The descriptors are the child's copies, and name the same pipes. */
	pthread_mutex_init(&mu, NULL);
}
