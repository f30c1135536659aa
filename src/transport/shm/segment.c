/* SPDX-License-Identifier: MIT */
#include "segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "guard.h"
#include "../../core/bell.h"
#include "../../core/config.h"
#include "../../core/log.h"
#include "../../core/trust.h"
#include "../../os/libc.h"

#define SHM_DIR "/dev/shm"

void uls_seg_path_of(char *buf, size_t len, uid_t uid, uint64_t ino)
{
	snprintf(buf, len, SHM_DIR "/ulsock.%u.%llu", (unsigned)uid, (unsigned long long)ino);
}

void uls_seg_path(char *buf, size_t len, uint64_t ino)
{
	uls_seg_path_of(buf, len, uls_uid(), ino);
}

/*
 * With ULSOCK_TRUST_UIDS, the trusted users' processes must be able to open the file:
 * they read and write it, nobody else gains anything.
 */
static void grant_trusted(int fd)
{
	int err = uls_trust_grant(fd, 6);
	if (err < 0)
		uls_warn("cannot grant trusted uids access to a segment: %s", strerror(-err));
}

static uint64_t layout_total(uint64_t c2s, uint64_t s2c)
{
	return ULS_SEG_HDR_SIZE + c2s + s2c;
}

/* Sets up the process-local ring views from sizes this process has validated. */
static void seg_bind(struct uls_seg *seg, void *map, size_t size, uint64_t c2s, uint64_t s2c)
{
	uint8_t *base = map;

	seg->hdr = map;
	seg->map_size = size;
	uls_ring_init(&seg->ring[ULS_C2S], &seg->hdr->ring[ULS_C2S], base + ULS_SEG_HDR_SIZE, c2s);
	uls_ring_init(&seg->ring[ULS_S2C], &seg->hdr->ring[ULS_S2C], base + ULS_SEG_HDR_SIZE + c2s,
		      s2c);
}

/* The parts of the identity that depend only on the sizes; writing them touches the page. */
static void ident_layout(struct uls_seg_ident *id, uint64_t c2s, uint64_t s2c)
{
	id->version = ULS_SEG_VERSION;
	id->hdr_size = ULS_SEG_HDR_SIZE;
	id->total_size = layout_total(c2s, s2c);
	id->ring_off[ULS_C2S] = ULS_SEG_HDR_SIZE;
	id->ring_off[ULS_S2C] = ULS_SEG_HDR_SIZE + c2s;
	id->ring_size[ULS_C2S] = c2s;
	id->ring_size[ULS_S2C] = s2c;
	id->client_uid = (uint32_t)uls_uid();
}

/* The socket's part, then the magic. */
static void ident_finish(struct uls_seg_ident *id, uint64_t ino, uint64_t cookie)
{
	id->client_ino = ino;
	id->client_cookie = cookie;
	/* Release: a server that sees the magic sees a complete identity. */
	atomic_store_explicit((_Atomic uint64_t *)&id->magic, ULS_SEG_MAGIC, memory_order_release);
}

/* ---- the spare (segment.h) ---- */

struct spare {
	uint8_t *map;
	uint64_t c2s, s2c;
	int fd;
	dev_t dev;
	ino_t ino;
};

struct uls_seg_idle uls_seg_idle;
static pthread_mutex_t spare_mu = PTHREAD_MUTEX_INITIALIZER;
static struct spare spare = {.fd = -1}; /* under spare_mu */
static _Atomic int spare_ready;         /* spare is complete: stored last, under spare_mu */
static _Atomic uint64_t want_c2s, want_s2c; /* the sizes of the last client segment */
static _Atomic int spare_off; /* this system cannot make spares: no more tries */

/* Is fd still the spare's file? The program may have closed it and reused the number. */
static int spare_fd_ours(const struct spare *sp)
{
	struct stat st;

	return sp->fd >= 0 && fstat(sp->fd, &st) == 0 && st.st_dev == sp->dev &&
	       st.st_ino == sp->ino;
}

static void spare_discard(struct spare *sp)
{
	if (!sp->map)
		return;
	uls_guard_forget(sp->map);
	munmap(sp->map, layout_total(sp->c2s, sp->s2c));
	if (spare_fd_ours(sp))
		uls_libc.close(sp->fd);
	sp->map = NULL;
	sp->fd = -1;
}

/* Makes the spare; spare_mu held. Failures only mean connects create their files. */
static void spare_make(void)
{
	uint64_t c2s = atomic_load_explicit(&want_c2s, memory_order_relaxed);
	uint64_t s2c = atomic_load_explicit(&want_s2c, memory_order_relaxed);
	uint64_t total = layout_total(c2s, s2c);
	struct stat st;
	uint8_t *map;
	int fd, hi;

	if (!uls_guard_note_room())
		return; /* over a thousand segments from spares live: this one is created */
	fd = open(SHM_DIR, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0) {
		/* Out of descriptors or memory: next time. Anything else (no O_TMPFILE in this
		 * kernel or file system, no access): never again. */
		if (errno != EMFILE && errno != ENFILE && errno != ENOMEM && errno != ENOSPC &&
		    errno != EINTR)
			atomic_store(&spare_off, 1);
		return;
	}
	/* Out of the program's way: it sees the lowest free numbers it would see without us. */
	hi = uls_libc.fcntl(fd, F_DUPFD_CLOEXEC, ULS_SEG_SPARE_FD_MIN);
	uls_libc.close(fd);
	if (hi < 0) {
		if (errno == EINVAL) /* RLIMIT_NOFILE is below the number */
			atomic_store(&spare_off, 1);
		return;
	}
	if (ftruncate(hi, (off_t)total) < 0 || fstat(hi, &st) < 0)
		goto err_close;
	map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, hi, 0);
	if (map == MAP_FAILED)
		goto err_close;
	/* /proc/self/maps will not name it: the guard must know it from here on. */
	if (uls_guard_note(map, total) < 0) {
		munmap(map, total);
		goto err_close;
	}
	grant_trusted(hi);
	ident_layout((struct uls_seg_ident *)map, c2s, s2c);
	/* The first page of each ring: the first bytes either way fault here, not later. */
	*(volatile uint8_t *)(map + ULS_SEG_HDR_SIZE) = 0;
	*(volatile uint8_t *)(map + ULS_SEG_HDR_SIZE + c2s) = 0;
	spare = (struct spare){map, c2s, s2c, hi, st.st_dev, st.st_ino};
	/* Release: a fork child that sees it sees the whole spare (uls_seg_atfork_child). */
	atomic_store_explicit(&spare_ready, 1, memory_order_release);
	return;

err_close:
	uls_libc.close(hi);
}

/*
 * Gives the spare's unnamed file its name. linkat of the descriptor itself (AT_EMPTY_PATH)
 * skips the walk through /proc (about 5 instead of 9 us per link on this project's VM).
 * Recent kernels allow it to an unprivileged caller for a file it opened (seen on 6.18);
 * older ones refuse with ENOENT without CAP_DAC_READ_SEARCH: from then on, /proc only.
 */
static int spare_link(int fd, const char *path)
{
	static _Atomic int by_fd_refused;
	char proc[40];

	if (!atomic_load_explicit(&by_fd_refused, memory_order_relaxed)) {
		if (linkat(fd, "", AT_FDCWD, path, AT_EMPTY_PATH) == 0)
			return 0;
		if (errno != ENOENT && errno != EPERM)
			return -1;
		atomic_store_explicit(&by_fd_refused, 1, memory_order_relaxed);
	}
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	return linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW);
}

/* Names the spare path for this socket if it has these sizes. 0, or -1 to create anew. */
static int spare_use(struct uls_seg *seg, const char *path, uint64_t ino, uint64_t cookie,
		     uint64_t c2s, uint64_t s2c)
{
	struct spare sp;
	uint32_t none = 0;
	int saved = errno;

	if (!atomic_load_explicit(&spare_ready, memory_order_relaxed) ||
	    pthread_mutex_trylock(&spare_mu) != 0)
		return -1;
	sp = spare;
	spare.map = NULL;
	spare.fd = -1;
	atomic_store_explicit(&spare_ready, 0, memory_order_relaxed);
	pthread_mutex_unlock(&spare_mu);
	if (!sp.map)
		return -1;
	struct uls_seg_ident *id = (struct uls_seg_ident *)sp.map;
	/* The claim: another process that inherited this spare without fork's handlers (a raw
	 * clone) holds a copy of the same state; only one of the two may use it. */
	if (sp.c2s != c2s || sp.s2c != s2c || !spare_fd_ours(&sp) ||
	    !atomic_compare_exchange_strong((_Atomic uint32_t *)&id->client_pid, &none,
					    (uint32_t)uls_pid()))
		goto err_discard;
	ident_finish(id, ino, cookie);
	if (spare_link(sp.fd, path) < 0) {
		/* No /proc, or a link refused: spares cannot be named here. */
		if (errno != EEXIST)
			atomic_store(&spare_off, 1);
		/* Left over from a dead socket with the same inode: ours is the live one. */
		if (errno != EEXIST || unlink(path) < 0 || spare_link(sp.fd, path) < 0)
			goto err_discard;
	}
	uls_libc.close(sp.fd);
	seg_bind(seg, sp.map, layout_total(c2s, s2c), c2s, s2c);
	errno = saved;
	return 0;

err_discard:
	spare_discard(&sp);
	errno = saved;
	return -1;
}

void uls_seg_spare_drop(void)
{
	pthread_mutex_lock(&spare_mu);
	spare_discard(&spare);
	atomic_store(&spare_ready, 0);
	pthread_mutex_unlock(&spare_mu);
}

int uls_seg_spare_yield(void)
{
	int freed;

	atomic_store(&spare_off, 1);
	if (!atomic_load(&spare_ready) || pthread_mutex_trylock(&spare_mu) != 0)
		return 0;
	freed = spare.map && spare_fd_ours(&spare);
	spare_discard(&spare);
	atomic_store(&spare_ready, 0);
	pthread_mutex_unlock(&spare_mu);
	return freed;
}

int uls_seg_spare_fd(void)
{
	pthread_mutex_lock(&spare_mu);
	int fd = spare.map ? spare.fd : -1;
	pthread_mutex_unlock(&spare_mu);
	return fd;
}

/* Called with nothing better to do: makes the spare a client segment asked for. */
static void spare_idle(void)
{
	if (pthread_mutex_trylock(&spare_mu) != 0)
		return; /* the next sleep makes it */
	atomic_store_explicit(&uls_seg_idle.spare_wanted, 0, memory_order_relaxed);
	if (!spare.map && !atomic_load(&spare_off))
		spare_make();
	pthread_mutex_unlock(&spare_mu);
}

int uls_seg_create(struct uls_seg *seg, uint64_t ino, uint64_t cookie, uint64_t c2s_size,
		   uint64_t s2c_size)
{
	char path[96];
	uint64_t total = layout_total(c2s_size, s2c_size);
	void *map;
	int fd, err;

	if (!uls_ring_size_valid(c2s_size) || !uls_ring_size_valid(s2c_size))
		return -EINVAL;
	uls_seg_path(path, sizeof(path), ino);
	if (!atomic_load_explicit(&spare_off, memory_order_relaxed)) {
		/* Two threads may race here: at worst a spare of the other one's sizes. */
		atomic_store_explicit(&want_c2s, c2s_size, memory_order_relaxed);
		atomic_store_explicit(&want_s2c, s2c_size, memory_order_relaxed);
		atomic_store_explicit(&uls_seg_idle.spare_wanted, 1, memory_order_relaxed);
		if (spare_use(seg, path, ino, cookie, c2s_size, s2c_size) == 0)
			goto done;
	}
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EEXIST) {
		/* Left over from a dead socket with the same inode: ours is the live one. */
		unlink(path);
		fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	}
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)total) < 0) {
		err = -errno;
		goto err_unlink;
	}
	map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		err = -errno;
		goto err_unlink;
	}
	grant_trusted(fd);
	uls_libc.close(fd);
	ident_layout(map, c2s_size, s2c_size);
	((struct uls_seg_ident *)map)->client_pid = (uint32_t)uls_pid();
	ident_finish(map, ino, cookie);
	seg_bind(seg, map, total, c2s_size, s2c_size);
done:
	seg->ino = ino;
	seg->uid = uls_uid();
	return 0;

err_unlink:
	unlink(path);
	uls_libc.close(fd);
	return err;
}

/* Checks what the creator wrote against the layout this process computes itself. */
static int ident_valid(const struct uls_seg_ident *id, uint64_t ino, uint64_t cookie,
		       size_t file_size)
{
	uint64_t c2s = id->ring_size[ULS_C2S], s2c = id->ring_size[ULS_S2C];

	if (atomic_load_explicit((_Atomic uint64_t *)&id->magic, memory_order_acquire) !=
		    ULS_SEG_MAGIC ||
	    id->version != ULS_SEG_VERSION || id->hdr_size != ULS_SEG_HDR_SIZE)
		return 0;
	if (!uls_ring_size_valid(c2s) || !uls_ring_size_valid(s2c))
		return 0;
	if (id->total_size != layout_total(c2s, s2c) || id->total_size != file_size)
		return 0;
	if (id->ring_off[ULS_C2S] != ULS_SEG_HDR_SIZE ||
	    id->ring_off[ULS_S2C] != ULS_SEG_HDR_SIZE + c2s)
		return 0;
	return id->client_ino == ino && id->client_cookie == cookie;
}

int uls_seg_open(struct uls_seg *seg, uint64_t ino, uint64_t cookie)
{
	return uls_seg_open_as(seg, uls_uid(), ino, cookie);
}

int uls_seg_open_as(struct uls_seg *seg, uid_t uid, uint64_t ino, uint64_t cookie)
{
	char path[96];
	struct uls_seg_ident id;
	struct stat st;
	void *map;
	int fd, err;

	uls_seg_path_of(path, sizeof(path), uid, ino);
	fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		err = -errno;
		goto err_close;
	}
	err = -EPERM;
	if (!S_ISREG(st.st_mode) || st.st_uid != uid || !uls_config_uid_trusted(st.st_uid))
		goto err_close;
	err = -EPROTO;
	if (st.st_size < (off_t)ULS_SEG_HDR_SIZE || st.st_size > (off_t)(2 * ULS_RING_MAX + 4096))
		goto err_close;
	map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		err = -errno;
		goto err_close;
	}
	uls_libc.close(fd);
	/* Copy the identity once: what was validated is what this process uses. */
	memcpy(&id, map, sizeof(id));
	if (!ident_valid(&id, ino, cookie, (size_t)st.st_size)) {
		uls_guard_forget(map);
		munmap(map, (size_t)st.st_size);
		return -EPROTO;
	}
	seg_bind(seg, map, (size_t)st.st_size, id.ring_size[ULS_C2S], id.ring_size[ULS_S2C]);
	seg->ino = ino;
	seg->uid = uid;
	return 0;

err_close:
	uls_libc.close(fd);
	return err;
}

void uls_seg_unmap(struct uls_seg *seg)
{
	if (seg && seg->hdr) {
		uls_guard_forget(seg->hdr);
		munmap(seg->hdr, seg->map_size);
	}
	if (seg)
		memset(seg, 0, sizeof(*seg));
}

/*
 * The last unmap of a segment frees its pages, several microseconds that a closing
 * connection would otherwise pay at once (docs/PERFORMANCE.md). Closed connections'
 * mappings wait here until the process is about to sleep anyway (uls_seg_reap), or until
 * ULS_SEG_RETIRE_MAX of them are waiting. Nothing reads them any more: the conn is gone.
 * Only trylock: a signal handler may close a socket while the code it interrupted holds
 * the lock.
 */
static pthread_mutex_t retire_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	void *map;
	size_t size;
} retire_list[ULS_SEG_RETIRE_MAX];

void uls_seg_retire(struct uls_seg *seg)
{
	if (!seg || !seg->hdr)
		return;
	/* Busy: another thread, or the code a signal handler interrupted. Unmap at once. */
	if (pthread_mutex_trylock(&retire_mu) != 0) {
		uls_seg_unmap(seg);
		return;
	}
	int n = atomic_load_explicit(&uls_seg_idle.retired, memory_order_relaxed);
	if (n == ULS_SEG_RETIRE_MAX) {
		uls_guard_forget(retire_list[0].map);
		munmap(retire_list[0].map, retire_list[0].size);
		memmove(&retire_list[0], &retire_list[1],
			(ULS_SEG_RETIRE_MAX - 1) * sizeof(retire_list[0]));
		n--;
	}
	retire_list[n].map = seg->hdr;
	retire_list[n].size = seg->map_size;
	atomic_store_explicit(&uls_seg_idle.retired, n + 1, memory_order_relaxed);
	pthread_mutex_unlock(&retire_mu);
	memset(seg, 0, sizeof(*seg));
}

void uls_seg_reap_slow(void)
{
	int saved = errno;

	if (atomic_load_explicit(&uls_seg_idle.retired, memory_order_relaxed) &&
	    pthread_mutex_trylock(&retire_mu) == 0) {
		int n = atomic_load_explicit(&uls_seg_idle.retired, memory_order_relaxed);
		for (int i = 0; i < n; i++) {
			uls_guard_forget(retire_list[i].map);
			munmap(retire_list[i].map, retire_list[i].size);
		}
		atomic_store_explicit(&uls_seg_idle.retired, 0, memory_order_relaxed);
		pthread_mutex_unlock(&retire_mu);
	} /* else busy: the next sleep reaps them */
	if (atomic_load_explicit(&uls_seg_idle.spare_wanted, memory_order_relaxed))
		spare_idle();
	errno = saved;
}

void uls_seg_atfork_child(void)
{
	/* The child has its own copies of the mappings: it unmaps them in its own time. */
	pthread_mutex_init(&retire_mu, NULL);
	/*
	 * The spare's file is the parent's: only the parent may name it. A thread of the
	 * parent that was making one leaves the child at most a stray descriptor copy.
	 */
	pthread_mutex_init(&spare_mu, NULL);
	if (atomic_load_explicit(&spare_ready, memory_order_acquire))
		spare_discard(&spare);
	spare.map = NULL;
	atomic_store(&spare_ready, 0);
	atomic_store(&uls_seg_idle.spare_wanted, 0);
}

void uls_seg_remove(const struct uls_seg *seg)
{
	char path[96];

	uls_seg_path_of(path, sizeof(path), seg->uid, seg->ino);
	unlink(path);
}

void uls_seg_unlink(uint64_t ino)
{
	char path[96];

	uls_seg_path(path, sizeof(path), ino);
	unlink(path);
}

int uls_seg_sweep(void)
{
	char prefix[32], path[300];
	struct uls_seg_hdr hdr;
	struct dirent *de;
	struct stat st;
	time_t now = time(NULL);
	DIR *dir;
	int n = 0, fd;

	snprintf(prefix, sizeof(prefix), "ulsock.%u.", (unsigned)uls_uid());
	dir = opendir(SHM_DIR);
	if (!dir)
		return 0;
	while ((de = readdir(dir)) != NULL) {
		if (uls_bell_sweep_one(de->d_name) ||
		    strncmp(de->d_name, prefix, strlen(prefix)) != 0)
			continue;
		snprintf(path, sizeof(path), SHM_DIR "/%s", de->d_name);
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		/*
		 * A file still being created has no identity yet: leave it to its creator.
		 * One that has had none for a minute never will (a truncated segment): it is
		 * nobody's.
		 */
		if (pread(fd, &hdr, sizeof(hdr), 0) == (ssize_t)sizeof(hdr) &&
		    hdr.id.magic == ULS_SEG_MAGIC) {
			if (uls_pid_gone(hdr.id.client_pid) &&
			    uls_pid_gone(hdr.side[ULS_SIDE_CLIENT].pid) &&
			    uls_pid_gone(hdr.side[ULS_SIDE_SERVER].pid)) {
				unlink(path);
				n++;
			}
		} else if (fstat(fd, &st) == 0 && st.st_uid == uls_uid() &&
			   (size_t)st.st_size < sizeof(hdr) && st.st_mtime < now - ULS_SEG_SWEEP_AGE) {
			unlink(path);
			n++;
		}
		uls_libc.close(fd);
	}
	closedir(dir);
	return n;
}
