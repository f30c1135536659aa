/* SPDX-License-Identifier: MIT */
#include "bell.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../os/ownfd.h"
#include "config.h"
#include "log.h"
#include "trust.h"
#include "../os/libc.h"

/*
 * Bells live in one table and keep their descriptor for the life of the process: a
 * thread that exits hands its bell to the next one, so a registration that outlived its
 * wait (a thread cancelled in poll) can only ring a bell, never a number reused for a
 * file of the program's.
 */
#define MAX_BELLS 4096
#define SEQ_MASK ((1ull << 48) - 1)

struct bell {
	int fd;                 /* the pipe's read end, own descriptor (ownfd.h), while made */
	int wfd;                /* its write end, own descriptor */
	uint64_t ino;           /* the pipe's inode (uls_bell_pipe) */
	int made;
	int named;              /* 1: a FIFO in /dev/shm (bell_make_named); 2: its name gone */
	int in_use;             /* a thread or an epoll set has it (under mu) */
	_Atomic uint64_t waits; /* waits begun: registrations hold the count of theirs */
	_Atomic int pending;    /* rung since the last clear */
};

static struct bell bells[MAX_BELLS];
static int nbells;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t thread_key;
static __thread int mine __attribute__((tls_model("initial-exec"))) = -1;
__thread int uls_bell_current __attribute__((tls_model("initial-exec"))) = -1;

/* v in decimal at p, at most end - p characters: past the last one written. */
static char *put_decimal(char *p, char *end, uint32_t v)
{
	char digits[10];
	int n = 0;

	do
		digits[n++] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	while (n > 0 && p < end)
		*p++ = digits[--n];
	return p;
}

/* Without snprintf: uls_bell_unname runs in _exit, which a signal handler may call. */
void uls_bell_path(char *buf, size_t len, uint32_t pid, uint32_t idx)
{
	static const char head[] = ULS_BELL_DIR "/" ULS_BELL_PREFIX;
	char *p = buf, *end = buf + len - 1;

	if (len == 0)
		return;
	for (const char *h = head; *h && p < end; h++)
		*p++ = *h;
	p = put_decimal(p, end, pid);
	if (p < end)
		*p++ = '.';
	p = put_decimal(p, end, idx);
	*p = '\0';
}

/*
 * With ULSOCK_TRUST_UIDS, bell number idx is a FIFO with a name, which the trusted users
 * may write (not read: a reader could take wake-ups meant for other connections of the
 * sleeper): a peer of another user cannot open it through /proc (ptrace rights), and
 * still wakes it for the price of a pipe write (wakepipe.h). 0, or -1: the caller makes
 * an unnamed pipe. A name left by an earlier process with this pid (killed, or this
 * process before an exec) is this user's and stale: it goes.
 */
static int bell_make_named(struct bell *b, int idx)
{
	char path[64];
	struct stat st;
	int rfd = -1, wfd = -1;

	uls_bell_path(path, sizeof(path), (uint32_t)uls_pid(), (uint32_t)idx);
	if (mkfifo(path, 0600) < 0) {
		if (errno != EEXIST || lstat(path, &st) < 0 || st.st_uid != uls_uid() ||
		    unlink(path) < 0 || mkfifo(path, 0600) < 0)
			return -1;
	}
	/* The read end first: a write-only open of a FIFO without a reader fails. */
	rfd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
	if (rfd >= 0)
		wfd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
	int err = wfd < 0 ? -errno : 0;
	if (!err && (fstat(rfd, &st) < 0 || !S_ISFIFO(st.st_mode) || st.st_uid != uls_uid()))
		err = -EINVAL;
	if (!err)
		err = uls_trust_grant(rfd, 2);
	if (err) {
		uls_warn("no named bell (%s): peers of other users wake this process on TCP",
			 strerror(-err));
		unlink(path);
		if (rfd >= 0)
			uls_libc.close(rfd);
		if (wfd >= 0)
			uls_libc.close(wfd);
		return -1;
	}
	uls_own_fd_take(rfd, &b->fd);
	uls_own_fd_take(wfd, &b->wfd);
	b->ino = (uint64_t)st.st_ino;
	b->named = 1;
	b->made = 1;
	return 0;
}

/* Makes bell b's pipe: 0, or -1 when the process has no descriptors to spare. */
static int bell_make(struct bell *b)
{
	int p[2];
	struct stat st;

	b->named = 0;
	if (uls_cfg.ntrusted > 0 && bell_make_named(b, (int)(b - bells)) == 0)
		return 0;
	if (pipe2(p, O_NONBLOCK | O_CLOEXEC) < 0)
		return -1;
	if (fstat(p[0], &st) < 0) {
		uls_libc.close(p[0]);
		uls_libc.close(p[1]);
		return -1;
	}
	uls_own_fd_take(p[0], &b->fd);
	uls_own_fd_take(p[1], &b->wfd);
	b->ino = (uint64_t)st.st_ino;
	b->made = 1;
	return 0;
}

/*
 * A free bell with its pipe, or -1. The lock is tried a bounded number of times: a signal
 * handler whose wait interrupted its own thread in here must not wait for itself (it
 * goes without a bell: a TCP wake-up, and in a multi-threaded process bounded sleeps).
 */
static int bell_take(void)
{
	int i, got = -1, tries = 0;

	while (pthread_mutex_trylock(&mu) != 0) {
		if (++tries == 64)
			return -1;
		sched_yield();
	}
	for (i = 0; i < nbells && got < 0; i++)
		if (!bells[i].in_use && bells[i].made)
			got = i;
	if (got < 0 && nbells < MAX_BELLS && bell_make(&bells[nbells]) == 0) {
		got = nbells;
		/* Release: uls_bell_unname, without the lock, sees the bell's name. */
		__atomic_store_n(&nbells, nbells + 1, __ATOMIC_RELEASE);
	}
	if (got >= 0)
		bells[got].in_use = 1;
	pthread_mutex_unlock(&mu);
	return got;
}

void uls_bell_put(int bell)
{
	if (bell < 0 || bell >= MAX_BELLS)
		return;
	pthread_mutex_lock(&mu);
	bells[bell].in_use = 0;
	pthread_mutex_unlock(&mu);
}

static void thread_gone(void *v)
{
	uls_bell_put((int)(intptr_t)v - 1);
}

static _Atomic int key_made;

static void make_key(void)
{
	atomic_store(&key_made, pthread_key_create(&thread_key, thread_gone) == 0);
}

int uls_bell_thread(void)
{
	if (mine >= 0)
		return mine;
	pthread_once(&key_once, make_key);
	mine = bell_take();
	if (mine >= 0)
		pthread_setspecific(thread_key, (void *)(intptr_t)(mine + 1));
	return mine;
}

int uls_bell_get(void)
{
	return bell_take();
}

int uls_bell_fd(int bell)
{
	return bell >= 0 && bell < MAX_BELLS && bells[bell].made ? bells[bell].fd : -1;
}

int uls_bell_pipe(int bell, uint64_t *who, uint64_t *ino)
{
	if (bell < 0 || bell >= MAX_BELLS || !bells[bell].made || bells[bell].fd < 0 ||
	    bells[bell].named > 1)
		return 0;
	uint32_t low = bells[bell].named ? ULS_BELL_NAMED | (uint32_t)bell : (uint32_t)bells[bell].fd;
	*who = (uint64_t)(uint32_t)uls_pid() << 32 | low;
	*ino = bells[bell].ino;
	return 1;
}

/*
 * The names go; the pipes stay (in a process that goes on after a failed exec they still
 * ring, and peers that opened them still write them, but no new peer finds them:
 * uls_bell_pipe then says none, and wake-ups come on TCP). Async-signal-safe, no lock:
 * a bell being made meanwhile keeps its name, for the sweep.
 */
void uls_bell_unname(void)
{
	char path[64];
	int n = __atomic_load_n(&nbells, __ATOMIC_ACQUIRE);

	for (int i = 0; i < n && i < MAX_BELLS; i++)
		if (bells[i].named == 1) {
			bells[i].named = 2;
			uls_bell_path(path, sizeof(path), (uint32_t)uls_pid(), (uint32_t)i);
			unlink(path);
		}
}

int uls_bell_sweep_one(const char *name)
{
	char path[300];
	struct stat st;
	char *end;

	if (strncmp(name, ULS_BELL_PREFIX, strlen(ULS_BELL_PREFIX)) != 0)
		return 0;
	unsigned long pid = strtoul(name + strlen(ULS_BELL_PREFIX), &end, 10);
	if (*end != '.' || !uls_pid_gone(pid))
		return 1;
	snprintf(path, sizeof(path), ULS_BELL_DIR "/%s", name);
	/* Only this user's: another's cannot go from the sticky /dev/shm anyway. */
	if (lstat(path, &st) == 0 && S_ISFIFO(st.st_mode) && st.st_uid == uls_uid())
		unlink(path);
	return 1;
}

void uls_bell_sweep(void)
{
	struct dirent *de;
	DIR *dir = opendir(ULS_BELL_DIR);

	if (!dir)
		return;
	while ((de = readdir(dir)) != NULL)
		uls_bell_sweep_one(de->d_name);
	closedir(dir);
}

/*
 * The count goes first, then the mark. The other order loses rings: a ring that came
 * between them (mark set again, count written) had its count read away and left its
 * mark, and every later ring saw the mark and wrote nothing, so the sleeper it was for
 * slept on. In this order a ring that sees the mark still set and writes nothing came
 * before the clear's end, and the clearer looks at its connections after the clear
 * (every caller does): it sees what that ring was for. The exchange reads that ring's
 * mark, which orders the ringer's consumption before the clearer's look.
 */
void uls_bell_clear(int bell)
{
	char buf[64];
	ssize_t r;

	/* Rings of this process and wake-ups of peers (uls_bell_pipe), all of them. */
	do
		r = uls_libc.read(bells[bell].fd, buf, sizeof(buf));
	while (r == (ssize_t)sizeof(buf) || (r < 0 && errno == EINTR));
	(void)atomic_exchange(&bells[bell].pending, 0);
}

void uls_bell_begin(int bell)
{
	/* Rings of earlier waits go first, then their registrations go stale: a ring that
	 * sees this wait's count comes after the read and stays. */
	if (atomic_load(&bells[bell].pending))
		uls_bell_clear(bell);
	atomic_fetch_add(&bells[bell].waits, 1);
}

static uint64_t reg_of(int bell)
{
	return ((uint64_t)(bell + 1) << 48) | (atomic_load(&bells[bell].waits) & SEQ_MASK);
}

/* Is registration v of a wait that is over (or of no bell)? */
static int stale(uint64_t v)
{
	uint64_t idx = v >> 48;

	if (idx == 0 || idx > MAX_BELLS)
		return 1;
	return (atomic_load(&bells[idx - 1].waits) & SEQ_MASK) != (v & SEQ_MASK);
}

int uls_bells_add(struct uls_bells *b, int bell)
{
	uint64_t want = reg_of(bell);

	for (int i = 0; i < ULS_BELL_SLOTS; i++)
		if (atomic_load(&b->slot[i]) == want)
			return 1;
	for (int i = 0; i < ULS_BELL_SLOTS; i++) {
		uint64_t v = atomic_load(&b->slot[i]);
		/* Seq_cst: a consumer that reads the slot after this store rings, and one that
		 * read it before consumed before this sleeper's look at the ring. */
		while (stale(v))
			if (atomic_compare_exchange_weak(&b->slot[i], &v, want))
				return 1;
	}
	return 0;
}

static void ring(int bell)
{
	if (atomic_exchange(&bells[bell].pending, 1))
		return; /* rung already, not cleared yet */
	/* A full pipe is readable already. */
	ssize_t r = uls_libc.write(bells[bell].wfd, "", 1);
	(void)r;
}

int uls_bells_others(struct uls_bells *b, int bell)
{
	for (int i = 0; i < ULS_BELL_SLOTS; i++) {
		uint64_t v = atomic_load(&b->slot[i]);
		if (v && !stale(v) && (int)(v >> 48) - 1 != bell)
			return 1;
	}
	return 0;
}

void uls_bells_ring_others(struct uls_bells *b)
{
	for (int i = 0; i < ULS_BELL_SLOTS; i++) {
		uint64_t v = atomic_load(&b->slot[i]);
		if (!v || stale(v) || (int)(v >> 48) - 1 == uls_bell_current)
			continue;
		ring((int)(v >> 48) - 1);
	}
}

void uls_bells_reset(struct uls_bells *b)
{
	for (int i = 0; i < ULS_BELL_SLOTS; i++)
		atomic_store(&b->slot[i], 0);
}

void uls_bell_atfork_child(void)
{
	pthread_mutex_init(&mu, NULL);
	for (int i = 0; i < nbells; i++) {
		/* The parent's pipes: a ring from here would wake the parent's threads. */
		if (bells[i].made) {
			uls_own_fd_close(&bells[i].fd);
			uls_own_fd_close(&bells[i].wfd);
		}
		bells[i].made = 0;
		bells[i].named = 0; /* its name is the parent's */
		bells[i].in_use = 0;
		atomic_store(&bells[i].pending, 0);
	}
	__atomic_store_n(&nbells, 0, __ATOMIC_RELEASE);
	mine = -1;
	uls_bell_current = -1;
	if (atomic_load(&key_made))
		pthread_setspecific(thread_key, NULL);
}
