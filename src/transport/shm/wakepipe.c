/* SPDX-License-Identifier: MIT */
#include "wakepipe.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../core/bell.h"
#include "../../core/config.h"
#include "../../core/wait.h"
#include "../../os/cpu.h"
#include "../../os/ownfd.h"
#include "../../os/libc.h"

/*
 * The pipes this process writes, by name: at most WP_SLOTS open at once (own descriptors,
 * ownfd.h), the least recently used closed for a new one. A refused name is kept too,
 * with no descriptor, so that a peer whose pipe cannot be opened costs one try per
 * WP_RETRY_NS, not one per wake-up. A name cannot come back for another pipe while it is
 * kept open here: the inode is held.
 *
 * The lock covers the table, never a write: a write holds its slot busy instead, and a
 * busy slot is neither closed nor given to another name. The lock is only ever tried: a
 * signal handler that sends on another socket while its thread is in here (TCP allows
 * that), or a second thread waking at the same moment, sends its TCP byte instead.
 */
#define WP_SLOTS 64
#define WP_RETRY_NS 1000000000ull

struct wp_slot {
	uint64_t who, ino;
	int fd;            /* own descriptor, or -1: refused */
	uid_t owner;       /* the pipe's owner, as fstat said when it was opened */
	int quiet;         /* opened write-only: writes hold SIGPIPE (uls_wakepipe_write) */
	uint64_t used_ns;  /* last use; 0: the slot is free */
	_Atomic int busy;  /* writes in progress, outside the lock */
	_Atomic int failed; /* a write failed: refused once no write is in progress */
};

static struct wp_slot slots[WP_SLOTS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static int named(uint64_t who)
{
	return ((uint32_t)who & ULS_BELL_NAMED) != 0;
}

/*
 * May a connection whose peer has uid peer_uid (-1: a client, which cannot know its
 * server's) be woken through the pipe who names, owned by owner? A pipe reached through
 * /proc is the waker's own user's (wp_open checks), so it may be written only where the
 * peer is of that user: a server knows its client's user by the segment file's owner; a
 * client knows that only its user or root attached to its file (mode 0600) when
 * ULSOCK_TRUST_UIDS is empty. A named bell (core/bell.h) may be the peer's own user's:
 * then it must be the client's user for a server, a trusted user (or this one) for a
 * client. Either way the peer could have written that pipe itself.
 */
static int wp_may(uint64_t who, uid_t owner, long long peer_uid)
{
	if (!named(who))
		return peer_uid >= 0 ? (uid_t)peer_uid == uls_uid() : uls_cfg.ntrusted == 0;
	return peer_uid >= 0 ? owner == (uid_t)peer_uid : uls_config_uid_trusted(owner);
}

/*
 * Opens the pipe (who, ino) names and checks it: the descriptor, or -1; *owner, *quiet
 * as in the slot.
 */
static int wp_open(uint64_t who, uint64_t ino, uid_t *owner, int *quiet)
{
	char path[64];
	struct stat st;
	unsigned pid = (unsigned)(who >> 32), num = (unsigned)who & ~ULS_BELL_NAMED;
	int fd, flags = O_NONBLOCK | O_CLOEXEC | O_NOCTTY;

	if (pid == 0 || pid > (1u << 22) || num > (1u << 30) || ino == 0)
		return -1;
	if (named(who)) {
		uls_bell_path(path, sizeof(path), pid, num);
		/* The name's owner may change it: no link is followed, and what was opened is
		 * checked again below. */
		flags |= O_NOFOLLOW;
		if (lstat(path, &st) < 0)
			return -1;
	} else {
		snprintf(path, sizeof(path), "/proc/%u/fd/%u", pid, num);
		if (stat(path, &st) < 0)
			return -1;
	}
	/* Nothing but a pipe is opened: opening a device can do things. */
	if (!S_ISFIFO(st.st_mode) || (uint64_t)st.st_ino != ino)
		return -1;
	/*
	 * Read and write where this user may read: a reader of our own keeps a write from
	 * ever raising SIGPIPE once the sleeper is gone (the pipe then fills, and writes find
	 * it full). Another user's named bell lets us only write (a reader could take its
	 * sleeper's wake-ups); its writes hold SIGPIPE instead.
	 */
	*quiet = named(who) && st.st_uid != uls_uid();
	fd = open(path, flags | (*quiet ? O_WRONLY : O_RDWR));
	if (fd < 0)
		return -1;
	uid_t was = st.st_uid;
	if (fstat(fd, &st) < 0 || !S_ISFIFO(st.st_mode) || (uint64_t)st.st_ino != ino ||
	    st.st_uid != was || (!named(who) && st.st_uid != uls_uid())) {
		uls_libc.close(fd);
		return -1;
	}
	*owner = st.st_uid;
	return fd;
}

/* A slot's descriptor goes: the name is refused from now (until WP_RETRY_NS). */
static void wp_refuse(struct wp_slot *s, uint64_t now)
{
	if (s->fd >= 0)
		uls_own_fd_close(&s->fd);
	atomic_store(&s->failed, 0);
	s->used_ns = now;
}

/*
 * The slot for (who, ino), opened if need be; under mu. NULL when the name is refused or
 * every slot is busy.
 */
static struct wp_slot *wp_find(uint64_t who, uint64_t ino, uint64_t now)
{
	struct wp_slot *victim = NULL;

	for (int i = 0; i < WP_SLOTS; i++) {
		struct wp_slot *s = &slots[i];
		int idle = atomic_load(&s->busy) == 0;
		if (s->used_ns && s->who == who && s->ino == ino) {
			if (atomic_load(&s->failed) && idle)
				wp_refuse(s, now);
			if (s->fd >= 0 && !atomic_load(&s->failed)) {
				s->used_ns = now;
				return s;
			}
			if (s->fd >= 0 || !idle || now - s->used_ns < WP_RETRY_NS)
				return NULL;
			victim = s; /* refused long enough ago: try again */
			break;
		}
		if (idle && (!victim || s->used_ns < victim->used_ns))
			victim = s;
	}
	if (!victim)
		return NULL;
	if (victim->used_ns)
		wp_refuse(victim, now);
	victim->fd = -1; /* a slot never used holds 0 */
	victim->who = who;
	victim->ino = ino;
	victim->used_ns = now;
	int fd = wp_open(who, ino, &victim->owner, &victim->quiet);
	if (fd < 0)
		return NULL;
	uls_own_fd_take(fd, &victim->fd);
	return victim;
}

int uls_wakepipe_write(uint64_t who, uint64_t ino, long long peer_uid)
{
	if (!named(who) && !wp_may(who, 0, peer_uid))
		return 0; /* not even looked for */
	if (pthread_mutex_trylock(&mu) != 0)
		return 0;
	struct wp_slot *s = wp_find(who, ino, uls_now_ns());
	int fd = s && wp_may(who, s->owner, peer_uid) ? s->fd : -1;
	int quiet = s ? s->quiet : 0;
	if (fd >= 0)
		atomic_fetch_add(&s->busy, 1);
	pthread_mutex_unlock(&mu);
	if (fd < 0)
		return 0;
	/* Where SIGPIPE is ignored the write cannot raise it: no need to hold it. */
	ssize_t r = quiet && !uls_sigpipe_ignored()
			    ? uls_write_unsignalled(fd, "", 1, SIGPIPE, EPIPE)
			    : uls_libc.write(fd, "", 1);
	int done = r == 1 || (r < 0 && errno == EAGAIN);
	if (!done)
		atomic_store(&s->failed, 1);
	atomic_fetch_sub(&s->busy, 1);
	return done;
}

void uls_wakepipe_atfork_child(void)
{
	/* The descriptors are the child's copies, and name the same pipes; the writes that
	 * other threads had in progress are not the child's. */
	pthread_mutex_init(&mu, NULL);
	for (int i = 0; i < WP_SLOTS; i++)
		atomic_store(&slots[i].busy, 0);
}
