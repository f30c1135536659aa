/* SPDX-License-Identifier: MIT */
/*
 * Wake-ups through a sleeper's pipe (transport/shm/wakepipe.h): the waker writes exactly
 * the pipe a sleeping process named, and nothing else a peer could name instead.
 *
 * A child process plays the sleeper: it makes pipes (and other descriptors) and tells
 * this process their names over a socketpair; this process is the waker. Checked:
 *   - a named pipe gets one byte per wake-up, and only it;
 *   - a wrong inode, a descriptor that is not a pipe (a socket, a regular file, /dev/null),
 *     a number that is not open, pid 0 or a pid that is not there: refused, nothing
 *     written, and a refused name stays refused;
 *   - a pipe of another user (as root: made by a child running as nobody): refused;
 *   - the sleeper gone: the write still succeeds, without SIGPIPE (the waker's descriptor
 *     reads as well);
 *   - more pipes than the table keeps: each still woken (closed and opened again);
 *   - four threads waking 80 pipes at random, so that slots are given to new names while
 *     other threads write: every write said done is a byte in its own pipe, no more;
 *   - who may be woken so, by the peer's uid (-1: a client's view) and ULSOCK_TRUST_UIDS;
 *   - bells with names in /dev/shm (core/bell.h): the same checks by name, no link
 *     followed, the owner the peer's user or a trusted one, another user's bell with its
 *     sleeper gone failing without SIGPIPE, whether the program ignores it or not.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "core/bell.h"
#include "core/config.h"
#include "core/wait.h"
#include "os/libc.h"
#include "transport/shm/wakepipe.h"

#define NPIPES 80 /* more than the table's 64 slots */
#define HAMMERS 4
#define HAMMER_WRITES 5000

struct name {
	uint64_t who, ino;
};

/* A wake-up on a connection whose peer is of this process's user. */
#define WAKE(who, ino) uls_wakepipe_write((who), (ino), (long long)uls_uid())

static int wake(struct name n)
{
	return WAKE(n.who, n.ino);
}

static struct name name_of(int fd)
{
	struct stat st;

	CHECK_INT(fstat(fd, &st), ==, 0);
	return (struct name){(uint64_t)getpid() << 32 | (uint32_t)fd, (uint64_t)st.st_ino};
}

/* How many bytes wait in fd (a pipe), taking them. */
static int take(int fd)
{
	char buf[256];
	int n = 0;
	ssize_t r;

	while ((r = read(fd, buf, sizeof(buf))) > 0)
		n += (int)r;
	return n;
}

static void xsend(int s, const void *p, size_t n)
{
	CHECK_INT(send(s, p, n, 0), ==, (int)n);
}

static void xrecv(int s, void *p, size_t n)
{
	CHECK_INT(recv(s, p, n, MSG_WAITALL), ==, (int)n);
}

/*
 * The sleeper: NPIPES pipes, a socket, a regular file and /dev/null; their names go to
 * the waker, then for each request (an index) it says how many bytes that pipe holds.
 */
static void sleeper(int s)
{
	int rd[NPIPES], wr[NPIPES], sv[2];

	for (int i = 0; i < NPIPES; i++) {
		int p[2];
		CHECK_INT(pipe2(p, O_NONBLOCK), ==, 0);
		rd[i] = p[0];
		wr[i] = p[1];
		struct name n = name_of(rd[i]);
		xsend(s, &n, sizeof(n));
	}
	CHECK_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), ==, 0);
	char tmpl[] = "/tmp/uls-wakepipe-XXXXXX";
	int file = mkstemp(tmpl);
	CHECK_INT(file, >=, 0);
	unlink(tmpl);
	int null = open("/dev/null", O_RDWR);
	CHECK_INT(null, >=, 0);
	struct name others[3] = {name_of(sv[0]), name_of(file), name_of(null)};
	xsend(s, others, sizeof(others));
	for (;;) {
		int i;
		if (recv(s, &i, sizeof(i), MSG_WAITALL) != (ssize_t)sizeof(i) || i < 0)
			break;
		int got = take(rd[i]);
		xsend(s, &got, sizeof(got));
	}
	(void)wr;
	_exit(0);
}

struct hammer {
	const struct name *pipes;
	_Atomic int *done; /* per pipe: writes that said they were done */
	uint64_t seed;
};

static void *hammer(void *arg)
{
	struct hammer *h = arg;
	uint64_t rng = h->seed;

	for (int i = 0; i < HAMMER_WRITES; i++) {
		int k = (int)check_rand_below(&rng, NPIPES);
		if (wake(h->pipes[k]))
			atomic_fetch_add(&h->done[k], 1);
	}
	return NULL;
}

static int bytes_in(int s, int i)
{
	int got;

	xsend(s, &i, sizeof(i));
	xrecv(s, &got, sizeof(got));
	return got;
}

/* A pipe made by a child that runs as nobody: its name, and the child's pid to reap. */
static struct name foreign_pipe(int mine, int s, pid_t *pid)
{
	struct name n;

	*pid = fork();
	CHECK_INT(*pid, >=, 0);
	if (*pid == 0) {
		int p[2];
		if (setgid(65534) < 0 || setuid(65534) < 0 || pipe(p) < 0)
			_exit(1);
		n = name_of(p[0]);
		xsend(s, &n, sizeof(n));
		char c;
		ssize_t r = recv(s, &c, 1, 0);
		(void)r;
		_exit(0);
	}
	xrecv(mine, &n, sizeof(n));
	return n;
}

/* A FIFO by the name of bell idx of this pid (core/bell.h), owned by uid: its read end. */
static int named_fifo(uint32_t idx, uid_t uid, struct name *n)
{
	char path[64];
	struct stat st;

	uls_bell_path(path, sizeof(path), (uint32_t)getpid(), idx);
	unlink(path);
	CHECK_INT(mkfifo(path, 0600), ==, 0);
	CHECK_INT(chown(path, uid, uid), ==, 0);
	int fd = open(path, O_RDONLY | O_NONBLOCK);
	CHECK_INT(fd, >=, 0);
	CHECK_INT(fstat(fd, &st), ==, 0);
	*n = (struct name){(uint64_t)getpid() << 32 | ULS_BELL_NAMED | idx, (uint64_t)st.st_ino};
	return fd;
}

static void unlink_bell(uint32_t idx)
{
	char path[64];

	uls_bell_path(path, sizeof(path), (uint32_t)getpid(), idx);
	unlink(path);
}

/*
 * Bells with names (ULSOCK_TRUST_UIDS set): written when their owner is the peer's user
 * (or, for a client, a trusted one), never through a link or into anything but a FIFO;
 * another user's is opened write-only, and its reader gone, the write fails without
 * SIGPIPE. Trusted: 65534 (set by the caller).
 */
static void named_bells(void)
{
	char path[64], target[64];
	struct name n, o;

	check_context("a named bell of this user");
	int fd = named_fifo(4001, uls_uid(), &n);
	CHECK_EQ(WAKE(n.who, n.ino), 1);
	CHECK_EQ(uls_wakepipe_write(n.who, n.ino, -1), 1);
	CHECK_EQ(take(fd), 2);
	/* A server whose client is another user: not its bell. */
	CHECK_EQ(uls_wakepipe_write(n.who, n.ino, 65534), 0);
	CHECK_EQ(take(fd), 0);

	check_context("names that are not that bell");
	uint64_t pid_named = n.who & ~0xffffffull; /* the pid and ULS_BELL_NAMED */
	CHECK_EQ(WAKE(n.who, n.ino + 1), 0);
	CHECK_EQ(WAKE(pid_named | 4009, n.ino), 0); /* no such name */
	/* A link by a bell's name, to that FIFO: not followed. */
	uls_bell_path(path, sizeof(path), (uint32_t)getpid(), 4002);
	uls_bell_path(target, sizeof(target), (uint32_t)getpid(), 4001);
	unlink(path);
	CHECK_INT(symlink(target, path), ==, 0);
	CHECK_EQ(WAKE(pid_named | 4002, n.ino), 0);
	CHECK_EQ(uls_wakepipe_write(pid_named | 4002, n.ino, -1), 0);
	unlink(path);
	/* A regular file by a bell's name. */
	uls_bell_path(path, sizeof(path), (uint32_t)getpid(), 4003);
	int file = open(path, O_CREAT | O_EXCL | O_RDWR, 0600);
	CHECK_INT(file, >=, 0);
	struct stat st;
	CHECK_INT(fstat(file, &st), ==, 0);
	CHECK_EQ(WAKE(pid_named | 4003, (uint64_t)st.st_ino), 0);
	close(file);
	unlink(path);
	CHECK_EQ(take(fd), 0);

	if (geteuid() != 0) {
		close(fd);
		unlink_bell(4001);
		return;
	}
	check_context("another user's named bell");
	int ofd = named_fifo(4004, 65534, &o);
	CHECK_EQ(uls_wakepipe_write(o.who, o.ino, 65534), 1); /* a server, its client's */
	CHECK_EQ(uls_wakepipe_write(o.who, o.ino, -1), 1);    /* a client, a trusted user */
	CHECK_EQ(WAKE(o.who, o.ino), 0);                      /* a server, a client of ours */
	CHECK_EQ(uls_wakepipe_write(o.who, o.ino, 12345), 0);
	uls_cfg.ntrusted = 0;
	CHECK_EQ(uls_wakepipe_write(o.who, o.ino, -1), 0);    /* a client, nobody trusted */
	uls_cfg.ntrusted = 1;
	CHECK_EQ(take(ofd), 2);

	check_context("another user's named bell, its sleeper gone, SIGPIPE ignored");
	struct sigaction ign = {.sa_handler = SIG_IGN}, dfl = {.sa_handler = SIG_DFL};
	CHECK_EQ(uls_sigpipe_ignored(), 0);
	CHECK_INT(uls_signal_install(SIGPIPE, &ign, NULL, sigaction), ==, 0);
	CHECK_EQ(uls_sigpipe_ignored(), 1);
	struct name g;
	int gfd = named_fifo(4005, 65534, &g);
	CHECK_EQ(uls_wakepipe_write(g.who, g.ino, 65534), 1);
	close(gfd);
	CHECK_EQ(uls_wakepipe_write(g.who, g.ino, 65534), 0); /* EPIPE, nothing raised */
	CHECK_INT(uls_signal_install(SIGPIPE, &dfl, NULL, sigaction), ==, 0);
	CHECK_EQ(uls_sigpipe_ignored(), 0);
	unlink_bell(4005);

	check_context("another user's named bell, its sleeper gone");
	close(ofd);
	/* Write-only: no reader left, EPIPE, and SIGPIPE (default: the end of this test)
	 * held and taken back. */
	CHECK_EQ(uls_wakepipe_write(o.who, o.ino, 65534), 0);
	sigset_t pending;
	CHECK_INT(sigpending(&pending), ==, 0);
	CHECK(!sigismember(&pending, SIGPIPE));
	/* Refused from then on. */
	CHECK_EQ(uls_wakepipe_write(o.who, o.ino, 65534), 0);
	unlink_bell(4004);
	close(fd);
	unlink_bell(4001);
}

int main(void)
{
	int sv[2];
	struct name pipes[NPIPES], others[3];

	uls_libc_init();
	signal(SIGPIPE, SIG_DFL); /* a write that raised it would end the test */
	/* Descriptor 0 writable: a refused name must never be written through a stale 0. */
	int zero[2];
	CHECK_INT(pipe(zero), ==, 0);
	CHECK_INT(dup2(zero[1], 0), ==, 0);
	CHECK_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), ==, 0);
	pid_t child = fork();
	CHECK_INT(child, >=, 0);
	if (child == 0) {
		close(sv[0]);
		sleeper(sv[1]);
	}
	close(sv[1]);
	int s = sv[0];
	for (int i = 0; i < NPIPES; i++)
		xrecv(s, &pipes[i], sizeof(pipes[i]));
	xrecv(s, others, sizeof(others));

	check_context("a named pipe");
	CHECK_EQ(WAKE(pipes[0].who, pipes[0].ino), 1);
	CHECK_EQ(WAKE(pipes[0].who, pipes[0].ino), 1);
	CHECK_EQ(bytes_in(s, 0), 2);
	CHECK_EQ(bytes_in(s, 1), 0);

	check_context("names that are not that pipe");
	CHECK_EQ(WAKE(pipes[1].who, pipes[1].ino + 1), 0);
	CHECK_EQ(WAKE(pipes[1].who, pipes[2].ino), 0);
	CHECK_EQ(WAKE(pipes[1].who, 0), 0);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(WAKE(others[i].who, others[i].ino), 0);
	uint64_t pid_part = pipes[1].who & ~0xffffffffull;
	CHECK_EQ(WAKE(pid_part | 899, pipes[1].ino), 0);
	CHECK_EQ(WAKE((uint32_t)pipes[1].who, pipes[1].ino), 0); /* pid 0 */
	CHECK_EQ(WAKE((uint64_t)4194305 << 32 | (uint32_t)pipes[1].who,
				    pipes[1].ino), 0);
	CHECK_EQ(bytes_in(s, 1), 0);
	CHECK_EQ(bytes_in(s, 2), 0);
	/* Refused once, refused again (not retried within a second). */
	CHECK_EQ(WAKE(pipes[1].who, pipes[1].ino + 1), 0);

	check_context("more pipes than slots, twice round");
	for (int round = 0; round < 2; round++)
		for (int i = 0; i < NPIPES; i++)
			CHECK_EQ(WAKE(pipes[i].who, pipes[i].ino), 1);
	for (int i = 0; i < NPIPES; i++)
		CHECK_EQ(bytes_in(s, i), 2);

	check_context("threads at once");
	static _Atomic int done[NPIPES];
	struct hammer hs[HAMMERS];
	pthread_t ts[HAMMERS];
	for (int t = 0; t < HAMMERS; t++) {
		hs[t] = (struct hammer){pipes, done, 0x77616b65ull + (uint64_t)t};
		CHECK_INT(pthread_create(&ts[t], NULL, hammer, &hs[t]), ==, 0);
	}
	for (int t = 0; t < HAMMERS; t++)
		pthread_join(ts[t], NULL);
	int total = 0;
	for (int i = 0; i < NPIPES; i++) {
		check_context("threads at once, pipe %d", i);
		CHECK_EQ(bytes_in(s, i), atomic_load(&done[i]));
		total += atomic_load(&done[i]);
	}
	CHECK_INT(total, >, 0);

	check_context("another user's pipe");
	if (geteuid() == 0) {
		int fv[2];
		pid_t fpid;
		CHECK_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, fv), ==, 0);
		struct name f = foreign_pipe(fv[0], fv[1], &fpid);
		/* Root can open it; the waker refuses it all the same, even on a connection
		 * with a peer of that user: through /proc only its own user's pipes. */
		CHECK_EQ(WAKE(f.who, f.ino), 0);
		CHECK_EQ(uls_wakepipe_write(f.who, f.ino, 65534), 0);
		xsend(fv[0], "x", 1);
		CHECK_INT(waitpid(fpid, NULL, 0), ==, fpid);
		close(fv[0]);
		close(fv[1]);
	}

	check_context("the sleeper gone");
	/* Its last pipe is in the table: written now, it is kept. */
	CHECK_EQ(WAKE(pipes[NPIPES - 1].who, pipes[NPIPES - 1].ino), 1);
	int stop = -1;
	xsend(s, &stop, sizeof(stop));
	int status;
	CHECK_INT(waitpid(child, &status, 0), ==, child);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* That pipe is still held open here, reading too: no SIGPIPE. */
	CHECK_EQ(WAKE(pipes[NPIPES - 1].who, pipes[NPIPES - 1].ino), 1);
	/* A pipe no longer kept: its process is gone, the name cannot be opened. */
	CHECK_EQ(WAKE(pipes[0].who + 100000, pipes[0].ino), 0);

	check_context("who may be woken through /proc");
	CHECK_EQ(WAKE(pipes[NPIPES - 1].who, pipes[NPIPES - 1].ino), 1);
	/* A server whose client is another (trusted) user's. */
	CHECK_EQ(uls_wakepipe_write(pipes[NPIPES - 1].who, pipes[NPIPES - 1].ino,
				    (long long)uls_uid() + 1), 0);
	/* A client: only while no other user may have attached to its segment. */
	uls_cfg.ntrusted = 0;
	CHECK_EQ(uls_wakepipe_write(pipes[NPIPES - 1].who, pipes[NPIPES - 1].ino, -1), 1);
	uls_cfg.ntrusted = 1;
	uls_cfg.trusted[0] = 65534;
	CHECK_EQ(uls_wakepipe_write(pipes[NPIPES - 1].who, pipes[NPIPES - 1].ino, -1), 0);

	named_bells();
	return CHECK_PASS;
}
