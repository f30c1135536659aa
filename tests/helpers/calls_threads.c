/*
 * calls_threads: the threads of a program under ulsock start and run as without it.
 *
 * A library loaded at start-up puts its thread-local variables in the static TLS block,
 * which glibc carves out of every new thread's stack: pthread_create refuses a stack that
 * cannot hold it (EINVAL). ulsock once had 128 KiB there (two splice buffers), and every
 * thread made with a stack of 128 KiB or less failed to start (Node.js printed
 * "pthread_create: Invalid argument" at start-up). A call of the library must also fit
 * in a small stack. So this program has no thread-local variables of its own, and its I/O
 * uses small buffers on the stack. Usage: calls_threads CASE.
 */
#include "calls_common.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/sendfile.h>

#define SEED_UP 41u
#define SEED_DOWN 42u
#define MOVED (1u << 20)
#define PIECE 2048
#define FILED (256u << 10) /* sent with sendfile after MOVED: the file's bytes */

static void *nothing(void *arg)
{
	return arg;
}

/*
 * Starts fn on a thread with a stack of `stack` bytes and waits for it. The guard below
 * the stack is 256 KiB: a call that overruns the stack by a large frame faults there
 * (SIGSEGV) instead of writing over whatever memory lies beyond a one-page guard.
 */
static void run_on_stack(void *(*fn)(void *), void *arg, size_t stack)
{
	pthread_attr_t a;
	pthread_t t;

	CHECK_EQ(pthread_attr_init(&a), 0);
	CHECK_EQ(pthread_attr_setstacksize(&a, stack), 0);
	CHECK_EQ(pthread_attr_setguardsize(&a, 256u << 10), 0);
	CHECK_EQ(pthread_create(&t, &a, fn, arg), 0);
	CHECK_EQ(pthread_join(t, NULL), 0);
	CHECK_EQ(pthread_attr_destroy(&a), 0);
}

static void send_pat_small(int fd, size_t n, unsigned seed)
{
	unsigned char buf[PIECE];

	for (uint64_t off = 0; off < n; off += sizeof(buf)) {
		size_t k = n - off < sizeof(buf) ? n - off : sizeof(buf);
		calls_pat_fill(buf, off, k, seed);
		calls_write_all(fd, buf, k);
	}
}

static void recv_pat_small(int fd, size_t n, unsigned seed)
{
	unsigned char buf[PIECE];

	for (uint64_t off = 0; off < n; off += sizeof(buf)) {
		size_t k = n - off < sizeof(buf) ? n - off : sizeof(buf);
		calls_read_exact(fd, buf, k);
		CHECK_PAT(buf, off, k, seed);
	}
}

/* A file of the pattern's bytes [MOVED, MOVED + FILED) of seed, read from its start. */
static int pattern_file(unsigned seed)
{
	char path[] = "/tmp/calls_threads.XXXXXX";
	unsigned char *buf = malloc(FILED);
	int fd = mkstemp(path);

	CHECK(fd >= 0 && buf != NULL);
	CHECK_EQ(unlink(path), 0);
	calls_pat_fill(buf, MOVED, FILED, seed);
	calls_write_all(fd, buf, FILED);
	CHECK_EQ(lseek(fd, 0, SEEK_SET), 0);
	free(buf);
	return fd;
}

struct small_end {
	struct calls_pair *p;
	int file; /* the client's pattern_file */
};

/*
 * One end of the connection: the client connects, sends MOVED bytes with write and the
 * file's with sendfile, then reads the answer; the server (accepted already) reads, then
 * answers. Blocking waits on both.
 */
static void *small_io(void *arg)
{
	struct small_end *e = arg;
	struct calls_pair *p = e->p;

	if (p->child == 0) {
		p->fd = calls_connect(&p->server);
		send_pat_small(p->fd, MOVED, SEED_UP);
		for (off_t off = 0; off < (off_t)FILED;)
			CHECK(sendfile(p->fd, e->file, &off, FILED - (size_t)off) > 0);
		recv_pat_small(p->fd, MOVED, SEED_DOWN);
		calls_expect_eof(p->fd);
	} else {
		recv_pat_small(p->fd, MOVED + FILED, SEED_UP);
		send_pat_small(p->fd, MOVED, SEED_DOWN);
		CHECK_EQ(shutdown(p->fd, SHUT_WR), 0);
	}
	return NULL;
}

/*
 * A thread with a 32 KiB stack starts; then both ends of a connection, each on a thread
 * with a 64 KiB stack, move 1 MiB each way through the library's calls (connect, accept
 * in the main thread, blocking reads and writes that wait, shutdown), and the client
 * 256 KiB more with sendfile (ulsock once served it through a 64 KiB array on the stack).
 */
static void case_small_stacks(CALLS_ARGS)
{
	struct calls_pair p;
	struct small_end e = {.p = &p, .file = pattern_file(SEED_UP)};
	int lfd = calls_listen(AF_INET, &p.server, "shm");

	run_on_stack(nothing, NULL, 32u << 10);
	calls_pair_fork(&p, lfd);
	if (p.child != 0) {
		p.fd = calls_accept(lfd);
		close(lfd);
	}
	run_on_stack(small_io, &e, 64u << 10);
	close(e.file);
	calls_pair_close(&p);
}

static const struct calls_case cases[] = {
	{"small_stacks", case_small_stacks},
	{NULL, NULL},
};

int main(int argc, char **argv)
{
	return calls_main(argc, argv, cases);
}
