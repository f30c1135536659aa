/* SPDX-License-Identifier: MIT */
/*
 * Bells with names (core/bell.h): with ULSOCK_TRUST_UIDS set, a sleeper's bell is a FIFO
 * in /dev/shm that the trusted users may write and nobody else may open; its name goes
 * when the process ends or execs (uls_bell_unname) and, left by a process killed, at the
 * next start-up's sweep. Checked:
 *   - the bell's name: uls_bell_pipe's, a FIFO of this user with the bell's inode, mode
 *     0600 with an ACL that gives each trusted user write and nothing else;
 *   - a trusted user (as root: a child running as nobody) opens it to write and cannot
 *     open it to read; another user (uid 12345) cannot open it at all;
 *   - a byte written by name rings the bell (its read end is readable), and clears;
 *   - a stale name with this pid (an earlier process of it, killed) is replaced;
 *   - unnamed: the file is gone and uls_bell_pipe says there is none to name;
 *   - the sweep removes the names of this user's dead processes, and only those.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "check.h"
#include "core/bell.h"
#include "core/config.h"
#include "os/libc.h"
#include "transport/shm/segment.h"

#define TRUSTED 65534u
#define STRANGER 12345u

/* In a child running as uid: open's errno for path opened with flags, 0 when it opens. */
static int open_as(uid_t uid, const char *path, int flags)
{
	pid_t pid = fork();
	CHECK_INT(pid, >=, 0);
	if (pid == 0) {
		if (setgid(uid) < 0 || setuid(uid) < 0)
			_exit(200);
		int fd = open(path, flags | O_NONBLOCK);
		_exit(fd >= 0 ? 0 : errno & 0x7f);
	}
	int status;
	CHECK_INT(waitpid(pid, &status, 0), ==, pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 200);
	return WEXITSTATUS(status);
}

/* The ACL's entry for user uid: its permission bits, or -1 when it has none. */
static int acl_perm_of(const char *path, uint32_t uid, int *mask)
{
	uint8_t blob[4 + 8 * 32];
	ssize_t n = getxattr(path, "system.posix_acl_access", blob, sizeof(blob));
	int perm = -1;

	CHECK_INT(n, >, 4);
	for (ssize_t off = 4; off + 8 <= n; off += 8) {
		uint16_t tag, p;
		uint32_t id;
		memcpy(&tag, blob + off, 2);
		memcpy(&p, blob + off + 2, 2);
		memcpy(&id, blob + off + 4, 4);
		if (tag == 0x02 && id == uid)
			perm = p;
		if (tag == 0x10)
			*mask = p;
	}
	return perm;
}

static int readable(int fd)
{
	struct pollfd p = {fd, POLLIN, 0};
	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

int main(void)
{
	char path[64], stale[64];
	struct stat st;
	uint64_t who, ino;

	uls_libc_init();
	uls_cfg.ntrusted = 1;
	uls_cfg.trusted[0] = TRUSTED;

	check_context("a stale name where the first bell goes");
	uls_bell_path(stale, sizeof(stale), (uint32_t)getpid(), 0);
	unlink(stale);
	CHECK_INT(mkfifo(stale, 0666), ==, 0);
	struct stat old;
	CHECK_INT(stat(stale, &old), ==, 0);

	check_context("the bell's name");
	int bell = uls_bell_get();
	CHECK_INT(bell, ==, 0);
	CHECK_EQ(uls_bell_pipe(bell, &who, &ino), 1);
	CHECK_EQ(who >> 32, (uint64_t)getpid());
	CHECK_EQ((uint32_t)who, ULS_BELL_NAMED | (uint32_t)bell);
	uls_bell_path(path, sizeof(path), (uint32_t)getpid(), (uint32_t)bell);
	CHECK_INT(lstat(path, &st), ==, 0);
	CHECK(S_ISFIFO(st.st_mode));
	CHECK_EQ((uint64_t)st.st_ino, ino);
	CHECK(st.st_ino != old.st_ino);
	CHECK_EQ(st.st_uid, uls_uid());
	CHECK_EQ(st.st_mode & 0077, 0020); /* the ACL's mask shows as the group's bits */
	int mask = -1;
	CHECK_EQ(acl_perm_of(path, TRUSTED, &mask), 2);
	CHECK_EQ(mask, 2);
	CHECK_EQ(acl_perm_of(path, STRANGER, &mask), -1);

	if (geteuid() == 0) {
		check_context("who may open it");
		CHECK_EQ(open_as(TRUSTED, path, O_WRONLY), 0);
		CHECK_EQ(open_as(TRUSTED, path, O_RDONLY), EACCES);
		CHECK_EQ(open_as(TRUSTED, path, O_RDWR), EACCES);
		CHECK_EQ(open_as(STRANGER, path, O_WRONLY), EACCES);
	}

	check_context("a byte by name rings it");
	CHECK(!readable(uls_bell_fd(bell)));
	int w = open(path, O_WRONLY | O_NONBLOCK);
	CHECK_INT(w, >=, 0);
	CHECK_INT(write(w, "", 1), ==, 1);
	close(w);
	CHECK(readable(uls_bell_fd(bell)));
	uls_bell_clear(bell);
	CHECK(!readable(uls_bell_fd(bell)));

	check_context("the sweep");
	pid_t dead = fork();
	CHECK_INT(dead, >=, 0);
	if (dead == 0)
		_exit(0);
	CHECK_INT(waitpid(dead, NULL, 0), ==, dead);
	char gone[64], theirs[64], live[64];
	uls_bell_path(gone, sizeof(gone), (uint32_t)dead, 3);
	uls_bell_path(theirs, sizeof(theirs), (uint32_t)dead, 4);
	uls_bell_path(live, sizeof(live), (uint32_t)getppid(), 5);
	unlink(gone);
	unlink(theirs);
	unlink(live);
	CHECK_INT(mkfifo(gone, 0600), ==, 0);
	CHECK_INT(mkfifo(live, 0600), ==, 0);
	int other_user = geteuid() == 0;
	if (other_user) {
		CHECK_INT(mkfifo(theirs, 0600), ==, 0);
		CHECK_INT(chown(theirs, TRUSTED, TRUSTED), ==, 0);
	}
	uls_bell_sweep();
	CHECK_INT(lstat(gone, &st), ==, -1);
	CHECK_INT(lstat(live, &st), ==, 0);
	CHECK_INT(lstat(path, &st), ==, 0);
	if (other_user)
		CHECK_INT(lstat(theirs, &st), ==, 0);

	check_context("the segments' sweep, the one walk of a start-up, takes bells too");
	CHECK_INT(mkfifo(gone, 0600), ==, 0);
	uls_seg_sweep();
	CHECK_INT(lstat(gone, &st), ==, -1);
	CHECK_INT(lstat(live, &st), ==, 0);
	CHECK_INT(lstat(path, &st), ==, 0);
	unlink(theirs);
	unlink(live);

	check_context("unnamed");
	uls_bell_unname();
	CHECK_INT(lstat(path, &st), ==, -1);
	CHECK_EQ(uls_bell_pipe(bell, &who, &ino), 0);
	/* The pipe itself still rings. */
	uls_bell_begin(bell);
	CHECK(!readable(uls_bell_fd(bell)));

	check_context("without trust, bells have no name");
	uls_bell_put(bell);
	uls_cfg.ntrusted = 0;
	/* The table keeps its bells: the one given back comes again, unnamed for good. */
	CHECK_EQ(uls_bell_get(), bell);
	int plain = uls_bell_get();
	CHECK_INT(plain, >=, 0);
	CHECK_EQ(uls_bell_pipe(plain, &who, &ino), 1);
	CHECK_EQ((uint32_t)who & ULS_BELL_NAMED, 0u);
	CHECK_EQ((uint32_t)who, (uint32_t)uls_bell_fd(plain));
	return CHECK_PASS;
}
