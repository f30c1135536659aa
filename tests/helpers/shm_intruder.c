/* SPDX-License-Identifier: MIT */
/*
 * shm_intruder - a process of another user that tries every way it knows to open or map
 * the segment of a connection between two processes of user A (tools/soak.py, part
 * users). Run it as the other user; the soak tells it, as root, everything an attacker
 * could hope to learn: the segment's path, A's pids with their descriptor numbers and the
 * address ranges where they map /dev/shm files, and the connection's two addresses. Like
 * fabric_dir_peer it links the core, for the library's own attach path (attach-forged),
 * and it is never preloaded.
 *
 *   shm_intruder --segment /dev/shm/ulsock.U.I --conn CLIENT SERVER [--attempts N]
 *                [--target PID:FD,FD,...:LO-HI,LO-HI,...]... [--control]
 *
 * CLIENT and SERVER are a.b.c.d:port; LO-HI are hexadecimal addresses, as in
 * /proc/PID/maps. The ways, tried in turn until N attempts in all were made (default 1000),
 * each cycling through its own variants and targets:
 *
 *   open              open() of the segment's name: read-only, read-write, write-only
 *   shm_open          shm_open() of its name
 *   open-guessed      names made from A's socket inodes in /proc/net/tcp and tcp6 (this
 *                     uid's and A's, the inode and its neighbours) and from /dev/shm's list
 *   open-alias        the same file by other paths: //, /./, /../shm/, /proc/self/root,
 *                     /proc/thread-self/root, /run/shm
 *   o_path            open(O_PATH), which needs no permission on the file, then a reopen
 *                     through /proc/self/fd (read-only, read-write) or mmap of it
 *   handle            name_to_handle_at() and open_by_handle_at()
 *   hardlink          a hard link to it under another name, then open() of the link
 *   chmod             chmod(0666) or chown() to this user, then open()
 *   acl               a POSIX ACL granting this user read and write, then open()
 *   proc-fd           /proc/PID/fd/N and /proc/PID/task/PID/fd/N of A's descriptors
 *   pidfd_getfd       pidfd_open() and pidfd_getfd() of A's descriptors
 *   map_files         /proc/PID/map_files/LO-HI of A's /dev/shm mappings
 *   proc-root         the name through /proc/PID/root and /proc/PID/task/PID/root
 *   proc-mem          /proc/PID/mem read at A's mapping
 *   process_vm_readv  a read of A's mapping
 *   attach-forged     the library's attach path (uls_diag_lookup, then uls_seg_open_as)
 *                     with the client socket's uid, inode and cookie from sock_diag, as the
 *                     server's accept() does, or with a made-up cookie
 *   ptrace            PTRACE_SEIZE, PTRACE_ATTACH
 *
 * A success is a descriptor of the file (or of any of A's), a mapping of it, bytes read
 * from it, or a ptrace attachment; each is undone at once (closed, unmapped, the link
 * removed, the mode restored). Output: how many names open-guessed has, one line per way,
 * then a total:
 *
 *   GUESSES N
 *   WAY NAME attempts=N successes=S errors=EACCES:n,EPERM:m
 *   TOTAL attempts=N successes=S
 *
 * --control runs each way through its variants once instead (as user A every way must
 * succeed at least once: the proof that the way works where permissions allow it), and
 * changes nothing: chmod and chown keep the file's mode and owner, the ACL is the minimal
 * one, ptrace only seizes. Exit 0 after the report, 2 on a usage error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "core/config.h"
#include "core/handshake.h"
#include "os/libc.h"
#include "transport/shm/segment.h"

#define MAX_TARGETS 8
#define MAX_FDS 256
#define MAX_MAPS 32
#define MAX_GUESSES 256
#define PATH_LEN 256
#define LINK_PATH_FMT "/dev/shm/ulsock-intruder.%d"

struct target {
	pid_t pid;
	int fds[MAX_FDS];
	int nfds;
	uint64_t lo[MAX_MAPS], hi[MAX_MAPS];
	int nmaps;
};

static const char *seg_path;
static const char *seg_name; /* the last part of seg_path */
static unsigned seg_uid;
static struct sockaddr_in conn_client, conn_server;
static struct target targets[MAX_TARGETS];
static int ntargets;
static int control;
static char guesses[MAX_GUESSES][PATH_LEN];
static int nguesses;

static void usage(void)
{
	fprintf(stderr, "usage: shm_intruder --segment PATH --conn CLIENT SERVER [--attempts N]\n"
			"  [--target PID:FD,...:LO-HI,...]... [--control]\n");
	exit(2);
}

/* ---- helpers: each way returns 0 for a success, or the errno of its failure ---- */

/* A descriptor obtained is a success: it is closed at once. */
static int got_fd(int fd)
{
	if (fd < 0)
		return errno;
	close(fd);
	return 0;
}

static int open_rw(const char *path, int variant)
{
	static const int modes[] = {O_RDWR, O_RDONLY, O_WRONLY};

	return got_fd(open(path, modes[variant % 3] | O_CLOEXEC));
}

static int fd_count(const struct target *t)
{
	return t->nfds;
}

static int map_count(const struct target *t)
{
	return t->nmaps;
}

/* The target that holds the I-th of all the targets' items (descriptors or mappings, as
 * COUNT counts them), cycling, with that item's index in it in *K; NULL when none. */
static const struct target *nth(int i, int (*count)(const struct target *), int *k)
{
	int total = 0;

	for (int t = 0; t < ntargets; t++)
		total += count(&targets[t]);
	if (total == 0)
		return NULL;
	i %= total;
	for (int t = 0;; t++) {
		if (i < count(&targets[t])) {
			*k = i;
			return &targets[t];
		}
		i -= count(&targets[t]);
	}
}

/* ---- the ways ---- */

static int way_open(int i)
{
	return open_rw(seg_path, i);
}

static int way_shm_open(int i)
{
	char name[PATH_LEN];

	snprintf(name, sizeof(name), "/%s", seg_name);
	return got_fd(shm_open(name, i % 2 ? O_RDONLY : O_RDWR, 0));
}

static void add_guess(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

static void add_guess(const char *fmt, ...)
{
	va_list ap;

	if (nguesses == MAX_GUESSES)
		return;
	va_start(ap, fmt);
	vsnprintf(guesses[nguesses], PATH_LEN, fmt, ap);
	va_end(ap);
	for (int k = 0; k < nguesses; k++)
		if (!strcmp(guesses[k], guesses[nguesses]))
			return;
	nguesses++;
}

/* Socket inodes of A (the segment's uid) in /proc/net/tcp and tcp6: the names' source. */
static void guess_from(const char *table)
{
	char line[512];
	FILE *f = fopen(table, "r");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		unsigned uid;
		unsigned long long ino;

		/* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
		if (sscanf(line, " %*s %*s %*s %*s %*s %*s %*s %u %*s %llu", &uid, &ino) != 2 ||
		    uid != seg_uid || ino == 0)
			continue;
		for (int d = -1; d <= 1; d++) {
			add_guess("/dev/shm/ulsock.%u.%llu", seg_uid, ino + (unsigned long long)d);
			add_guess("/dev/shm/ulsock.%u.%llu", (unsigned)geteuid(),
				  ino + (unsigned long long)d);
		}
	}
	fclose(f);
}

static void make_guesses(void)
{
	struct dirent *de;
	DIR *d;

	guess_from("/proc/net/tcp");
	guess_from("/proc/net/tcp6");
	d = opendir("/dev/shm");
	if (d) {
		while ((de = readdir(d)) != NULL)
			if (!strncmp(de->d_name, "ulsock.", 7))
				add_guess("/dev/shm/%s", de->d_name);
		closedir(d);
	}
}

static int way_guessed(int i)
{
	if (nguesses == 0)
		return ENOENT;
	return open_rw(guesses[i % nguesses], i / nguesses);
}

static int way_alias(int i)
{
	static const char *const fmts[] = {
	    "/dev/shm//%s", "/dev/shm/./%s", "/dev/shm/../shm/%s", "/proc/self/root/dev/shm/%s",
	    "/proc/thread-self/root/dev/shm/%s", "/run/shm/%s"};
	char path[PATH_LEN];
	int n = (int)(sizeof(fmts) / sizeof(fmts[0]));

	snprintf(path, sizeof(path), fmts[i % n], seg_name);
	return open_rw(path, i / n);
}

static int way_o_path(int i)
{
	char proc[64];
	int fd = open(seg_path, O_PATH | O_CLOEXEC), rc;

	if (fd < 0)
		return errno;
	if (i % 3 == 2) {
		void *m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);

		rc = m == MAP_FAILED ? errno : 0;
		if (m != MAP_FAILED)
			munmap(m, 4096);
	} else {
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
		rc = open_rw(proc, i % 3);
	}
	close(fd);
	return rc;
}

static int way_handle(int i)
{
	union {
		struct file_handle fh;
		char space[sizeof(struct file_handle) + MAX_HANDLE_SZ];
	} h;
	int mount_id, dir, rc;

	h.fh.handle_bytes = MAX_HANDLE_SZ;
	if (name_to_handle_at(AT_FDCWD, seg_path, &h.fh, &mount_id, 0) < 0)
		return errno;
	dir = open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return errno;
	rc = got_fd(open_by_handle_at(dir, &h.fh, (i % 2 ? O_RDONLY : O_RDWR) | O_CLOEXEC));
	close(dir);
	return rc;
}

static int way_hardlink(int i)
{
	char link[PATH_LEN];
	int rc;

	snprintf(link, sizeof(link), LINK_PATH_FMT, (int)getpid());
	unlink(link);
	if (linkat(AT_FDCWD, seg_path, AT_FDCWD, link, 0) < 0)
		return errno;
	rc = open_rw(link, i);
	unlink(link);
	return rc;
}

static int way_chmod(int i)
{
	struct stat st;
	int rc;

	if (stat(seg_path, &st) < 0)
		return errno;
	if (i % 2 == 0) {
		if (chmod(seg_path, control ? st.st_mode & 07777 : 0666) < 0)
			return errno;
	} else if (chown(seg_path, control ? st.st_uid : geteuid(), (gid_t)-1) < 0) {
		return errno;
	}
	rc = open_rw(seg_path, 0);
	/* Put back what changed (a no-op under --control). */
	if (chmod(seg_path, st.st_mode & 07777) < 0 || chown(seg_path, st.st_uid, st.st_gid) < 0)
		fprintf(stderr, "cannot restore %s: %s\n", seg_path, strerror(errno));
	return rc;
}

/* An ACL, as the kernel's xattr wants it: owner rw, this user rw (not under --control),
 * group none, mask rw, other none. */
static int way_acl(int i)
{
	struct {
		uint16_t tag, perm;
		uint32_t id;
	} e[5];
	uint8_t blob[4 + sizeof(e)];
	uint32_t version = 2;
	int n = 0;

	(void)i;
	e[n++] = (typeof(e[0])){0x01, 6, UINT32_MAX};
	if (!control)
		e[n++] = (typeof(e[0])){0x02, 6, (uint32_t)geteuid()};
	e[n++] = (typeof(e[0])){0x04, 0, UINT32_MAX};
	if (!control)
		e[n++] = (typeof(e[0])){0x10, 6, UINT32_MAX};
	e[n++] = (typeof(e[0])){0x20, 0, UINT32_MAX};
	memcpy(blob, &version, 4);
	memcpy(blob + 4, e, (size_t)n * sizeof(e[0]));
	if (setxattr(seg_path, "system.posix_acl_access", blob, 4 + (size_t)n * sizeof(e[0]), 0) <
	    0)
		return errno;
	int rc = open_rw(seg_path, 0);

	removexattr(seg_path, "system.posix_acl_access");
	return rc;
}

/* open_rw of /proc/PID/WHAT, or with TASK of /proc/PID/task/PID/WHAT. */
static int open_proc(pid_t pid, int task, const char *what, int variant)
{
	char path[2 * PATH_LEN];

	if (task)
		snprintf(path, sizeof(path), "/proc/%d/task/%d/%s", (int)pid, (int)pid, what);
	else
		snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, what);
	return open_rw(path, variant);
}

/* open_proc of the I-th of A's descriptors (COUNT fd_count: fd/N) or of its /dev/shm
 * mappings (map_count: map_files/LO-HI). */
static int open_item(int i, int (*count)(const struct target *), int task, int variant)
{
	char what[64];
	int k;
	const struct target *t = nth(i, count, &k);

	if (!t)
		return ENOENT;
	if (count == fd_count)
		snprintf(what, sizeof(what), "fd/%d", t->fds[k]);
	else
		snprintf(what, sizeof(what), "map_files/%llx-%llx", (unsigned long long)t->lo[k],
			 (unsigned long long)t->hi[k]);
	return open_proc(t->pid, task, what, variant);
}

static int way_proc_fd(int i)
{
	return open_item(i / 4, fd_count, i % 2, i / 2);
}

static int way_pidfd_getfd(int i)
{
	int k, pidfd, rc;
	const struct target *t = nth(i, fd_count, &k);

	if (!t)
		return ENOENT;
	pidfd = (int)syscall(SYS_pidfd_open, t->pid, 0);
	if (pidfd < 0)
		return errno;
	rc = got_fd((int)syscall(SYS_pidfd_getfd, pidfd, t->fds[k], 0));
	close(pidfd);
	return rc;
}

static int way_map_files(int i)
{
	return open_item(i / 2, map_count, 0, i % 2);
}

static int way_proc_root(int i)
{
	char what[PATH_LEN];

	snprintf(what, sizeof(what), "root%s", seg_path);
	return open_proc(targets[(i / 2) % ntargets].pid, i % 2, what, i / 2);
}

static int way_proc_mem(int i)
{
	char path[64], buf[64];
	int k, fd, rc;
	const struct target *t = nth(i, map_count, &k);

	if (!t)
		return ENOENT;
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)t->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	ssize_t n = pread(fd, buf, sizeof(buf), (off_t)t->lo[k]);

	rc = n == (ssize_t)sizeof(buf) ? 0 : n < 0 ? errno : EIO;
	close(fd);
	return rc;
}

static int way_vm_readv(int i)
{
	char buf[64];
	int k;
	const struct target *t = nth(i, map_count, &k);

	if (!t)
		return ENOENT;
	struct iovec local = {buf, sizeof(buf)}, remote = {(void *)(uintptr_t)t->lo[k], sizeof(buf)};
	ssize_t n = process_vm_readv(t->pid, &local, 1, &remote, 1, 0);

	return n == (ssize_t)sizeof(buf) ? 0 : n < 0 ? errno : EIO;
}

static int way_attach_forged(int i)
{
	struct uls_sockid id;
	struct uls_seg seg = {0};
	int err = uls_diag_lookup((struct sockaddr *)&conn_client, (struct sockaddr *)&conn_server,
				  &id);

	if (err < 0)
		return -err;
	if (i % 2)
		id.cookie ^= 0x5eed; /* a made-up cookie: the identity check must refuse it */
	err = uls_seg_open_as(&seg, id.uid, id.ino, id.cookie);
	if (err < 0)
		return -err;
	uls_seg_unmap(&seg);
	return 0;
}

static int way_ptrace(int i)
{
	pid_t pid = targets[(i / 2) % ntargets].pid;
	/* Under --control only the seize, which does not stop the process; the exit of this
	 * process ends the tracing. */
	int attach = !control && i % 2;

	if (ptrace(attach ? PTRACE_ATTACH : PTRACE_SEIZE, pid, NULL, NULL) < 0)
		return errno;
	if (attach)
		ptrace(PTRACE_DETACH, pid, NULL, NULL);
	return 0;
}

static const struct way {
	const char *name;
	int (*fn)(int i);
	int control_variants; /* how many attempts --control makes */
	int needs_targets;
} ways[] = {
    {"open", way_open, 3, 0},
    {"shm_open", way_shm_open, 2, 0},
    {"open-guessed", way_guessed, MAX_GUESSES, 0},
    {"open-alias", way_alias, 6, 0},
    {"o_path", way_o_path, 3, 0},
    {"handle", way_handle, 2, 0},
    {"hardlink", way_hardlink, 1, 0},
    {"chmod", way_chmod, 2, 0},
    {"acl", way_acl, 1, 0},
    {"proc-fd", way_proc_fd, 64, 1},
    {"pidfd_getfd", way_pidfd_getfd, 64, 1},
    {"map_files", way_map_files, 8, 1},
    {"proc-root", way_proc_root, 2, 1},
    {"proc-mem", way_proc_mem, 1, 1},
    {"process_vm_readv", way_vm_readv, 1, 1},
    {"attach-forged", way_attach_forged, 1, 0},
    {"ptrace", way_ptrace, 1, 1},
};
#define NWAYS ((int)(sizeof(ways) / sizeof(ways[0])))

struct tally {
	long attempts, successes;
	long err_count[8];
	int err_code[8];
	int nerr;
};

static void count(struct tally *t, int rc)
{
	t->attempts++;
	if (rc == 0) {
		t->successes++;
		return;
	}
	for (int k = 0; k < t->nerr; k++)
		if (t->err_code[k] == rc) {
			t->err_count[k]++;
			return;
		}
	if (t->nerr < 8) {
		t->err_code[t->nerr] = rc;
		t->err_count[t->nerr++] = 1;
	}
}

/* "EACCES" for EACCES: the symbolic name, which the report is easier to read with. */
static const char *errno_name(int e)
{
	const char *name = strerrorname_np(e);

	return name ? name : "unknown";
}

/* ---- arguments ---- */

static void parse_addr(const char *s, struct sockaddr_in *sa)
{
	char host[64];
	const char *colon = strrchr(s, ':');

	if (!colon || (size_t)(colon - s) >= sizeof(host))
		usage();
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = '\0';
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
		usage();
}

/* PID:FD,FD,...:LO-HI,LO-HI,... (either list may be empty). */
static void parse_target(char *s)
{
	struct target *t;
	char *fds, *maps, *tok, *save;

	if (ntargets == MAX_TARGETS)
		usage();
	t = &targets[ntargets++];
	fds = strchr(s, ':');
	if (!fds)
		usage();
	*fds++ = '\0';
	maps = strchr(fds, ':');
	if (maps)
		*maps++ = '\0';
	t->pid = (pid_t)atoi(s);
	for (tok = strtok_r(fds, ",", &save); tok && t->nfds < MAX_FDS;
	     tok = strtok_r(NULL, ",", &save))
		t->fds[t->nfds++] = atoi(tok);
	if (!maps)
		return;
	for (tok = strtok_r(maps, ",", &save); tok && t->nmaps < MAX_MAPS;
	     tok = strtok_r(NULL, ",", &save)) {
		unsigned long long lo, hi;

		if (sscanf(tok, "%llx-%llx", &lo, &hi) != 2)
			usage();
		t->lo[t->nmaps] = lo;
		t->hi[t->nmaps++] = hi;
	}
}

int main(int argc, char **argv)
{
	struct tally tally[NWAYS] = {0};
	long attempts = 1000, total = 0, wins = 0;
	unsigned long long ino;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--control"))
			control = 1;
		else if (!strcmp(argv[i], "--segment") && i + 1 < argc)
			seg_path = argv[++i];
		else if (!strcmp(argv[i], "--attempts") && i + 1 < argc)
			attempts = atol(argv[++i]);
		else if (!strcmp(argv[i], "--target") && i + 1 < argc)
			parse_target(argv[++i]);
		else if (!strcmp(argv[i], "--conn") && i + 2 < argc) {
			parse_addr(argv[++i], &conn_client);
			parse_addr(argv[++i], &conn_server);
		} else
			usage();
	}
	if (!seg_path || !conn_client.sin_family || attempts < 1)
		usage();
	seg_name = strrchr(seg_path, '/') ? strrchr(seg_path, '/') + 1 : seg_path;
	if (sscanf(seg_name, "ulsock.%u.%llu", &seg_uid, &ino) != 2)
		usage();
	setvbuf(stdout, NULL, _IOLBF, 0);
	uls_libc_init();
	uls_config_load(); /* ULSOCK_TRUST_UIDS may name A: the attach path then tries */
	make_guesses();
	printf("GUESSES %d\n", nguesses);

	if (control) {
		for (int w = 0; w < NWAYS; w++) {
			if (ways[w].needs_targets && ntargets == 0)
				continue;
			int n = ways[w].control_variants;

			if (w == 2 && nguesses < n) /* open-guessed: every guess once */
				n = nguesses;
			for (int i = 0; i < n && tally[w].successes == 0; i++)
				count(&tally[w], ways[w].fn(i));
		}
	} else {
		/* Round-robin over the ways that have something to aim at, so that each gets its
		 * share of ATTEMPTS. */
		int usable[NWAYS], nusable = 0;

		for (int w = 0; w < NWAYS; w++)
			if (!ways[w].needs_targets || ntargets > 0)
				usable[nusable++] = w;
		for (long k = 0; k < attempts; k++) {
			int w = usable[k % nusable];

			count(&tally[w], ways[w].fn((int)(k / nusable)));
		}
	}
	for (int w = 0; w < NWAYS; w++) {
		if (tally[w].attempts == 0)
			continue;
		printf("WAY %s attempts=%ld successes=%ld errors=", ways[w].name, tally[w].attempts,
		       tally[w].successes);
		for (int k = 0; k < tally[w].nerr; k++)
			printf("%s%s:%ld", k ? "," : "", errno_name(tally[w].err_code[k]),
			       tally[w].err_count[k]);
		printf("\n");
		total += tally[w].attempts;
		wins += tally[w].successes;
	}
	printf("TOTAL attempts=%ld successes=%ld\n", total, wins);
	return 0;
}
