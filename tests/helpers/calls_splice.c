/*
 * calls_splice: the calls that move a TCP socket's bytes through the kernel's pipes or
 * straight out of a file, on a connection between two processes.
 *
 * splice socket -> pipe -> socket through a relay process between two connections, as TCP
 * proxies do (blocking, and SPLICE_F_NONBLOCK on O_NONBLOCK sockets with EAGAIN handled);
 * splice socket -> pipe and pipe -> socket alone; splice with an offset on the file side;
 * tee and vmsplice on pipes that feed or drain a socket; sendfile file -> socket with and
 * without an offset, with counts short of and past the end of the file and partial counts
 * on a full non-blocking socket; sendfile and copy_file_range with a socket as the source
 * or the destination, which the kernel refuses. Kernel TCP is the oracle: every expected
 * errno here is what Linux 6.x returns. Usage: calls_splice CASE.
 */
#include "calls_common.h"

#include <sys/sendfile.h>
#include <sys/stat.h>

#define SEED_UP 1u   /* client -> server */
#define SEED_DOWN 2u /* server -> client */

/* The longest any one wait for the peer may take before the case fails instead of hanging. */
#define WAIT_MS 10000

/* The default pipe holds 16 pages: every splice into a pipe here asks for at most this. */
#define PIPE_CAP 65536

static uint32_t xr(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

/* A pipe of the default size; O_NONBLOCK on both ends if asked. */
static void open_pipe(int fds[2], int nonblock)
{
	CHECK(pipe2(fds, O_CLOEXEC | (nonblock ? O_NONBLOCK : 0)) == 0);
}

/* A temporary file, already unlinked. */
static int temp_file(void)
{
	char path[] = "/tmp/calls_splice_XXXXXX";
	int fd = mkstemp(path);

	CHECK(fd >= 0);
	CHECK(unlink(path) == 0);
	return fd;
}

/* A temporary file holding bytes [0, size) of pattern `seed`, positioned at 0. */
static int pattern_file(size_t size, unsigned seed)
{
	int fd = temp_file();

	calls_send_pat(fd, 0, size, seed);
	CHECK_EQ(lseek(fd, 0, SEEK_SET), 0);
	return fd;
}

/* Moves exactly n bytes from a pipe into fd (a socket or a file at *off if off is set). */
static void drain_pipe(int pipe_rd, int fd, loff_t *off, size_t n)
{
	while (n > 0) {
		ssize_t m = splice(pipe_rd, NULL, fd, off, n, SPLICE_F_MOVE);
		if (m == -1 && errno == EINTR)
			continue;
		CHECK(m > 0);
		n -= (size_t)m;
	}
}

/* ---- both directions at once over plain calls (the ends of the relay) ------------------------ */

struct pump {
	int fd;
	unsigned seed;
	uint64_t total;
};

/* Sends pattern bytes in writes of random size (1 B to 256 KiB), then SHUT_WR. */
static void *pump_main(void *arg)
{
	static __thread unsigned char buf[256 << 10];
	struct pump *p = arg;
	uint32_t s = 0x2545f491u * (p->seed + 1);
	uint64_t off = 0;

	while (off < p->total) {
		size_t n = 1 + xr(&s) % sizeof(buf);
		if (n > p->total - off)
			n = (size_t)(p->total - off);
		calls_pat_fill(buf, off, n, p->seed);
		calls_write_all(p->fd, buf, n);
		off += n;
	}
	CHECK(shutdown(p->fd, SHUT_WR) == 0);
	return NULL;
}

/* Sends `total` bytes of seed_out while receiving and checking `total` of seed_in, then EOF. */
static void stream_both(int fd, unsigned seed_out, unsigned seed_in, uint64_t total)
{
	struct pump p = {.fd = fd, .seed = seed_out, .total = total};
	pthread_t t;

	CHECK(pthread_create(&t, NULL, pump_main, &p) == 0);
	calls_recv_pat(fd, 0, total, seed_in);
	calls_expect_eof(fd);
	CHECK(pthread_join(t, NULL) == 0);
}

/* ---- the relay ------------------------------------------------------------------------------- */

#define RELAY_TOTAL (4u << 20)

/* One direction of the relay: src -> pipe -> dst. */
struct relay_dir {
	int src, dst;
	int pipe[2];
	size_t inpipe; /* bytes spliced into the pipe and not yet out of it */
	uint64_t moved;
	int eof, shut;
};

/* Blocking: splice until the source's EOF, then pass the EOF on with SHUT_WR. */
static void *relay_blocking_main(void *arg)
{
	struct relay_dir *d = arg;

	for (;;) {
		ssize_t n = splice(d->src, NULL, d->pipe[1], NULL, PIPE_CAP, SPLICE_F_MOVE);
		if (n == -1 && errno == EINTR)
			continue;
		CHECK(n >= 0);
		if (n == 0)
			break;
		drain_pipe(d->pipe[0], d->dst, NULL, (size_t)n);
		d->moved += (uint64_t)n;
	}
	CHECK(shutdown(d->dst, SHUT_WR) == 0);
	return NULL;
}

/*
 * Non-blocking: one step in each direction, as far as the sockets allow. Only as much as
 * the pipe has room for is asked from the source, so EAGAIN there means an empty socket;
 * EAGAIN from pipe -> socket means a full one. Returns the number of EAGAINs.
 */
static int relay_step(struct relay_dir *d)
{
	int again = 0;

	if (!d->eof && d->inpipe < PIPE_CAP) {
		ssize_t n = splice(d->src, NULL, d->pipe[1], NULL, PIPE_CAP - d->inpipe,
				   SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
		if (n > 0) {
			d->inpipe += (size_t)n;
		} else if (n == 0) {
			d->eof = 1;
		} else {
			CHECK(errno == EAGAIN || errno == EINTR);
			again++;
		}
	}
	if (d->inpipe > 0) {
		ssize_t m = splice(d->pipe[0], NULL, d->dst, NULL, d->inpipe,
				   SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
		if (m > 0) {
			d->inpipe -= (size_t)m;
			d->moved += (uint64_t)m;
		} else {
			CHECK(m == -1);
			CHECK(errno == EAGAIN || errno == EINTR);
			again++;
		}
	}
	if (d->eof && d->inpipe == 0 && !d->shut) {
		CHECK(shutdown(d->dst, SHUT_WR) == 0);
		d->shut = 1;
	}
	return again;
}

static void relay_nonblocking(struct relay_dir d[2])
{
	for (;;) {
		struct pollfd pf[4];
		nfds_t n = 0;
		int r;

		for (int i = 0; i < 2; i++)
			relay_step(&d[i]);
		if (d[0].shut && d[1].shut)
			return;
		for (int i = 0; i < 2; i++) {
			if (!d[i].eof && d[i].inpipe < PIPE_CAP)
				pf[n++] = (struct pollfd){.fd = d[i].src, .events = POLLIN};
			if (d[i].inpipe > 0)
				pf[n++] = (struct pollfd){.fd = d[i].dst, .events = POLLOUT};
		}
		do {
			r = poll(pf, n, WAIT_MS);
		} while (r == -1 && errno == EINTR);
		if (r == 0)
			calls_fail(__FILE__, __LINE__, "relay: no progress for 10 s", 0);
		CHECK(r > 0);
	}
}

/*
 * The relay process: a is the connection from the client, b the one to the server. Once
 * it is ready it writes two bytes on `go`, one for each end, which only then start sending.
 */
static void relay_run(int a, int b, int nonblock, int go)
{
	struct relay_dir d[2] = {{.src = a, .dst = b}, {.src = b, .dst = a}};

	for (int i = 0; i < 2; i++)
		open_pipe(d[i].pipe, nonblock);
	if (nonblock) {
		/* SPLICE_F_NONBLOCK only spares the pipe side: a splice from an empty blocking
		 * socket still waits (Linux 6.18), so proxies make the sockets O_NONBLOCK too. */
		calls_set_nonblock(a, 1);
		calls_set_nonblock(b, 1);
		/* Neither end has sent a byte: both sockets refuse at once. */
		CHECK_ERR(splice(a, NULL, d[0].pipe[1], NULL, 4096, SPLICE_F_NONBLOCK), EAGAIN);
		CHECK_ERR(splice(b, NULL, d[1].pipe[1], NULL, 4096, SPLICE_F_NONBLOCK), EAGAIN);
	}
	CHECK_EQ(write(go, "gg", 2), 2);
	if (nonblock) {
		relay_nonblocking(d);
	} else {
		pthread_t t;
		CHECK(pthread_create(&t, NULL, relay_blocking_main, &d[1]) == 0);
		relay_blocking_main(&d[0]);
		CHECK(pthread_join(t, NULL) == 0);
	}
	CHECK_EQ(d[0].moved, RELAY_TOTAL);
	CHECK_EQ(d[1].moved, RELAY_TOTAL);
	close(a);
	close(b);
}

static void await_go(int go)
{
	char c = 0;
	ssize_t r;

	do {
		r = read(go, &c, 1);
	} while (r == -1 && errno == EINTR);
	if (r == 0)
		calls_fail(__FILE__, __LINE__, "the relay exited before it was ready", 0);
	CHECK_EQ(r, 1);
}

/*
 * client -> relay -> server: the relay accepts the client's connection, connects to the
 * server and splices both ways; client and server each send RELAY_TOTAL bytes and check
 * every byte they receive, and each sees the other's EOF through the relay.
 */
static void relay_case(int family, int nonblock)
{
	struct calls_addr srv, rel;
	int go[2];

	calls_require_family(family);
	int lsrv = calls_listen(family, &srv, "shm");
	int lrel = calls_listen(family, &rel, "shm");
	CHECK(pipe2(go, O_CLOEXEC) == 0);
	pid_t relay = fork();
	CHECK(relay >= 0);
	if (relay == 0) {
		calls_child_setup();
		close(lsrv);
		close(go[0]);
		int a = calls_accept(lrel);
		close(lrel);
		int b = calls_connect(&srv);
		relay_run(a, b, nonblock, go[1]);
		_exit(0);
	}
	pid_t client = fork();
	CHECK(client >= 0);
	if (client == 0) {
		calls_child_setup();
		close(lsrv);
		close(lrel);
		close(go[1]);
		int fd = calls_connect(&rel);
		await_go(go[0]);
		stream_both(fd, SEED_UP, SEED_DOWN, RELAY_TOTAL);
		close(fd);
		_exit(0);
	}
	close(lrel);
	close(go[1]);
	int fd = calls_accept(lsrv);
	close(lsrv);
	await_go(go[0]);
	stream_both(fd, SEED_DOWN, SEED_UP, RELAY_TOTAL);
	close(fd);
	calls_wait_child(client);
	calls_wait_child(relay);
	close(go[0]);
}

static void case_relay(CALLS_ARGS)
{
	relay_case(AF_INET, 0);
}

static void case_relay_nonblock(CALLS_ARGS)
{
	relay_case(AF_INET, 1);
}

static void case_relay6(CALLS_ARGS)
{
	relay_case(AF_INET6, 1);
}

/* ---- socket -> pipe and pipe -> socket alone ------------------------------------------------- */

#define ONEWAY_TOTAL ((2u << 20) + 13)

/*
 * Receives `total` bytes of `seed` by splicing socket -> pipe (random sizes) and reading the
 * pipe, then sees splice return 0 at EOF. nonblock: the socket is O_NONBLOCK, splices carry
 * SPLICE_F_NONBLOCK and EAGAIN is waited out with poll.
 */
static void sink_splice(int fd, unsigned seed, uint64_t total, int nonblock)
{
	static unsigned char buf[PIPE_CAP];
	uint32_t s = 0x9e3779b9u + seed;
	uint64_t off = 0;
	int pp[2];

	open_pipe(pp, 0);
	if (nonblock)
		calls_set_nonblock(fd, 1);
	for (;;) {
		size_t want = 1 + xr(&s) % PIPE_CAP;
		ssize_t n = splice(fd, NULL, pp[1], NULL, want, nonblock ? SPLICE_F_NONBLOCK : 0);
		if (n == -1 && nonblock && errno == EAGAIN) {
			CHECK(calls_wait_for(fd, POLLIN, WAIT_MS) & POLLIN);
			continue;
		}
		if (n == -1 && errno == EINTR)
			continue;
		CHECK(n >= 0);
		if (n == 0)
			break;
		CHECK((size_t)n <= want);
		CHECK((uint64_t)n <= total - off);
		calls_read_exact(pp[0], buf, (size_t)n);
		CHECK_PAT(buf, off, (size_t)n, seed);
		off += (uint64_t)n;
	}
	CHECK_EQ(off, total);
	/* EOF stays EOF. */
	CHECK_EQ(splice(fd, NULL, pp[1], NULL, 100, nonblock ? SPLICE_F_NONBLOCK : 0), 0);
	if (nonblock)
		calls_set_nonblock(fd, 0);
	close(pp[0]);
	close(pp[1]);
}

/*
 * Sends `total` bytes of `seed` by writing them into a pipe (random sizes) and splicing the
 * pipe into the socket, then SHUT_WR.
 */
static void source_splice(int fd, unsigned seed, uint64_t total)
{
	static unsigned char buf[PIPE_CAP];
	uint32_t s = 0x85ebca6bu + seed;
	uint64_t off = 0;
	int pp[2];

	open_pipe(pp, 0);
	while (off < total) {
		size_t n = 1 + xr(&s) % 32768;
		if (n > total - off)
			n = (size_t)(total - off);
		calls_pat_fill(buf, off, n, seed);
		calls_write_all(pp[1], buf, n);
		drain_pipe(pp[0], fd, NULL, n);
		off += n;
	}
	CHECK(shutdown(fd, SHUT_WR) == 0);
	close(pp[0]);
	close(pp[1]);
}

/*
 * splice socket -> pipe: an offset on the socket side is refused (EINVAL), a non-blocking
 * splice from an empty socket is EAGAIN; then each side receives the other's stream through
 * a pipe, blocking one way and non-blocking the other, and splice reports EOF as 0.
 */
static void case_socket_to_pipe(CALLS_ARGS)
{
	struct calls_pair p;
	int pp[2];
	loff_t off = 0;

	calls_pair_open(&p, AF_INET);
	open_pipe(pp, 0);
	CHECK_ERR(splice(p.fd, &off, pp[1], NULL, 100, 0), EINVAL);
	calls_set_nonblock(p.fd, 1);
	CHECK_ERR(splice(p.fd, NULL, pp[1], NULL, 100, SPLICE_F_NONBLOCK), EAGAIN);
	calls_set_nonblock(p.fd, 0);
	close(pp[0]);
	close(pp[1]);
	if (p.child == 0) {
		calls_post(&p, 'r');
		sink_splice(p.fd, SEED_DOWN, ONEWAY_TOTAL, 0);
		calls_send_pat(p.fd, 0, ONEWAY_TOTAL, SEED_UP);
		CHECK(shutdown(p.fd, SHUT_WR) == 0);
		calls_pair_close(&p);
	}
	calls_await(&p);
	calls_send_pat(p.fd, 0, ONEWAY_TOTAL, SEED_DOWN);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	sink_splice(p.fd, SEED_UP, ONEWAY_TOTAL, 1);
	calls_pair_close(&p);
}

/* splice pipe -> socket: an offset on the socket side is refused; streams both ways. */
static void case_pipe_to_socket(CALLS_ARGS)
{
	struct calls_pair p;
	int pp[2];
	loff_t off = 0;

	calls_pair_open(&p, AF_INET);
	open_pipe(pp, 0);
	CHECK_EQ(write(pp[1], "abc", 3), 3);
	CHECK_ERR(splice(pp[0], NULL, p.fd, &off, 3, 0), EINVAL);
	close(pp[0]);
	close(pp[1]);
	if (p.child == 0) {
		source_splice(p.fd, SEED_UP, ONEWAY_TOTAL);
		calls_recv_pat(p.fd, 0, ONEWAY_TOTAL, SEED_DOWN);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	calls_recv_pat(p.fd, 0, ONEWAY_TOTAL, SEED_UP);
	calls_expect_eof(p.fd);
	source_splice(p.fd, SEED_DOWN, ONEWAY_TOTAL);
	calls_pair_close(&p);
}

/* ---- a file on the other side of the pipe ---------------------------------------------------- */

#define FILE_SIZE ((1u << 20) + 77)

/*
 * file -> pipe -> socket with an offset pointer (it advances, the file position does not),
 * then without one (the file position advances); socket -> pipe -> file with an offset
 * pointer 4 KiB into the file, read back with pread.
 */
static void case_file_offset(CALLS_ARGS)
{
	static unsigned char buf[65536];
	struct calls_pair p;
	int pp[2];

	calls_pair_open(&p, AF_INET);
	open_pipe(pp, 0);
	if (p.child == 0) {
		calls_recv_pat(p.fd, 0, FILE_SIZE, SEED_DOWN);
		calls_recv_pat(p.fd, 1000, 5000, SEED_DOWN);
		calls_expect_eof(p.fd);
		calls_send_pat(p.fd, 0, FILE_SIZE, SEED_UP);
		CHECK(shutdown(p.fd, SHUT_WR) == 0);
		calls_pair_close(&p);
	}
	/* Down: the file is the source. */
	int f = pattern_file(FILE_SIZE, SEED_DOWN);
	uint32_t s = 77;
	loff_t off = 0;
	while ((size_t)off < FILE_SIZE) {
		loff_t before = off;
		ssize_t n = splice(f, &off, pp[1], NULL, 1 + xr(&s) % PIPE_CAP, 0);
		CHECK(n > 0);
		CHECK_EQ(off, before + n);
		drain_pipe(pp[0], p.fd, NULL, (size_t)n);
	}
	CHECK_EQ(off, FILE_SIZE);
	CHECK_EQ(splice(f, &off, pp[1], NULL, 100, 0), 0);
	CHECK_EQ(lseek(f, 0, SEEK_CUR), 0);
	CHECK_EQ(lseek(f, 1000, SEEK_SET), 1000);
	size_t left = 5000;
	while (left > 0) {
		ssize_t n = splice(f, NULL, pp[1], NULL, left, 0);
		CHECK(n > 0);
		drain_pipe(pp[0], p.fd, NULL, (size_t)n);
		left -= (size_t)n;
	}
	CHECK_EQ(lseek(f, 0, SEEK_CUR), 6000);
	close(f);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);

	/* Up: the file is the destination, written from 4096 on. */
	int g = temp_file();
	loff_t woff = 4096;
	for (;;) {
		ssize_t n = splice(p.fd, NULL, pp[1], NULL, PIPE_CAP, 0);
		if (n == -1 && errno == EINTR)
			continue;
		CHECK(n >= 0);
		if (n == 0)
			break;
		loff_t before = woff;
		drain_pipe(pp[0], g, &woff, (size_t)n);
		CHECK_EQ(woff, before + n);
	}
	CHECK_EQ(woff, 4096 + FILE_SIZE);
	CHECK_EQ(lseek(g, 0, SEEK_CUR), 0);
	struct stat st;
	CHECK(fstat(g, &st) == 0);
	CHECK_EQ(st.st_size, 4096 + FILE_SIZE);
	CHECK_EQ(pread(g, buf, 4096, 0), 4096);
	for (int i = 0; i < 4096; i++)
		CHECK_EQ(buf[i], 0);
	for (uint64_t at = 0; at < FILE_SIZE;) {
		size_t k = FILE_SIZE - at < sizeof(buf) ? FILE_SIZE - at : sizeof(buf);
		CHECK_EQ(pread(g, buf, k, (off_t)(4096 + at)), k);
		CHECK_PAT(buf, at, k, SEED_UP);
		at += k;
	}
	close(g);
	close(pp[0]);
	close(pp[1]);
	calls_pair_close(&p);
}

/* ---- tee and vmsplice ------------------------------------------------------------------------ */

#define TEE_TOTAL (1u << 20)

/* The size of piece i of a tee stream: both sides draw the same sequence. */
static size_t tee_piece(uint32_t *s, uint64_t off)
{
	/* At most 32 KiB, so that the piece fits an empty 16-page pipe however it is aligned. */
	size_t n = 1 + xr(s) % 32768;

	return n > TEE_TOTAL - off ? (size_t)(TEE_TOTAL - off) : n;
}

/*
 * The sender: each piece of user memory goes into pipe 1 by vmsplice, is duplicated into
 * pipe 2 by tee, and both pipes are spliced into the socket: every piece arrives twice.
 */
static void tee_send(int fd, unsigned seed)
{
	unsigned char *mem = malloc(TEE_TOTAL);
	uint32_t s = 4242;
	uint64_t off = 0;
	int p1[2], p2[2];

	CHECK(mem != NULL);
	/* vmsplice lends these pages to the pipe and the socket: never written again. */
	calls_pat_fill(mem, 0, TEE_TOTAL, seed);
	open_pipe(p1, 0);
	open_pipe(p2, 0);
	while (off < TEE_TOTAL) {
		size_t n = tee_piece(&s, off);
		struct iovec iov = {mem + off, n};
		CHECK_EQ(vmsplice(p1[1], &iov, 1, 0), n);
		CHECK_EQ(tee(p1[0], p2[1], n, 0), n);
		drain_pipe(p1[0], fd, NULL, n);
		drain_pipe(p2[0], fd, NULL, n);
		off += n;
	}
	CHECK(shutdown(fd, SHUT_WR) == 0);
	close(p1[0]);
	close(p1[1]);
	close(p2[0]);
	close(p2[1]);
	free(mem);
}

/* Receives the doubled stream of tee_send with plain reads. */
static void tee_recv_doubled(int fd, unsigned seed)
{
	uint32_t s = 4242;
	uint64_t off = 0;

	while (off < TEE_TOTAL) {
		size_t n = tee_piece(&s, off);
		calls_recv_pat(fd, off, n, seed);
		calls_recv_pat(fd, off, n, seed);
		off += n;
	}
	calls_expect_eof(fd);
}

/*
 * The receiver: socket -> pipe 1 by splice, duplicated into pipe 2 by tee, pipe 1 read into
 * user memory by vmsplice and pipe 2 by read: both copies must be the stream.
 */
static void tee_recv_spliced(int fd, unsigned seed)
{
	static unsigned char a[PIPE_CAP], b[PIPE_CAP];
	uint64_t off = 0;
	int p1[2], p2[2];

	open_pipe(p1, 0);
	open_pipe(p2, 0);
	for (;;) {
		ssize_t n = splice(fd, NULL, p1[1], NULL, PIPE_CAP, 0);
		if (n == -1 && errno == EINTR)
			continue;
		CHECK(n >= 0);
		if (n == 0)
			break;
		CHECK_EQ(tee(p1[0], p2[1], (size_t)n, 0), n);
		size_t got = 0;
		while (got < (size_t)n) {
			struct iovec iov = {a + got, (size_t)n - got};
			ssize_t k = vmsplice(p1[0], &iov, 1, 0);
			CHECK(k > 0);
			got += (size_t)k;
		}
		calls_read_exact(p2[0], b, (size_t)n);
		CHECK_PAT(a, off, (size_t)n, seed);
		CHECK_PAT(b, off, (size_t)n, seed);
		off += (uint64_t)n;
	}
	CHECK_EQ(off, TEE_TOTAL);
	close(p1[0]);
	close(p1[1]);
	close(p2[0]);
	close(p2[1]);
}

static void case_tee_vmsplice(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		tee_send(p.fd, SEED_UP);
		tee_recv_spliced(p.fd, SEED_DOWN);
		calls_pair_close(&p);
	}
	tee_recv_doubled(p.fd, SEED_UP);
	calls_send_pat(p.fd, 0, TEE_TOTAL, SEED_DOWN);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

/* ---- sendfile -------------------------------------------------------------------------------- */

/*
 * sendfile from a file of FILE_SIZE bytes: with an offset pointer, counts of 1, 4095 and
 * 100000 bytes return exactly that on a blocking socket, a count past the end returns what is
 * left, and at the end 0; the file position stays 0. Without the pointer, from position 500,
 * 7000 bytes, and the position moves to 7500. A count of 0 sends nothing.
 */
static void sendfile_counts(int fd, unsigned seed)
{
	int f = pattern_file(FILE_SIZE, seed);
	size_t counts[] = {1, 4095, 100000};
	off_t off = 0;

	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		off_t before = off;
		CHECK_EQ(sendfile(fd, f, &off, counts[i]), counts[i]);
		CHECK_EQ(off, before + (off_t)counts[i]);
	}
	off_t rest = FILE_SIZE - off;
	CHECK_EQ(sendfile(fd, f, &off, FILE_SIZE), rest);
	CHECK_EQ(off, FILE_SIZE);
	CHECK_EQ(sendfile(fd, f, &off, 100), 0);
	CHECK_EQ(off, FILE_SIZE);
	CHECK_EQ(lseek(f, 0, SEEK_CUR), 0);
	CHECK_EQ(lseek(f, 500, SEEK_SET), 500);
	CHECK_EQ(sendfile(fd, f, NULL, 7000), 7000);
	CHECK_EQ(lseek(f, 0, SEEK_CUR), 7500);
	CHECK_EQ(sendfile(fd, f, NULL, 0), 0);
	CHECK_EQ(lseek(f, 0, SEEK_CUR), 7500);
	close(f);
	CHECK(shutdown(fd, SHUT_WR) == 0);
}

static void sendfile_counts_recv(int fd, unsigned seed)
{
	calls_recv_pat(fd, 0, FILE_SIZE, seed);
	calls_recv_pat(fd, 500, 7000, seed);
	calls_expect_eof(fd);
}

static void case_sendfile_counts(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		sendfile_counts_recv(p.fd, SEED_DOWN);
		sendfile_counts(p.fd, SEED_UP);
		calls_pair_close(&p);
	}
	sendfile_counts(p.fd, SEED_DOWN);
	sendfile_counts_recv(p.fd, SEED_UP);
	calls_pair_close(&p);
}

/*
 * A file larger than the socket can hold while its peer does not read: at least 16 MiB,
 * and more where tcp_wmem allows a larger send buffer than this VM's 4 MiB.
 */
static size_t big_file_size(void)
{
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_wmem", "r");
	unsigned long lo, def, max = 0;
	size_t size = 16u << 20;

	if (f) {
		if (fscanf(f, "%lu %lu %lu", &lo, &def, &max) != 3)
			max = 0;
		fclose(f);
	}
	if (max > (120ul << 20))
		calls_skip("tcp_wmem allows a send buffer over 120 MiB");
	if (2 * max + (8u << 20) > size)
		size = 2 * max + (8u << 20);
	return size;
}

/*
 * sendfile into a non-blocking socket whose peer does not read: the first call returns a
 * partial count (more than 0, less than asked) and moves the offset by exactly that; once
 * the socket is full the next one fails with EAGAIN. When the peer reads, the rest follows
 * with poll and more partial calls, and every byte arrives.
 */
static void case_sendfile_partial(CALLS_ARGS)
{
	const size_t big = big_file_size();
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_recv_pat(p.fd, 0, big, SEED_DOWN);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	int f = pattern_file(big, SEED_DOWN);
	off_t off = 0;
	calls_set_nonblock(p.fd, 1);
	ssize_t r = sendfile(p.fd, f, &off, big);
	CHECK(r > 0 && (size_t)r < big);
	CHECK_EQ(off, r);
	char note[80];
	snprintf(note, sizeof(note), "the first sendfile took %zd of %zu bytes", r, big);
	calls_note(note);
	int refused = 0;
	for (int i = 0; i < 100 && !refused; i++) {
		off_t before = off;
		r = sendfile(p.fd, f, &off, big - (size_t)off);
		if (r == -1) {
			CHECK_EQ(errno, EAGAIN);
			CHECK_EQ(off, before);
			refused = 1;
		} else {
			/* Room freed late on a loaded machine. */
			CHECK(r > 0);
			CHECK_EQ(off, before + r);
			calls_sleep_ms(20);
		}
	}
	CHECK(refused);
	calls_post(&p, 'r');
	while ((size_t)off < big) {
		off_t before = off;
		r = sendfile(p.fd, f, &off, big - (size_t)off);
		if (r == -1) {
			CHECK_EQ(errno, EAGAIN);
			CHECK(calls_wait_for(p.fd, POLLOUT, WAIT_MS) & POLLOUT);
			continue;
		}
		CHECK(r > 0);
		CHECK_EQ(off, before + r);
	}
	CHECK_EQ(lseek(f, 0, SEEK_CUR), 0);
	close(f);
	calls_set_nonblock(p.fd, 0);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

/*
 * A socket as the source of sendfile or either side of copy_file_range: this kernel refuses
 * them all (sendfile from a socket: EINVAL, ESPIPE with an offset pointer; copy_file_range:
 * EINVAL) and the refused calls consume nothing: the bytes are all still there to read.
 */
static void socket_source_checks(int fd, unsigned seed, size_t n)
{
	char fbuf[] = "0123456789";
	int f = temp_file();
	int other[2];
	off_t off = 0;
	loff_t loff = 0;

	CHECK_EQ(write(f, fbuf, 10), 10);
	CHECK_EQ(calls_wait_fionread(fd, (int)n, WAIT_MS), n);
	CHECK_ERR(sendfile(f, fd, NULL, n), EINVAL);
	CHECK_ERR(sendfile(f, fd, &off, n), ESPIPE);
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, other) == 0);
	CHECK_ERR(sendfile(other[0], fd, NULL, n), EINVAL);
	/* Into a socket of ulsock's own (itself): the input must not be read as a file. */
	CHECK_ERR(sendfile(fd, fd, NULL, n), EINVAL);
	CHECK_ERR(sendfile(fd, fd, &off, n), ESPIPE);
	/* Nor a pipe or another socket: nothing of theirs is taken. */
	int pp[2];
	CHECK(pipe(pp) == 0);
	CHECK_EQ(write(pp[1], "pipe", 4), 4);
	CHECK_EQ(write(other[1], "unix", 4), 4);
	CHECK_ERR(sendfile(fd, pp[0], NULL, 4), EINVAL);
	CHECK_ERR(sendfile(fd, pp[0], &off, 4), ESPIPE);
	CHECK_ERR(sendfile(fd, other[0], NULL, 4), EINVAL);
	CHECK_ERR(sendfile(fd, other[0], &off, 4), ESPIPE);
	CHECK_EQ(calls_fionread(pp[0]), 4);
	CHECK_EQ(calls_fionread(other[0]), 4);
	close(pp[0]);
	close(pp[1]);
	CHECK_ERR(copy_file_range(fd, NULL, f, NULL, n, 0), EINVAL);
	CHECK_ERR(copy_file_range(f, &loff, fd, NULL, 10, 0), EINVAL);
	CHECK_ERR(copy_file_range(f, NULL, fd, NULL, 10, 0), EINVAL);
	CHECK_EQ(calls_fionread(fd), n);
	calls_recv_pat(fd, 0, n, seed);
	close(other[0]);
	close(other[1]);
	close(f);
}

static void case_socket_source(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		socket_source_checks(p.fd, SEED_DOWN, 1000);
		calls_send_pat(p.fd, 0, 30000, SEED_UP);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	calls_send_pat(p.fd, 0, 1000, SEED_DOWN);
	socket_source_checks(p.fd, SEED_UP, 30000);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

static const struct calls_case cases[] = {
	{"relay", case_relay},
	{"relay_nonblock", case_relay_nonblock},
	{"relay6", case_relay6},
	{"socket_to_pipe", case_socket_to_pipe},
	{"pipe_to_socket", case_pipe_to_socket},
	{"file_offset", case_file_offset},
	{"tee_vmsplice", case_tee_vmsplice},
	{"sendfile_counts", case_sendfile_counts},
	{"sendfile_partial", case_sendfile_partial},
	{"socket_source", case_socket_source},
	{NULL, NULL},
};

int main(int argc, char **argv)
{
	return calls_main(argc, argv, cases);
}
