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
#include <sys/xattr.h>
#include <unistd.h>

#include "guard.h"
#include "../../core/config.h"
#include "../../core/log.h"
#include "../../preload/libc.h"

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
 * a POSIX ACL grants each of them read and write, nobody else gains anything.
 */
static void grant_trusted(int fd)
{
	struct {
		uint16_t tag, perm;
		uint32_t id;
	} e[ULS_MAX_TRUSTED + 4];
	uint8_t blob[4 + sizeof(e)];
	uint32_t version = 2;
	int n = 0;

	if (uls_cfg.ntrusted == 0)
		return;
	e[n++] = (typeof(e[0])){0x01, 6, UINT32_MAX}; /* owner */
	for (int i = 0; i < uls_cfg.ntrusted; i++)
		if (uls_cfg.trusted[i] != uls_uid())
			e[n++] = (typeof(e[0])){0x02, 6, (uint32_t)uls_cfg.trusted[i]};
	/* The kernel wants named users sorted by id. */
	for (int i = 1; i < n; i++)
		for (int j = i; j > 1 && e[j].id < e[j - 1].id; j--) {
			typeof(e[0]) t = e[j];
			e[j] = e[j - 1];
			e[j - 1] = t;
		}
	e[n++] = (typeof(e[0])){0x04, 0, UINT32_MAX}; /* group */
	e[n++] = (typeof(e[0])){0x10, 6, UINT32_MAX}; /* mask */
	e[n++] = (typeof(e[0])){0x20, 0, UINT32_MAX}; /* other */
	memcpy(blob, &version, 4);
	memcpy(blob + 4, e, (size_t)n * sizeof(e[0]));
	if (fsetxattr(fd, "system.posix_acl_access", blob, 4 + (size_t)n * sizeof(e[0]), 0) < 0)
		uls_warn("cannot grant trusted uids access to a segment: %s", strerror(errno));
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

int uls_seg_create(struct uls_seg *seg, uint64_t ino, uint64_t cookie, uint64_t c2s_size,
		   uint64_t s2c_size)
{
	char path[96];
	uint64_t total = layout_total(c2s_size, s2c_size);
	struct uls_seg_ident *id;
	void *map;
	int fd, err;

	if (!uls_ring_size_valid(c2s_size) || !uls_ring_size_valid(s2c_size))
		return -EINVAL;
	uls_seg_path(path, sizeof(path), ino);
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

	id = map;
	id->version = ULS_SEG_VERSION;
	id->hdr_size = ULS_SEG_HDR_SIZE;
	id->total_size = total;
	id->ring_off[ULS_C2S] = ULS_SEG_HDR_SIZE;
	id->ring_off[ULS_S2C] = ULS_SEG_HDR_SIZE + c2s_size;
	id->ring_size[ULS_C2S] = c2s_size;
	id->ring_size[ULS_S2C] = s2c_size;
	id->client_ino = ino;
	id->client_cookie = cookie;
	id->client_uid = (uint32_t)uls_uid();
	id->client_pid = (uint32_t)uls_pid();
	/* Release: a server that sees the magic sees a complete identity. */
	atomic_store_explicit((_Atomic uint64_t *)&id->magic, ULS_SEG_MAGIC, memory_order_release);
	seg_bind(seg, map, total, c2s_size, s2c_size);
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
static _Atomic int retire_count;

void uls_seg_retire(struct uls_seg *seg)
{
	if (!seg || !seg->hdr)
		return;
	/* Busy: another thread, or the code a signal handler interrupted. Unmap at once. */
	if (pthread_mutex_trylock(&retire_mu) != 0) {
		uls_seg_unmap(seg);
		return;
	}
	int n = atomic_load_explicit(&retire_count, memory_order_relaxed);
	if (n == ULS_SEG_RETIRE_MAX) {
		uls_guard_forget(retire_list[0].map);
		munmap(retire_list[0].map, retire_list[0].size);
		memmove(&retire_list[0], &retire_list[1],
			(ULS_SEG_RETIRE_MAX - 1) * sizeof(retire_list[0]));
		n--;
	}
	retire_list[n].map = seg->hdr;
	retire_list[n].size = seg->map_size;
	atomic_store_explicit(&retire_count, n + 1, memory_order_relaxed);
	pthread_mutex_unlock(&retire_mu);
	memset(seg, 0, sizeof(*seg));
}

void uls_seg_reap_slow(void)
{
	if (pthread_mutex_trylock(&retire_mu) != 0)
		return; /* the next sleep reaps them */
	int n = atomic_load_explicit(&retire_count, memory_order_relaxed);
	for (int i = 0; i < n; i++) {
		uls_guard_forget(retire_list[i].map);
		munmap(retire_list[i].map, retire_list[i].size);
	}
	atomic_store_explicit(&retire_count, 0, memory_order_relaxed);
	pthread_mutex_unlock(&retire_mu);
}

_Atomic int *uls_seg_retired_count(void)
{
	return &retire_count;
}

void uls_seg_atfork_child(void)
{
	/* The child has its own copies of the mappings: it unmaps them in its own time. */
	pthread_mutex_init(&retire_mu, NULL);
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

static int pid_gone(uint32_t pid)
{
	return pid == 0 || (kill((pid_t)pid, 0) < 0 && errno == ESRCH);
}

int uls_seg_sweep(void)
{
	char prefix[32], path[300];
	struct uls_seg_hdr hdr;
	struct dirent *de;
	DIR *dir;
	int n = 0, fd;

	snprintf(prefix, sizeof(prefix), "ulsock.%u.", (unsigned)uls_uid());
	dir = opendir(SHM_DIR);
	if (!dir)
		return 0;
	while ((de = readdir(dir)) != NULL) {
		if (strncmp(de->d_name, prefix, strlen(prefix)) != 0)
			continue;
		snprintf(path, sizeof(path), SHM_DIR "/%s", de->d_name);
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		/* A file still being created has no identity yet: leave it to its creator. */
		if (pread(fd, &hdr, sizeof(hdr), 0) == (ssize_t)sizeof(hdr) &&
		    hdr.id.magic == ULS_SEG_MAGIC && pid_gone(hdr.id.client_pid) &&
		    pid_gone(hdr.side[ULS_CLIENT].pid) && pid_gone(hdr.side[ULS_SERVER].pid)) {
			unlink(path);
			n++;
		}
		uls_libc.close(fd);
	}
	closedir(dir);
	return n;
}
