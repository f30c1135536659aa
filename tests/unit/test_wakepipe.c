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
 *   - who may be woken so: uls_wakepipe_allowed for the peer's uid.
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
#include "core/config.h"
#include "os/libc.h"
#include "transport/shm/wakepipe.h"

#define NPIPES 80 /* more than the table's 64 slots */
#define HAMMERS 4
#define HAMMER_WRITES 5000

struct name {
	uint64_t who, ino;
};

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
		if (uls_wakepipe_write(h->pipes[k].who, h->pipes[k].ino))
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
	CHECK_EQ(uls_wakepipe_write(pipes[0].who, pipes[0].ino), 1);
	CHECK_EQ(uls_wakepipe_write(pipes[0].who, pipes[0].ino), 1);
	CHECK_EQ(bytes_in(s, 0), 2);
	CHECK_EQ(bytes_in(s, 1), 0);

	check_context("names that are not that pipe");
	CHECK_EQ(uls_wakepipe_write(pipes[1].who, pipes[1].ino + 1), 0);
	CHECK_EQ(uls_wakepipe_write(pipes[1].who, pipes[2].ino), 0);
	CHECK_EQ(uls_wakepipe_write(pipes[1].who, 0), 0);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(uls_wakepipe_write(others[i].who, others[i].ino), 0);
	uint64_t pid_part = pipes[1].who & ~0xffffffffull;
	CHECK_EQ(uls_wakepipe_write(pid_part | 899, pipes[1].ino), 0);
	CHECK_EQ(uls_wakepipe_write((uint32_t)pipes[1].who, pipes[1].ino), 0); /* pid 0 */
	CHECK_EQ(uls_wakepipe_write((uint64_t)4194305 << 32 | (uint32_t)pipes[1].who,
				    pipes[1].ino), 0);
	CHECK_EQ(bytes_in(s, 1), 0);
	CHECK_EQ(bytes_in(s, 2), 0);
	/* Refused once, refused again (not retried within a second). */
	CHECK_EQ(uls_wakepipe_write(pipes[1].who, pipes[1].ino + 1), 0);

	check_context("more pipes than slots, twice round");
	for (int round = 0; round < 2; round++)
		for (int i = 0; i < NPIPES; i++)
			CHECK_EQ(uls_wakepipe_write(pipes[i].who, pipes[i].ino), 1);
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
		/* Root can open it; the waker refuses it all the same. */
		CHECK_EQ(uls_wakepipe_write(f.who, f.ino), 0);
		xsend(fv[0], "x", 1);
		CHECK_INT(waitpid(fpid, NULL, 0), ==, fpid);
		close(fv[0]);
		close(fv[1]);
	}

	check_context("the sleeper gone");
	/* Its last pipe is in the table: written now, it is kept. */
	CHECK_EQ(uls_wakepipe_write(pipes[NPIPES - 1].who, pipes[NPIPES - 1].ino), 1);
	int stop = -1;
	xsend(s, &stop, sizeof(stop));
	int status;
	CHECK_INT(waitpid(child, &status, 0), ==, child);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* That pipe is still held open here, reading too: no SIGPIPE. */
	CHECK_EQ(uls_wakepipe_write(pipes[NPIPES - 1].who, pipes[NPIPES - 1].ino), 1);
	/* A pipe no longer kept: its process is gone, the name cannot be opened. */
	CHECK_EQ(uls_wakepipe_write(pipes[0].who + 100000, pipes[0].ino), 0);

	check_context("who may be woken");
	CHECK_EQ(uls_wakepipe_allowed((long long)uls_uid()), 1);
	CHECK_EQ(uls_wakepipe_allowed((long long)uls_uid() + 1), 0);
	CHECK_EQ(uls_wakepipe_allowed(-1), uls_cfg.ntrusted == 0);
	uls_cfg.ntrusted = 1;
	CHECK_EQ(uls_wakepipe_allowed(-1), 0);
	return CHECK_PASS;
}
