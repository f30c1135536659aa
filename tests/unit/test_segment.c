/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory segment: create and open in one process, then files that a dead,
 * confused or hostile creator could leave under a segment's name. uls_seg_open must reject
 * each with an error, map nothing, and never crash. Also uls_seg_sweep.
 *
 * The segments are named after made-up inodes that include this process's pid, so runs in
 * parallel do not collide; an atexit handler removes every name the test used.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "core/config.h"
#include "os/libc.h"
#include "transport/shm/guard.h"
#include "transport/shm/segment.h"

#define COOKIE 0xc00c1e5eed000001ull
#define SMALL (16u << 10)
#define NOBODY 65534

static uint64_t used_inos[64];
static int nused;

static uint64_t test_ino(int n)
{
	uint64_t ino = 0x7e57000000000000ull | (uint64_t)getpid() << 16 | (uint64_t)n;

	for (int i = 0; i < nused; i++)
		if (used_inos[i] == ino)
			return ino;
	CHECK(nused < (int)(sizeof(used_inos) / sizeof(used_inos[0])));
	used_inos[nused++] = ino;
	return ino;
}

static void remove_path(const char *path)
{
	struct stat st;

	if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
		rmdir(path);
	else
		unlink(path);
}

static pid_t main_pid;

static void cleanup(void)
{
	char path[96];

	if (getpid() != main_pid)
		return;
	for (int i = 0; i < nused; i++) {
		uls_seg_path(path, sizeof(path), used_inos[i]);
		remove_path(path);
	}
}

static int path_exists(uint64_t ino)
{
	char path[96];
	struct stat st;

	uls_seg_path(path, sizeof(path), ino);
	return lstat(path, &st) == 0;
}

/* The identity a correct creator writes. */
static struct uls_seg_ident valid_ident(uint64_t ino, uint64_t cookie, uint64_t c2s,
					uint64_t s2c)
{
	struct uls_seg_ident id;

	memset(&id, 0, sizeof(id));
	id.magic = ULS_SEG_MAGIC;
	id.version = ULS_SEG_VERSION;
	id.hdr_size = ULS_SEG_HDR_SIZE;
	id.total_size = ULS_SEG_HDR_SIZE + c2s + s2c;
	id.ring_off[ULS_C2S] = ULS_SEG_HDR_SIZE;
	id.ring_off[ULS_S2C] = ULS_SEG_HDR_SIZE + c2s;
	id.ring_size[ULS_C2S] = c2s;
	id.ring_size[ULS_S2C] = s2c;
	id.client_ino = ino;
	id.client_cookie = cookie;
	id.client_uid = (uint32_t)getuid();
	id.client_pid = (uint32_t)getpid();
	return id;
}

/*
 * Writes a segment file by hand: the first `id_bytes` bytes of the identity, then the
 * file cut or extended to file_size.
 */
static void write_image(uint64_t ino, const struct uls_seg_ident *id, size_t id_bytes,
			off_t file_size)
{
	char path[96];
	int fd;

	uls_seg_path(path, sizeof(path), ino);
	remove_path(path);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	CHECK(fd >= 0);
	CHECK_INT(pwrite(fd, id, id_bytes, 0), ==, (ssize_t)id_bytes);
	CHECK_EQ(ftruncate(fd, file_size), 0);
	close(fd);
}

/* How many mappings of segment files this process holds, from /proc/self/maps. */
static int count_seg_maps(void)
{
	char line[512];
	FILE *f = fopen("/proc/self/maps", "r");
	int n = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, "/dev/shm/ulsock.") != NULL;
	fclose(f);
	return n;
}

/*
 * Opens the segment named ino and expects err (0: success). A failed open leaves the seg
 * untouched and no mapping behind.
 */
static void expect_open(uint64_t ino, uint64_t cookie, int err)
{
	struct uls_seg seg;
	int maps = count_seg_maps();

	memset(&seg, 0, sizeof(seg));
	CHECK_INT(uls_seg_open(&seg, ino, cookie), ==, err);
	if (err) {
		CHECK(seg.hdr == NULL);
	} else {
		CHECK(seg.hdr != NULL);
		CHECK_INT(count_seg_maps(), ==, maps + 1);
		uls_seg_unmap(&seg);
	}
	CHECK_INT(count_seg_maps(), ==, maps);
}

/* An image with one field changed; every other field stays consistent. */
static void expect_image(const char *what, const struct uls_seg_ident *id, off_t file_size,
			 int err)
{
	uint64_t ino = test_ino(1);

	check_context("image: %s", what);
	write_image(ino, id, sizeof(*id), file_size);
	expect_open(ino, COOKIE, err);
}

static void test_create_open(void)
{
	struct uls_seg a, b;
	char path[96];
	struct stat st;
	uint64_t ino = test_ino(0), c2s = 1u << 16, s2c = 1u << 17;

	check_context("create/open");
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	CHECK_EQ(uls_seg_create(&a, ino, COOKIE, c2s, s2c), 0);
	uls_seg_path(path, sizeof(path), ino);
	CHECK_EQ(lstat(path, &st), 0);
	CHECK(S_ISREG(st.st_mode));
	CHECK_INT(st.st_mode & 0777, ==, 0600);
	CHECK_INT(st.st_uid, ==, getuid());
	CHECK_INT(st.st_size, ==, ULS_SEG_HDR_SIZE + c2s + s2c);
	CHECK_U64(a.ino, ==, ino);
	CHECK_U64(a.map_size, ==, ULS_SEG_HDR_SIZE + c2s + s2c);
	CHECK_U64(a.hdr->id.magic, ==, ULS_SEG_MAGIC);
	CHECK_U64(a.hdr->id.client_ino, ==, ino);
	CHECK_U64(a.hdr->id.client_cookie, ==, COOKIE);
	CHECK_INT(a.hdr->id.client_pid, ==, getpid());
	CHECK_INT(a.hdr->id.client_uid, ==, getuid());
	CHECK_U64(a.ring[ULS_C2S].size, ==, c2s);
	CHECK_U64(a.ring[ULS_S2C].size, ==, s2c);
	CHECK((uint8_t *)a.ring[ULS_C2S].data == (uint8_t *)a.hdr + ULS_SEG_HDR_SIZE);
	CHECK((uint8_t *)a.ring[ULS_S2C].data == (uint8_t *)a.hdr + ULS_SEG_HDR_SIZE + c2s);
	CHECK(a.ring[ULS_C2S].sh == &a.hdr->ring[ULS_C2S]);
	CHECK(a.ring[ULS_S2C].sh == &a.hdr->ring[ULS_S2C]);

	CHECK_EQ(uls_seg_open(&b, ino, COOKIE), 0);
	CHECK(b.hdr != a.hdr);
	CHECK_U64(b.ino, ==, ino);
	CHECK_U64(b.map_size, ==, a.map_size);
	CHECK_U64(b.ring[ULS_C2S].size, ==, c2s);
	CHECK_U64(b.ring[ULS_S2C].size, ==, s2c);
	CHECK((uint8_t *)b.ring[ULS_S2C].data == (uint8_t *)b.hdr + ULS_SEG_HDR_SIZE + c2s);
	/* Two mappings of one file: what one writes, the other reads. */
	a.ring[ULS_S2C].data[s2c - 1] = 0xab;
	atomic_store(&a.hdr->ring[ULS_C2S].prod.tail, 77);
	atomic_store(&a.hdr->side[ULS_SIDE_SERVER].pid, 4242);
	CHECK_INT(b.ring[ULS_S2C].data[s2c - 1], ==, 0xab);
	CHECK_U64(atomic_load(&b.hdr->ring[ULS_C2S].prod.tail), ==, 77);
	CHECK_INT(atomic_load(&b.hdr->side[ULS_SIDE_SERVER].pid), ==, 4242);

	/* The kernel's cookie must match the creator's. */
	check_context("create/open: cookie mismatch");
	expect_open(ino, COOKIE + 1, -EPROTO);
	check_context("create/open: no such segment");
	expect_open(test_ino(2), COOKIE, -ENOENT);

	/* The name can go while both mappings stay usable. */
	check_context("create/open: unlink");
	uls_seg_unlink(ino);
	CHECK(!path_exists(ino));
	CHECK_INT(b.ring[ULS_S2C].data[s2c - 1], ==, 0xab);
	expect_open(ino, COOKIE, -ENOENT);
	uls_seg_unmap(&b);
	CHECK(b.hdr == NULL);
	uls_seg_unmap(&a);
	uls_seg_unmap(&a); /* an unmapped (zeroed) seg is accepted */
	uls_seg_unmap(NULL);
}

static void test_create_invalid(void)
{
	const uint64_t bad[] = {0, ULS_RING_MIN / 2, ULS_RING_MIN + 64, 3u << 14,
				2ull * ULS_RING_MAX, UINT64_MAX};
	uint64_t ino = test_ino(3);
	struct uls_seg s;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		check_context("create with ring size %llu", (unsigned long long)bad[i]);
		memset(&s, 0, sizeof(s));
		CHECK_INT(uls_seg_create(&s, ino, COOKIE, bad[i], SMALL), ==, -EINVAL);
		CHECK_INT(uls_seg_create(&s, ino, COOKIE, SMALL, bad[i]), ==, -EINVAL);
		CHECK(s.hdr == NULL);
		CHECK(!path_exists(ino));
	}
}

/* A stale file (a dead socket with the same inode) is replaced by a new create. */
static void test_create_over_stale(void)
{
	struct uls_seg_ident id = valid_ident(test_ino(4), COOKIE, SMALL, SMALL);
	struct uls_seg s;

	check_context("create over a stale file");
	write_image(test_ino(4), &id, sizeof(id), (off_t)id.total_size);
	memset(&s, 0, sizeof(s));
	CHECK_EQ(uls_seg_create(&s, test_ino(4), COOKIE + 9, ULS_RING_MIN, ULS_RING_MIN), 0);
	expect_open(test_ino(4), COOKIE, -EPROTO);
	expect_open(test_ino(4), COOKIE + 9, 0);
	uls_seg_unmap(&s);
}

/*
 * Makes the spare for segments of these sizes the way a client process does: a segment of
 * those sizes, then a sleep. Returns its descriptor, or -1 where spares cannot be made.
 */
static int make_spare(uint64_t c2s, uint64_t s2c)
{
	struct uls_seg t;

	memset(&t, 0, sizeof(t));
	uls_seg_spare_drop();
	CHECK_EQ(uls_seg_create(&t, test_ino(50), COOKIE, c2s, s2c), 0);
	uls_seg_remove(&t);
	uls_seg_unmap(&t);
	CHECK(uls_seg_spare_fd() < 0); /* made while about to sleep, not at once */
	uls_seg_reap();
	return uls_seg_spare_fd();
}

static int fd_is_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

/* The inode of the file behind a mapping, from the segment's name. */
static ino_t file_ino(uint64_t ino)
{
	char path[96];
	struct stat st;

	uls_seg_path(path, sizeof(path), ino);
	CHECK_EQ(stat(path, &st), 0);
	return st.st_ino;
}

/* The spare: made while about to sleep, named by the next create of its sizes. */
static void test_spare(void)
{
	const uint64_t c2s = 1u << 16, s2c = 1u << 17;
	struct uls_seg a, b;
	struct stat st;
	int fd, other;

	check_context("spare: made at the sleep");
	fd = make_spare(c2s, s2c);
	if (fd < 0) {
		fprintf(stderr, "test_segment: no O_TMPFILE spare here, not tested\n");
		return;
	}
	CHECK_INT(fd, >=, ULS_SEG_SPARE_FD_MIN);
	CHECK_INT(fcntl(fd, F_GETFD) & FD_CLOEXEC, ==, FD_CLOEXEC);
	CHECK_EQ(fstat(fd, &st), 0);
	CHECK_INT(st.st_nlink, ==, 0); /* nobody can open it by a name */
	CHECK_INT(st.st_mode & 0777, ==, 0600);
	CHECK_INT(st.st_size, ==, ULS_SEG_HDR_SIZE + c2s + s2c);
	ino_t spare_ino = st.st_ino;

	check_context("spare: named by the next create");
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	CHECK_EQ(uls_seg_create(&a, test_ino(51), COOKIE, c2s, s2c), 0);
	CHECK(uls_seg_spare_fd() < 0);
	CHECK(!fd_is_open(fd));
	CHECK_INT(file_ino(test_ino(51)), ==, spare_ino);
	CHECK_U64(a.hdr->id.magic, ==, ULS_SEG_MAGIC);
	CHECK_U64(a.hdr->id.client_ino, ==, test_ino(51));
	CHECK_U64(a.hdr->id.client_cookie, ==, COOKIE);
	CHECK_INT(a.hdr->id.client_pid, ==, getpid());
	CHECK_U64(a.ring[ULS_S2C].size, ==, s2c);
	/* The server's view: open by name, validate, share the memory. */
	CHECK_EQ(uls_seg_open(&b, test_ino(51), COOKIE), 0);
	a.ring[ULS_S2C].data[s2c - 1] = 0x5a;
	CHECK_INT(b.ring[ULS_S2C].data[s2c - 1], ==, 0x5a);
	uls_seg_remove(&a);
	uls_seg_unmap(&b);
	uls_seg_unmap(&a);

	check_context("spare: over a stale file");
	struct uls_seg_ident id = valid_ident(test_ino(52), COOKIE, SMALL, SMALL);
	write_image(test_ino(52), &id, sizeof(id), (off_t)id.total_size);
	fd = make_spare(ULS_RING_MIN, ULS_RING_MIN);
	CHECK(fd >= 0);
	CHECK_EQ(uls_seg_create(&a, test_ino(52), COOKIE + 9, ULS_RING_MIN, ULS_RING_MIN), 0);
	CHECK(!fd_is_open(fd));
	expect_open(test_ino(52), COOKIE, -EPROTO);
	expect_open(test_ino(52), COOKIE + 9, 0);
	uls_seg_remove(&a);
	uls_seg_unmap(&a);

	check_context("spare: other sizes");
	fd = make_spare(c2s, s2c);
	CHECK(fd >= 0);
	CHECK_EQ(uls_seg_create(&a, test_ino(53), COOKIE, s2c, c2s), 0);
	CHECK(!fd_is_open(fd)); /* dropped */
	CHECK(file_ino(test_ino(53)) != 0);
	CHECK_U64(a.ring[ULS_C2S].size, ==, s2c);
	uls_seg_remove(&a);
	uls_seg_unmap(&a);
	uls_seg_reap();
	CHECK(uls_seg_spare_fd() >= 0); /* the next one has the new sizes */
	CHECK_EQ(fstat(uls_seg_spare_fd(), &st), 0);
	CHECK_INT(st.st_size, ==, ULS_SEG_HDR_SIZE + s2c + c2s);

	/* The program closed the descriptor and the number now holds one of its files. */
	check_context("spare: descriptor taken over by the program");
	fd = make_spare(c2s, s2c);
	CHECK(fd >= 0);
	CHECK_EQ(close(fd), 0);
	other = open("/dev/null", O_RDONLY);
	CHECK(other >= 0);
	CHECK_EQ(dup2(other, fd), fd);
	close(other);
	CHECK_EQ(uls_seg_create(&a, test_ino(54), COOKIE, c2s, s2c), 0);
	CHECK(fd_is_open(fd)); /* the program's file stays open */
	CHECK_EQ(fstat(fd, &st), 0);
	CHECK(S_ISCHR(st.st_mode));
	close(fd);
	CHECK_INT(a.hdr->id.client_pid, ==, getpid());
	uls_seg_remove(&a);
	uls_seg_unmap(&a);

	/* A process that inherited the spare without fork's handlers claimed it first. */
	check_context("spare: claimed by another process");
	fd = make_spare(c2s, s2c);
	CHECK(fd >= 0);
	CHECK_EQ(fstat(fd, &st), 0);
	spare_ino = st.st_ino;
	struct uls_seg_ident *sid = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(sid != MAP_FAILED);
	CHECK_INT(sid->client_pid, ==, 0);
	sid->client_pid = 1; /* what the other process's claim leaves */
	CHECK_EQ(uls_seg_create(&a, test_ino(55), COOKIE, c2s, s2c), 0);
	CHECK(file_ino(test_ino(55)) != spare_ino);
	CHECK_U64(sid->client_ino, ==, 0); /* untouched */
	CHECK_INT(a.hdr->id.client_pid, ==, getpid());
	munmap(sid, 4096);
	uls_seg_remove(&a);
	uls_seg_unmap(&a);

	/* A fork child drops the parent's spare; the parent keeps it. */
	check_context("spare: fork");
	fd = make_spare(c2s, s2c);
	CHECK(fd >= 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		uls_seg_atfork_child();
		_exit(uls_seg_spare_fd() == -1 && !fd_is_open(fd) ? 0 : 1);
	}
	int status;
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK_INT(uls_seg_spare_fd(), ==, fd);
	CHECK(fd_is_open(fd));
	uls_seg_spare_drop();
	CHECK(!fd_is_open(fd));
	CHECK_INT(uls_seg_spare_fd(), ==, -1);
}

/* Out of descriptors: the spare gives its back, and no more are made. Run it last of the
 * spare cases: it turns spares off for the process. */
static void test_spare_yield(void)
{
	struct uls_seg a;
	int fd;

	check_context("spare: yield at EMFILE");
	fd = make_spare(ULS_RING_MIN, ULS_RING_MIN);
	if (fd < 0)
		return; /* no spares here: test_spare said so */
	CHECK_INT(uls_seg_spare_yield(), ==, 1);
	CHECK(!fd_is_open(fd));
	CHECK_INT(uls_seg_spare_fd(), ==, -1);
	CHECK_INT(uls_seg_spare_yield(), ==, 0); /* nothing left to give */
	memset(&a, 0, sizeof(a));
	CHECK_EQ(uls_seg_create(&a, test_ino(56), COOKIE, ULS_RING_MIN, ULS_RING_MIN), 0);
	uls_seg_remove(&a);
	uls_seg_unmap(&a);
	uls_seg_reap();
	CHECK_INT(uls_seg_spare_fd(), ==, -1);
}

static int is_mapped(void *addr)
{
	unsigned char vec[1];

	return mincore(addr, 4096, vec) == 0;
}

/* Closed connections' mappings wait for uls_seg_reap, at most ULS_SEG_RETIRE_MAX. */
static void test_retire(void)
{
	enum { N = ULS_SEG_RETIRE_MAX + 5, KEPT = ULS_SEG_RETIRE_MAX };
	struct uls_seg s[N];
	void *maps[N];

	check_context("retire and reap");
	uls_seg_reap();
	for (int i = 0; i < N; i++) {
		memset(&s[i], 0, sizeof(s[i]));
		CHECK_EQ(uls_seg_create(&s[i], test_ino(20 + i), COOKIE, ULS_RING_MIN, ULS_RING_MIN), 0);
		uls_seg_remove(&s[i]);
		maps[i] = s[i].hdr;
	}
	for (int i = 0; i < N; i++) {
		uls_seg_retire(&s[i]);
		CHECK(s[i].hdr == NULL);
		uls_seg_retire(&s[i]); /* a zeroed seg: nothing happens */
	}
	for (int i = 0; i < N; i++)
		CHECK_INT(is_mapped(maps[i]), ==, i >= N - KEPT);
	uls_seg_reap();
	/* The reap also made a spare, which may sit where one of them was. */
	uls_seg_spare_drop();
	for (int i = 0; i < N; i++)
		CHECK_INT(is_mapped(maps[i]), ==, 0);
}

static sigjmp_buf bus_jmp;
static volatile sig_atomic_t app_bus_calls;

static void app_bus_handler(int sig)
{
	(void)sig;
	app_bus_calls++;
	siglongjmp(bus_jmp, 1);
}

/* Creates a segment (from a spare or anew), truncates its file, and expects the cut. */
static void truncate_one(int from_spare)
{
	struct uls_seg s;
	char path[96];
	int fd;

	check_context("segment truncated under the mapping, %s",
		      from_spare ? "made from a spare" : "created at connect");
	memset(&s, 0, sizeof(s));
	if (from_spare) {
		/* The spare's sizes are those of the last client segment. */
		CHECK_EQ(uls_seg_create(&s, test_ino(41), COOKIE, ULS_RING_MIN, ULS_RING_MIN), 0);
		uls_seg_remove(&s);
		uls_seg_unmap(&s);
		uls_seg_reap();
		if (uls_seg_spare_fd() < 0) {
			fprintf(stderr, "test_segment: no spare here, not tested from one\n");
			return;
		}
	} else {
		uls_seg_spare_drop();
	}
	CHECK_EQ(uls_seg_create(&s, test_ino(40), COOKIE, ULS_RING_MIN, ULS_RING_MIN), 0);
	CHECK(uls_seg_spare_fd() < 0);
	_Atomic uint64_t *tail = &s.ring[ULS_S2C].sh->prod.tail;
	atomic_store(tail, 42);
	CHECK(!uls_guard_cut_at(s.hdr));
	uls_seg_path(path, sizeof(path), test_ino(40));
	fd = open(path, O_RDWR | O_CLOEXEC);
	CHECK(fd >= 0);
	CHECK_EQ(ftruncate(fd, 0), 0);
	close(fd);
	CHECK_INT(atomic_load(tail), ==, 0); /* the fault found zero pages */
	CHECK(uls_guard_cut_at(s.hdr));
	atomic_store(tail, 7); /* writable, and this process's own now */
	CHECK_INT(atomic_load(tail), ==, 7);
	void *base = s.hdr;
	uls_seg_remove(&s);
	uls_seg_unmap(&s);
	CHECK(!uls_guard_was_cut(base));
}

/*
 * A segment file shrunk under its mapping: the guard turns the SIGBUS into private zero
 * pages and remembers the cut; a SIGBUS anywhere else still reaches the program.
 */
static void test_truncated(void)
{
	struct sigaction before;
	int fd, r;

	CHECK_EQ(sigaction(SIGBUS, NULL, &before), 0); /* SIG_DFL, or a sanitizer's */
	r = uls_guard_install(sigaction);
	if (r < 0) {
		/* A sanitizer runtime keeps SIGBUS to itself. */
		fprintf(stderr, "test_segment: no SIGBUS guard here (%s), truncation not tested\n",
			strerror(-r));
		return;
	}
	truncate_one(0);
	/* /proc/self/maps names this one "/dev/shm/#<inode> (deleted)": the guard's note. */
	truncate_one(1);
	check_context("SIGBUS outside any segment");

	/* Not a segment: the program's handler gets it. */
	struct sigaction act, old;
	memset(&act, 0, sizeof(act));
	act.sa_handler = app_bus_handler;
	sigemptyset(&act.sa_mask);
	CHECK_EQ(uls_guard_sigaction(&act, &old, &r), 0);
	/* What was there before the guard is what the program is told it had. */
	CHECK_INT(old.sa_flags & SA_SIGINFO, ==, before.sa_flags & SA_SIGINFO);
	CHECK(old.sa_handler == before.sa_handler);
	char other[] = "/dev/shm/uls-test-bus.XXXXXX";
	fd = mkstemp(other);
	CHECK(fd >= 0);
	CHECK_EQ(ftruncate(fd, 4096), 0);
	volatile char *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(m != MAP_FAILED);
	CHECK_EQ(ftruncate(fd, 0), 0);
	unlink(other);
	close(fd);
	if (sigsetjmp(bus_jmp, 1) == 0) {
		m[0] = 1;
		CHECK(!"no SIGBUS from a truncated file");
	}
	CHECK_INT(app_bus_calls, ==, 1);
	munmap((void *)m, 4096);
	CHECK_EQ(uls_guard_sigaction(&old, NULL, &r), 0);
}

static void test_images(void)
{
	struct uls_seg_ident v = valid_ident(test_ino(1), COOKIE, SMALL, 2 * SMALL), id;
	const off_t total = (off_t)v.total_size;

	/* The hand-written image itself is accepted: each rejection below is one field. */
	expect_image("valid", &v, total, 0);
	id = valid_ident(test_ino(1), COOKIE, ULS_RING_MIN, ULS_RING_MIN);
	expect_image("valid, smallest rings", &id, (off_t)id.total_size, 0);
	id = valid_ident(test_ino(1), COOKIE, ULS_RING_MAX, ULS_RING_MAX);
	expect_image("valid, largest rings", &id, (off_t)id.total_size, 0);

	id = v, id.magic ^= 1;
	expect_image("wrong magic", &id, total, -EPROTO);
	id = v, id.magic = 0;
	expect_image("magic not yet written", &id, total, -EPROTO);
	id = v, id.version = ULS_SEG_VERSION + 1;
	expect_image("newer version", &id, total, -EPROTO);
	id = v, id.version = 0;
	expect_image("version 0", &id, total, -EPROTO);
	id = v, id.hdr_size = 2 * ULS_SEG_HDR_SIZE;
	expect_image("header size", &id, total, -EPROTO);

	/* Ring sizes, with the offsets, total and file size made to agree with them. */
	const uint64_t sizes[] = {0, 1, ULS_RING_MIN / 2, ULS_RING_MIN + 64, 3u << 13,
				  (1u << 16) - 1, 2ull * ULS_RING_MAX, 1ull << 40, UINT64_MAX};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint64_t sz = sizes[i];
		off_t fs;

		id = valid_ident(test_ino(1), COOKIE, sz, SMALL);
		fs = sz <= 4ull * ULS_RING_MAX ? (off_t)id.total_size : total;
		check_context("c2s ring size %llu", (unsigned long long)sz);
		expect_image("c2s ring size", &id, fs, -EPROTO);
		id = valid_ident(test_ino(1), COOKIE, SMALL, sz);
		fs = sz <= 4ull * ULS_RING_MAX ? (off_t)id.total_size : total;
		expect_image("s2c ring size", &id, fs, -EPROTO);
	}

	/* Offsets that disagree with the sizes. */
	id = v, id.ring_off[ULS_C2S] += 64;
	expect_image("c2s offset", &id, total, -EPROTO);
	id = v, id.ring_off[ULS_C2S] = 0;
	expect_image("c2s offset 0 (over the header)", &id, total, -EPROTO);
	id = v, id.ring_off[ULS_S2C] = ULS_SEG_HDR_SIZE;
	expect_image("s2c offset on top of c2s", &id, total, -EPROTO);
	id = v, id.ring_off[ULS_S2C] = total;
	expect_image("s2c offset past the end", &id, total, -EPROTO);
	id = v, id.ring_off[ULS_S2C] += UINT64_MAX - 4095;
	expect_image("s2c offset wraps", &id, total, -EPROTO);
	id = v;
	id.ring_off[ULS_C2S] = ULS_SEG_HDR_SIZE + 2 * SMALL;
	id.ring_off[ULS_S2C] = ULS_SEG_HDR_SIZE;
	expect_image("rings swapped", &id, total, -EPROTO);

	/* The total size against the layout and against the file. */
	id = v, id.total_size += 4096;
	expect_image("total larger than layout (file agrees with total)", &id, total + 4096,
		     -EPROTO);
	expect_image("total larger than layout and file", &id, total, -EPROTO);
	id = v;
	expect_image("file larger than total", &id, total + 4096, -EPROTO);
	expect_image("file one byte larger", &id, total + 1, -EPROTO);
	expect_image("file one byte short", &id, total - 1, -EPROTO);
	expect_image("file cut in the second ring", &id, total - SMALL, -EPROTO);
	expect_image("file is the header page only", &id, ULS_SEG_HDR_SIZE, -EPROTO);
	expect_image("file shorter than a page", &id, sizeof(id), -EPROTO);
	check_context("image: file shorter than the identity");
	write_image(test_ino(1), &v, 100, 100);
	expect_open(test_ino(1), COOKIE, -EPROTO);
	check_context("image: empty file");
	write_image(test_ino(1), &v, 0, 0);
	expect_open(test_ino(1), COOKIE, -EPROTO);
	check_context("image: all zero (creator died after ftruncate)");
	id = v;
	memset(&id, 0, sizeof(id));
	write_image(test_ino(1), &id, sizeof(id), total);
	expect_open(test_ino(1), COOKIE, -EPROTO);
	check_context("image: huge sparse file");
	write_image(test_ino(1), &v, sizeof(v), (off_t)1 << 40);
	expect_open(test_ino(1), COOKIE, -EPROTO);

	/* Identity: the name, the kernel's cookie and the stamped fields must all agree. */
	id = v, id.client_cookie ^= 1ull << 40;
	expect_image("cookie mismatch", &id, total, -EPROTO);
	id = v, id.client_cookie = 0;
	expect_image("cookie 0", &id, total, -EPROTO);
	id = v, id.client_ino = test_ino(2);
	expect_image("inode mismatch", &id, total, -EPROTO);
	/* Stale: a segment of another socket that once had this inode, with its cookie. */
	id = valid_ident(test_ino(1), COOKIE - 1, SMALL, 2 * SMALL);
	expect_image("stale segment of an earlier socket", &id, total, -EPROTO);
}

static void test_not_a_file(void)
{
	struct uls_seg_ident v = valid_ident(test_ino(5), COOKIE, SMALL, SMALL);
	char path[96], target[96];

	uls_seg_path(path, sizeof(path), test_ino(6));
	uls_seg_path(target, sizeof(target), test_ino(5));
	write_image(test_ino(5), &v, sizeof(v), (off_t)v.total_size);
	expect_open(test_ino(5), COOKIE, 0);

	/* A symlink to a valid segment: O_NOFOLLOW refuses it, even with matching contents. */
	check_context("symlink");
	v = valid_ident(test_ino(6), COOKIE, SMALL, SMALL);
	write_image(test_ino(5), &v, sizeof(v), (off_t)v.total_size);
	remove_path(path);
	CHECK_EQ(symlink(target, path), 0);
	expect_open(test_ino(6), COOKIE, -ELOOP);
	/* The creator replaces the link, and leaves its target alone. */
	struct uls_seg s;
	memset(&s, 0, sizeof(s));
	CHECK_EQ(uls_seg_create(&s, test_ino(6), COOKIE, SMALL, SMALL), 0);
	struct stat st;
	CHECK_EQ(lstat(path, &st), 0);
	CHECK(S_ISREG(st.st_mode));
	CHECK_EQ(lstat(target, &st), 0);
	CHECK_INT(st.st_size, ==, (off_t)v.total_size);
	uls_seg_unmap(&s);

	check_context("fifo");
	remove_path(path);
	CHECK_EQ(mkfifo(path, 0600), 0);
	expect_open(test_ino(6), COOKIE, -EPERM);

	check_context("directory");
	remove_path(path);
	CHECK_EQ(mkdir(path, 0700), 0);
	expect_open(test_ino(6), COOKIE, -EISDIR);
	remove_path(path);
}

/* A file owned by another uid is not trusted, unless ULSOCK_TRUST_UIDS names it. */
static void test_other_uid(void)
{
	struct uls_seg_ident v = valid_ident(test_ino(7), COOKIE, SMALL, SMALL);
	char path[96];

	check_context("owned by another uid");
	if (geteuid() != 0) {
		fprintf(stderr, "note: not root, cannot chown a segment: other-uid case skipped\n");
		return;
	}
	uls_seg_path(path, sizeof(path), test_ino(7));
	write_image(test_ino(7), &v, sizeof(v), (off_t)v.total_size);
	expect_open(test_ino(7), COOKIE, 0);
	if (chown(path, NOBODY, NOBODY) < 0) {
		fprintf(stderr, "note: chown: %s: other-uid case skipped\n", strerror(errno));
		return;
	}
	expect_open(test_ino(7), COOKIE, -EPERM);
	/* Trusting the uid makes the same file acceptable. */
	check_context("owned by a trusted uid");
	CHECK_EQ(setenv("ULSOCK_TRUST_UIDS", "12345,65534", 1), 0);
	uls_config_load();
	CHECK(uls_config_uid_trusted(NOBODY));
	/* The uid in the name must be the owner's: trust does not excuse a squatter. */
	expect_open(test_ino(7), COOKIE, -EPERM);
	char theirs[96];
	struct uls_seg seg;
	uls_seg_path_of(theirs, sizeof(theirs), NOBODY, test_ino(7));
	CHECK_EQ(rename(path, theirs), 0);
	CHECK_INT(uls_seg_open_as(&seg, NOBODY, test_ino(7), COOKIE), ==, 0);
	uls_seg_unmap(&seg);
	remove_path(theirs);
}

/*
 * uls_seg_sweep works on every segment of this uid. When running as root it runs in a
 * child that becomes `nobody`, so it only ever sees the files this test made.
 */
static void sweep_child(void)
{
	struct uls_seg dead, alive, server_alive, fresh, foreign;
	char junk[96], old_junk[96];
	pid_t gone;
	int fd, n;

	if (geteuid() == 0 && (setgid(NOBODY) < 0 || setuid(NOBODY) < 0))
		CHECK_SKIP("cannot become uid %d: %s", NOBODY, strerror(errno));
	/* What the preload's fork and start-up hooks do: renew the cached pid and uid. */
	uls_config_atfork_child();
	uls_config_load();
	main_pid = getpid(); /* the atexit cleanup now removes this process's names */
	/* A pid that surely belongs to no process: a child that has been reaped. */
	gone = fork();
	CHECK(gone >= 0);
	if (gone == 0)
		_exit(0);
	CHECK_INT(waitpid(gone, NULL, 0), ==, gone);

	memset(&dead, 0, sizeof(dead));
	memset(&alive, 0, sizeof(alive));
	memset(&server_alive, 0, sizeof(server_alive));
	memset(&fresh, 0, sizeof(fresh));
	memset(&foreign, 0, sizeof(foreign));
	check_context("sweep: create");
	CHECK_EQ(uls_seg_create(&dead, test_ino(10), COOKIE, SMALL, SMALL), 0);
	CHECK_EQ(uls_seg_create(&alive, test_ino(11), COOKIE, SMALL, SMALL), 0);
	CHECK_EQ(uls_seg_create(&server_alive, test_ino(12), COOKIE, SMALL, SMALL), 0);
	/* Just created: only the identity names the (live) creator. */
	CHECK_EQ(uls_seg_create(&fresh, test_ino(14), COOKIE, SMALL, SMALL), 0);
	CHECK_INT(fresh.hdr->id.client_pid, ==, getpid());
	/* A live creator this process may not signal (the parent, when it is root). */
	CHECK_EQ(uls_seg_create(&foreign, test_ino(15), COOKIE, SMALL, SMALL), 0);
	foreign.hdr->id.client_pid = (uint32_t)getppid();
	dead.hdr->id.client_pid = (uint32_t)gone;
	atomic_store(&dead.hdr->side[ULS_SIDE_CLIENT].pid, (uint32_t)gone);
	atomic_store(&alive.hdr->side[ULS_SIDE_CLIENT].pid, (uint32_t)getpid());
	server_alive.hdr->id.client_pid = (uint32_t)gone;
	atomic_store(&server_alive.hdr->side[ULS_SIDE_CLIENT].pid, (uint32_t)gone);
	atomic_store(&server_alive.hdr->side[ULS_SIDE_SERVER].pid, (uint32_t)getpid());
	/* A file still being created (not even truncated yet) is left alone. */
	uls_seg_path(junk, sizeof(junk), test_ino(13));
	fd = open(junk, O_RDWR | O_CREAT | O_EXCL, 0600);
	CHECK(fd >= 0);
	close(fd);
	/* One truncated long ago (by a hostile or buggy process) is nobody's. */
	uls_seg_path(old_junk, sizeof(old_junk), test_ino(16));
	fd = open(old_junk, O_RDWR | O_CREAT | O_EXCL, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(ftruncate(fd, 100), 0);
	struct timespec past[2] = {{time(NULL) - ULS_SEG_SWEEP_AGE - 5, 0},
				   {time(NULL) - ULS_SEG_SWEEP_AGE - 5, 0}};
	CHECK_EQ(futimens(fd, past), 0);
	close(fd);

	check_context("sweep");
	n = uls_seg_sweep();
	CHECK_INT(n, >=, 1);
	CHECK(!path_exists(test_ino(10)));
	CHECK(path_exists(test_ino(11)));
	CHECK(path_exists(test_ino(12)));
	CHECK(path_exists(test_ino(13)));
	CHECK(path_exists(test_ino(14)));
	CHECK(path_exists(test_ino(15)));
	CHECK(!path_exists(test_ino(16)));
	/* The mapping of a swept segment stays valid. */
	CHECK_U64(dead.hdr->id.magic, ==, ULS_SEG_MAGIC);
	/* Once its last process is gone, a segment goes too. */
	atomic_store(&server_alive.hdr->side[ULS_SIDE_SERVER].pid, (uint32_t)gone);
	CHECK_INT(uls_seg_sweep(), >=, 1);
	CHECK(!path_exists(test_ino(12)));
	CHECK(path_exists(test_ino(11)));
	uls_seg_unlink(test_ino(11));
	uls_seg_unlink(test_ino(14));
	uls_seg_unlink(test_ino(15));
	unlink(junk);
	uls_seg_unmap(&dead);
	uls_seg_unmap(&alive);
	uls_seg_unmap(&server_alive);
	uls_seg_unmap(&fresh);
	uls_seg_unmap(&foreign);
	exit(CHECK_PASS);
}

static void test_sweep(void)
{
	int status;
	pid_t pid = fork();

	CHECK(pid >= 0);
	if (pid == 0)
		sweep_child();
	CHECK_INT(waitpid(pid, &status, 0), ==, pid);
	CHECK(WIFEXITED(status));
	if (WEXITSTATUS(status) == CHECK_SKIPPED)
		fprintf(stderr, "note: sweep case skipped\n");
	else
		CHECK_INT(WEXITSTATUS(status), ==, CHECK_PASS);
}

int main(void)
{
	struct stat st;

	if (stat("/dev/shm", &st) < 0 || !S_ISDIR(st.st_mode))
		CHECK_SKIP("no /dev/shm");
	main_pid = getpid();
	atexit(cleanup);
	uls_libc_init();
	unsetenv("ULSOCK_TRUST_UIDS");
	uls_config_load();

	test_create_open();
	test_create_invalid();
	test_create_over_stale();
	test_spare();
	test_retire();
	test_truncated();
	test_spare_yield();
	test_images();
	test_not_a_file();
	test_sweep();
	test_other_uid(); /* last: it changes the trusted uids */
	check_context("%s", "");
	return CHECK_PASS;
}
