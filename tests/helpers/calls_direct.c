/*
 * calls_direct: the ways a program moves or waits for a TCP socket's bytes without the
 * ordinary libc socket calls, between two processes.
 *
 * syscall(2) with the socket call numbers (read/write, sendto/recvfrom, readv/writev,
 * sendmsg/recvmsg, poll/ppoll/select/epoll, shutdown, close); preadv2/pwritev2 with offset
 * -1, which act as readv/writev on a socket, and the positioned calls, which fail with
 * ESPIPE (EINVAL for a negative offset); io_uring set up with raw system calls (no liburing)
 * moving bytes with IORING_OP_SEND/RECV/READ/WRITE, on a connection made before the ring
 * and on one made after it; POSIX AIO (aio_read/aio_write, lio_listio, aio_suspend,
 * aio_error, aio_return). Every byte is checked. Usage: calls_direct CASE.
 */
#include "calls_common.h"

#include <aio.h>
#include <linux/io_uring.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/syscall.h>

#define SEED_UP 1u   /* client -> server */
#define SEED_DOWN 2u /* server -> client */

#define WAIT_MS 10000

static uint32_t xr(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

/* ---- syscall(2): data ------------------------------------------------------------------------ */

#define SYS_TOTAL ((2u << 20) + 5)

/* Sends all of buf[0, n) with one blocking system call, chosen by `which`. */
static void sys_send(int fd, unsigned char *buf, size_t n, unsigned which)
{
	size_t cut = n / 3;
	struct iovec iov[2] = {{buf, cut}, {buf + cut, n - cut}};
	struct msghdr m;
	long r;

	memset(&m, 0, sizeof(m));
	switch (which % 4) {
	case 0:
		r = syscall(SYS_write, fd, buf, n);
		break;
	case 1:
		r = syscall(SYS_sendto, fd, buf, n, 0, NULL, 0);
		break;
	case 2:
		r = syscall(SYS_writev, fd, iov, 2);
		break;
	default:
		m.msg_iov = iov;
		m.msg_iovlen = 2;
		r = syscall(SYS_sendmsg, fd, &m, 0);
		break;
	}
	CHECK_EQ(r, n);
}

/* Receives 1..n bytes with one system call chosen by `which`; returns the count (0 at EOF). */
static size_t sys_recv(int fd, unsigned char *buf, size_t n, unsigned which)
{
	size_t cut = n / 2;
	struct iovec iov[2] = {{buf, cut}, {buf + cut, n - cut}};
	struct sockaddr_storage from;
	socklen_t fromlen = sizeof(from);
	struct msghdr m;
	long r;

	memset(&m, 0, sizeof(m));
	switch (which % 4) {
	case 0:
		r = syscall(SYS_read, fd, buf, n);
		break;
	case 1:
		r = syscall(SYS_recvfrom, fd, buf, n, 0, &from, &fromlen);
		if (r >= 0)
			CHECK_EQ(fromlen, 0);
		break;
	case 2:
		r = syscall(SYS_readv, fd, iov, 2);
		break;
	default:
		m.msg_iov = iov;
		m.msg_iovlen = 2;
		r = syscall(SYS_recvmsg, fd, &m, 0);
		if (r >= 0)
			CHECK_EQ(m.msg_flags, 0);
		break;
	}
	CHECK(r >= 0);
	CHECK((size_t)r <= n);
	return (size_t)r;
}

static void sys_send_stream(int fd, unsigned seed)
{
	static unsigned char buf[200000];
	uint32_t s = 3 + seed;
	uint64_t off = 0;
	unsigned which = 0;

	while (off < SYS_TOTAL) {
		size_t n = 1 + xr(&s) % sizeof(buf);
		if (n > SYS_TOTAL - off)
			n = (size_t)(SYS_TOTAL - off);
		calls_pat_fill(buf, off, n, seed);
		sys_send(fd, buf, n, which++);
		off += n;
	}
	CHECK_EQ(syscall(SYS_shutdown, fd, SHUT_WR), 0);
}

static void sys_recv_stream(int fd, unsigned seed)
{
	static unsigned char buf[100000];
	uint32_t s = 5 + seed;
	uint64_t off = 0;
	unsigned which = 0;

	while (off < SYS_TOTAL) {
		size_t n = sys_recv(fd, buf, 1 + xr(&s) % sizeof(buf), which++);
		if (n == 0)
			calls_fail(__FILE__, __LINE__, "early EOF", 0);
		CHECK(n <= SYS_TOTAL - off);
		CHECK_PAT(buf, off, n, seed);
		off += n;
	}
	for (unsigned i = 0; i < 4; i++)
		CHECK_EQ(sys_recv(fd, buf, 10, i), 0);
}

/* 2 MiB each way through raw write/sendto/writev/sendmsg and read/recvfrom/readv/recvmsg. */
static void case_syscall_io(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		sys_send_stream(p.fd, SEED_UP);
		sys_recv_stream(p.fd, SEED_DOWN);
		calls_pair_close(&p);
	}
	sys_recv_stream(p.fd, SEED_UP);
	sys_send_stream(p.fd, SEED_DOWN);
	calls_pair_close(&p);
}

/* ---- syscall(2): readiness ------------------------------------------------------------------- */

/* One raw readiness wait for POLLIN on fd, by method `how`; returns whether fd is readable. */
static int sys_readable(int fd, int how, int ms)
{
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0x1234};
	fd_set rd;
	long r, ep;

	switch (how) {
	case 0:
		r = syscall(SYS_poll, &pf, 1, ms);
		CHECK(r == 0 || r == 1);
		CHECK(r == 0 || pf.revents == POLLIN);
		return r == 1;
	case 1:
		r = syscall(SYS_ppoll, &pf, 1, &ts, NULL, 8);
		CHECK(r == 0 || r == 1);
		CHECK(r == 0 || pf.revents == POLLIN);
		return r == 1;
	case 2:
		FD_ZERO(&rd);
		FD_SET(fd, &rd);
		r = syscall(SYS_select, fd + 1, &rd, NULL, NULL, &tv);
		CHECK(r == 0 || r == 1);
		CHECK_EQ(FD_ISSET(fd, &rd) != 0, r);
		return r == 1;
	default:
		ep = syscall(SYS_epoll_create1, EPOLL_CLOEXEC);
		CHECK(ep >= 0);
		CHECK_EQ(syscall(SYS_epoll_ctl, ep, EPOLL_CTL_ADD, fd, &ev), 0);
		memset(&ev, 0, sizeof(ev));
		if (how == 3)
			r = syscall(SYS_epoll_wait, ep, &ev, 1, ms);
		else
			r = syscall(SYS_epoll_pwait, ep, &ev, 1, ms, NULL, 8);
		CHECK(r == 0 || r == 1);
		CHECK(r == 0 || (ev.events == EPOLLIN && ev.data.u64 == 0x1234));
		CHECK_EQ(syscall(SYS_close, ep), 0);
		return r == 1;
	}
}

#define WAIT_METHODS 5

/*
 * The waiting side: for each method, the socket is not readable (no wait), then the peer
 * sends one byte on request and the method reports it within 10 s; it is read with a raw
 * read. A raw poll for POLLOUT reports a writable socket at once.
 */
static void sys_wait_side(struct calls_pair *p, unsigned seed)
{
	struct pollfd pf = {.fd = p->fd, .events = POLLOUT};
	unsigned char c;

	CHECK_EQ(syscall(SYS_poll, &pf, 1, 0), 1);
	CHECK_EQ(pf.revents, POLLOUT);
	for (int how = 0; how < WAIT_METHODS; how++) {
		CHECK(!sys_readable(p->fd, how, 0));
		calls_post(p, (char)('a' + how));
		if (!sys_readable(p->fd, how, WAIT_MS))
			calls_fail(__FILE__, __LINE__, "raw wait: no POLLIN within 10 s", 0);
		CHECK_EQ(syscall(SYS_read, p->fd, &c, 1), 1);
		CHECK_EQ(c, calls_pat((uint64_t)how, seed));
	}
	calls_post(p, '.');
}

static void sys_wait_peer(struct calls_pair *p, unsigned seed)
{
	for (uint64_t i = 0;; i++) {
		char c = calls_await(p);
		if (c == '.')
			return;
		CHECK_EQ(c, 'a' + (char)i);
		calls_send_pat(p->fd, i, 1, seed);
	}
}

static void case_syscall_wait(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		sys_wait_peer(&p, SEED_DOWN);
		sys_wait_side(&p, SEED_UP);
		calls_pair_close(&p);
	}
	sys_wait_side(&p, SEED_DOWN);
	sys_wait_peer(&p, SEED_UP);
	calls_pair_close(&p);
}

/*
 * Raw shutdown and close: the parent sends with a raw write and ends its direction with a
 * raw shutdown(SHUT_WR): the child reads it all, then EOF, and can still send; the child
 * ends with a raw close and stays alive: the parent reads the rest, then EOF.
 */
static void case_syscall_close(CALLS_ARGS)
{
	static unsigned char buf[100000];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_recv_pat(p.fd, 0, sizeof(buf), SEED_DOWN);
		calls_expect_eof(p.fd);
		calls_send_pat(p.fd, 0, sizeof(buf), SEED_UP);
		CHECK_EQ(syscall(SYS_close, p.fd), 0);
		p.fd = -1;
		/* Alive until the parent has seen the EOF the raw close made. */
		CHECK_EQ(calls_await(&p), 'x');
		calls_pair_close(&p);
	}
	calls_pat_fill(buf, 0, sizeof(buf), SEED_DOWN);
	CHECK_EQ(syscall(SYS_write, p.fd, buf, sizeof(buf)), sizeof(buf));
	CHECK_EQ(syscall(SYS_shutdown, p.fd, SHUT_WR), 0);
	calls_recv_pat(p.fd, 0, sizeof(buf), SEED_UP);
	calls_expect_eof(p.fd);
	calls_post(&p, 'x');
	calls_pair_close(&p);
}

/* ---- preadv2 / pwritev2 and the positioned calls --------------------------------------------- */

#define V2_TOTAL ((1u << 20) + 9)

/* Sends with pwritev2(offset -1), three segments, flags 0 or RWF_APPEND (ignored here). */
static void v2_send(int fd, unsigned seed)
{
	static unsigned char buf[3][20000];
	uint32_t s = 17 + seed;
	uint64_t off = 0;

	for (unsigned i = 0; off < V2_TOTAL; i++) {
		struct iovec iov[3];
		size_t n = 0;
		for (int k = 0; k < 3; k++) {
			size_t len = xr(&s) % sizeof(buf[k]);
			if (len > V2_TOTAL - off - n)
				len = (size_t)(V2_TOTAL - off - n);
			calls_pat_fill(buf[k], off + n, len, seed);
			iov[k] = (struct iovec){buf[k], len};
			n += len;
		}
		ssize_t r = (i % 2) ? pwritev64v2(fd, iov, 3, -1, RWF_APPEND)
				    : pwritev2(fd, iov, 3, -1, 0);
		CHECK_EQ(r, n);
		off += n;
	}
	CHECK(shutdown(fd, SHUT_WR) == 0);
}

/* Receives with preadv2(offset -1) into two segments; 0 at EOF. */
static void v2_recv(struct calls_pair *p, unsigned seed)
{
	static unsigned char a[3000], b[70000];
	uint64_t off = 0;
	struct iovec iov[2] = {{a, sizeof(a)}, {b, sizeof(b)}};

	/* Nothing sent yet: RWF_NOWAIT refuses instead of waiting. */
	CHECK_ERR(preadv2(p->fd, iov, 2, -1, RWF_NOWAIT), EAGAIN);
	calls_post(p, 's');
	for (unsigned i = 0;; i++) {
		ssize_t r = (i % 2) ? preadv64v2(p->fd, iov, 2, -1, 0)
				    : preadv2(p->fd, iov, 2, -1, 0);
		CHECK(r >= 0);
		if (r == 0)
			break;
		size_t got = (size_t)r;
		CHECK(got <= V2_TOTAL - off);
		CHECK_PAT(a, off, got < sizeof(a) ? got : sizeof(a), seed);
		if (got > sizeof(a))
			CHECK_PAT(b, off + sizeof(a), got - sizeof(a), seed);
		off += got;
	}
	CHECK_EQ(off, V2_TOTAL);
	CHECK_EQ(preadv2(p->fd, iov, 2, -1, RWF_NOWAIT), 0);
}

static void case_preadv2(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		CHECK_EQ(calls_await(&p), 's');
		v2_send(p.fd, SEED_UP);
		v2_recv(&p, SEED_DOWN);
		calls_pair_close(&p);
	}
	v2_recv(&p, SEED_UP);
	CHECK_EQ(calls_await(&p), 's');
	v2_send(p.fd, SEED_DOWN);
	calls_pair_close(&p);
}

/*
 * The positioned calls on a socket with bytes queued: ESPIPE for offsets >= 0, EINVAL for
 * negative ones (-1 is only special for preadv2/pwritev2), EOPNOTSUPP for an unknown
 * RWF_ flag, ESPIPE from lseek. None of them takes or sends a byte.
 */
static void espipe_checks(int fd, unsigned seed)
{
	unsigned char buf[100];
	struct iovec iov = {buf, 10};

	CHECK_EQ(calls_wait_fionread(fd, 100, WAIT_MS), 100);
	CHECK_ERR(pread(fd, buf, 10, 0), ESPIPE);
	CHECK_ERR(pread64(fd, buf, 10, 5), ESPIPE);
	CHECK_ERR(pread(fd, buf, 10, -1), EINVAL);
	CHECK_ERR(pwrite(fd, "x", 1, 0), ESPIPE);
	CHECK_ERR(pwrite(fd, "x", 1, -1), EINVAL);
	CHECK_ERR(preadv(fd, &iov, 1, 0), ESPIPE);
	CHECK_ERR(pwritev(fd, &iov, 1, 0), ESPIPE);
	CHECK_ERR(preadv2(fd, &iov, 1, 0, 0), ESPIPE);
	CHECK_ERR(pwritev2(fd, &iov, 1, 7, 0), ESPIPE);
	CHECK_ERR(preadv2(fd, &iov, 1, -2, 0), EINVAL);
	CHECK_ERR(preadv2(fd, &iov, 1, -1, 0x100000), EOPNOTSUPP);
	CHECK_ERR(pwritev2(fd, &iov, 1, -1, 0x100000), EOPNOTSUPP);
	CHECK_ERR(lseek(fd, 0, SEEK_CUR), ESPIPE);
	CHECK_EQ(calls_fionread(fd), 100);
	calls_recv_pat(fd, 0, 100, seed);
}

static void case_pread_espipe(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_send_pat(p.fd, 0, 100, SEED_UP);
		espipe_checks(p.fd, SEED_DOWN);
		CHECK(shutdown(p.fd, SHUT_WR) == 0);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	calls_send_pat(p.fd, 0, 100, SEED_DOWN);
	espipe_checks(p.fd, SEED_UP);
	/* Nothing beyond the 100 bytes reached the peer: it sees EOF right after them. */
	calls_expect_eof(p.fd);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

/* ---- io_uring, by raw system calls ----------------------------------------------------------- */

struct ring {
	int fd;
	unsigned *sq_tail, *sq_mask, *sq_array;
	unsigned *cq_head, *cq_tail, *cq_mask;
	struct io_uring_sqe *sqes;
	struct io_uring_cqe *cqes;
	uint64_t seq;
};

/* Sets up an 8-entry ring; returns 0, or -errno where io_uring is unavailable. */
static int ring_setup(struct ring *r)
{
	struct io_uring_params p;
	void *sq, *cq, *sqes;
	size_t sq_len, cq_len;

	memset(&p, 0, sizeof(p));
	memset(r, 0, sizeof(*r));
	r->fd = (int)syscall(SYS_io_uring_setup, 8, &p);
	if (r->fd < 0)
		return -errno;
	/* Bounded waits need IORING_ENTER_EXT_ARG (5.11). */
	if (!(p.features & IORING_FEAT_EXT_ARG)) {
		close(r->fd);
		return -EOPNOTSUPP;
	}
	sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
	cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	if (p.features & IORING_FEAT_SINGLE_MMAP) {
		sq_len = sq_len > cq_len ? sq_len : cq_len;
		cq_len = sq_len;
	}
	sq = mmap(NULL, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
		  IORING_OFF_SQ_RING);
	CHECK(sq != MAP_FAILED);
	cq = sq;
	if (!(p.features & IORING_FEAT_SINGLE_MMAP)) {
		cq = mmap(NULL, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
			  IORING_OFF_CQ_RING);
		CHECK(cq != MAP_FAILED);
	}
	sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
	CHECK(sqes != MAP_FAILED);
	r->sq_tail = (unsigned *)((char *)sq + p.sq_off.tail);
	r->sq_mask = (unsigned *)((char *)sq + p.sq_off.ring_mask);
	r->sq_array = (unsigned *)((char *)sq + p.sq_off.array);
	r->cq_head = (unsigned *)((char *)cq + p.cq_off.head);
	r->cq_tail = (unsigned *)((char *)cq + p.cq_off.tail);
	r->cq_mask = (unsigned *)((char *)cq + p.cq_off.ring_mask);
	r->cqes = (struct io_uring_cqe *)((char *)cq + p.cq_off.cqes);
	r->sqes = sqes;
	return 0;
}

/*
 * Whether this process may use io_uring: asked in a throwaway child, so that the process
 * that runs the case has not touched io_uring before the case means it to.
 */
static void ring_require(void)
{
	FILE *f = fopen("/proc/sys/kernel/io_uring_disabled", "r");
	int disabled = 0, st = 0;

	if (f) {
		if (fscanf(f, "%d", &disabled) != 1)
			disabled = 0;
		fclose(f);
	}
	if (disabled == 2)
		calls_skip("io_uring is disabled (kernel.io_uring_disabled=2)");
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct ring r;
		int err = ring_setup(&r);
		_exit(err == 0 ? 0 : 77);
	}
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st));
	if (WEXITSTATUS(st) == 77)
		calls_skip("io_uring_setup is refused here (ENOSYS, EPERM or no EXT_ARG)");
	CHECK_EQ(WEXITSTATUS(st), 0);
}

/* Submits one operation and waits (10 s at most) for its completion; returns cqe->res. */
static int ring_op(struct ring *r, uint8_t op, int fd, void *buf, unsigned len)
{
	unsigned tail = *r->sq_tail;
	unsigned idx = tail & *r->sq_mask;
	struct io_uring_sqe *sqe = &r->sqes[idx];

	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = op;
	sqe->fd = fd;
	sqe->addr = (uint64_t)(uintptr_t)buf;
	sqe->len = len;
	/* READ and WRITE at offset -1: the file position, which a socket does not have. */
	sqe->off = (op == IORING_OP_READ || op == IORING_OP_WRITE) ? (uint64_t)-1 : 0;
	sqe->user_data = ++r->seq;
	r->sq_array[idx] = idx;
	/* The kernel must see the filled entry before the tail that hands it over. */
	__atomic_store_n(r->sq_tail, tail + 1, __ATOMIC_RELEASE);
	CHECK_EQ(syscall(SYS_io_uring_enter, r->fd, 1, 0, 0, NULL, 0), 1);
	for (;;) {
		unsigned head = *r->cq_head;
		/* The completion's fields are read only after its tail is seen. */
		if (head != __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE)) {
			struct io_uring_cqe *cqe = &r->cqes[head & *r->cq_mask];
			CHECK_EQ(cqe->user_data, r->seq);
			int res = cqe->res;
			/* The kernel may reuse the entry once it sees the new head. */
			__atomic_store_n(r->cq_head, head + 1, __ATOMIC_RELEASE);
			if (res < 0)
				calls_fail(__FILE__, __LINE__, "io_uring operation failed", -res);
			return res;
		}
		struct __kernel_timespec ts = {.tv_sec = WAIT_MS / 1000};
		struct io_uring_getevents_arg arg;
		memset(&arg, 0, sizeof(arg));
		arg.ts = (uint64_t)(uintptr_t)&ts;
		long w = syscall(SYS_io_uring_enter, r->fd, 0, 1,
				 IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG, &arg, sizeof(arg));
		if (w == -1 && errno == EINTR)
			continue;
		if (w == -1 && errno == ETIME)
			calls_fail(__FILE__, __LINE__, "io_uring: no completion within 10 s", 0);
		CHECK(w >= 0);
	}
}

#define RING_TOTAL ((2u << 20) + 3)

/* Sends RING_TOTAL bytes with IORING_OP_SEND and IORING_OP_WRITE in turn (short ones too). */
static void ring_send_stream(struct ring *r, int fd, unsigned seed)
{
	static unsigned char buf[131072];
	uint32_t s = 23 + seed;
	uint64_t off = 0;
	unsigned i = 0;

	while (off < RING_TOTAL) {
		size_t n = 1 + xr(&s) % sizeof(buf);
		if (n > RING_TOTAL - off)
			n = (size_t)(RING_TOTAL - off);
		calls_pat_fill(buf, off, n, seed);
		for (size_t done = 0; done < n;) {
			uint8_t op = (i++ % 2) ? IORING_OP_WRITE : IORING_OP_SEND;
			int res = ring_op(r, op, fd, buf + done, (unsigned)(n - done));
			CHECK(res > 0);
			done += (size_t)res;
		}
		off += n;
	}
}

/* Receives RING_TOTAL bytes with IORING_OP_RECV and IORING_OP_READ in turn, then EOF. */
static void ring_recv_stream(struct ring *r, int fd, unsigned seed)
{
	static unsigned char buf[65536];
	uint32_t s = 29 + seed;
	uint64_t off = 0;
	unsigned i = 0;

	while (off < RING_TOTAL) {
		unsigned want = 1 + xr(&s) % sizeof(buf);
		uint8_t op = (i++ % 2) ? IORING_OP_READ : IORING_OP_RECV;
		int res = ring_op(r, op, fd, buf, want);
		if (res == 0)
			calls_fail(__FILE__, __LINE__, "io_uring: early EOF", 0);
		CHECK((unsigned)res <= want);
		CHECK((uint64_t)res <= RING_TOTAL - off);
		CHECK_PAT(buf, off, (size_t)res, seed);
		off += (uint64_t)res;
	}
	CHECK_EQ(ring_op(r, IORING_OP_RECV, fd, buf, 100), 0);
	CHECK_EQ(ring_op(r, IORING_OP_READ, fd, buf, 100), 0);
}

/*
 * The server side of both io_uring cases, with ordinary calls: it takes the client's
 * stream, sends its own, and sees the client's close.
 */
static void ring_server(int fd)
{
	calls_recv_pat(fd, 0, RING_TOTAL, SEED_UP);
	calls_send_pat(fd, 0, RING_TOTAL, SEED_DOWN);
	CHECK(shutdown(fd, SHUT_WR) == 0);
	calls_expect_eof(fd);
}

/*
 * A connection in use before the client sets up its ring: from then on the ring moves its
 * bytes, 2 MiB each way, and every one of them must be the stream's.
 */
static void case_io_uring_before(CALLS_ARGS)
{
	struct calls_pair p;

	ring_require();
	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		struct ring r;
		CHECK_EQ(ring_setup(&r), 0);
		ring_send_stream(&r, p.fd, SEED_UP);
		ring_recv_stream(&r, p.fd, SEED_DOWN);
		close(r.fd);
		calls_pair_close(&p);
	}
	ring_server(p.fd);
	calls_pair_close(&p);
}

/*
 * A connection the client makes after it set up its ring, and uses only through the ring
 * (the greeting too). The client must not be accelerated: its connection stays on kernel
 * TCP (`expect kernel`), bytes exact.
 */
static void case_io_uring_after(CALLS_ARGS)
{
	struct calls_addr a;
	unsigned char c = 'G';

	ring_require();
	int lfd = calls_listen(AF_INET, &a, "kernel");
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct ring r;
		calls_child_setup();
		close(lfd);
		CHECK_EQ(ring_setup(&r), 0);
		int fd = calls_connect(&a);
		CHECK_EQ(ring_op(&r, IORING_OP_SEND, fd, &c, 1), 1);
		c = 0;
		CHECK_EQ(ring_op(&r, IORING_OP_RECV, fd, &c, 1), 1);
		CHECK_EQ(c, 'G');
		ring_send_stream(&r, fd, SEED_UP);
		ring_recv_stream(&r, fd, SEED_DOWN);
		close(fd);
		close(r.fd);
		_exit(0);
	}
	int fd = calls_accept(lfd);
	close(lfd);
	calls_greet(fd);
	ring_server(fd);
	close(fd);
	calls_wait_child(pid);
}

/* ---- POSIX AIO ------------------------------------------------------------------------------- */

/* Waits (10 s at most) until every request in the list has finished. */
static void aio_wait_all(const struct aiocb *const list[], int n)
{
	struct timespec ts = {.tv_sec = WAIT_MS / 1000};

	for (int i = 0; i < n; i++) {
		while (aio_error(list[i]) == EINPROGRESS) {
			int r = aio_suspend(&list[i], 1, &ts);
			if (r == -1 && errno == EINTR)
				continue;
			if (r == -1 && errno == EAGAIN)
				calls_fail(__FILE__, __LINE__, "aio: no completion within 10 s", 0);
			CHECK_EQ(r, 0);
		}
	}
}

static void aio_prep(struct aiocb *cb, int fd, void *buf, size_t n)
{
	memset(cb, 0, sizeof(*cb));
	cb->aio_fildes = fd;
	cb->aio_buf = buf;
	cb->aio_nbytes = n;
	cb->aio_sigevent.sigev_notify = SIGEV_NONE;
}

#define AIO_TOTAL ((1u << 20) + 1)

/* aio_write of random pieces; each completes with aio_error 0 and aio_return n. */
static void aio_send_stream(int fd, unsigned seed)
{
	static unsigned char buf[100000];
	uint32_t s = 31 + seed;
	uint64_t off = 0;

	while (off < AIO_TOTAL) {
		struct aiocb cb;
		const struct aiocb *list[1] = {&cb};
		size_t n = 1 + xr(&s) % sizeof(buf);
		if (n > AIO_TOTAL - off)
			n = (size_t)(AIO_TOTAL - off);
		calls_pat_fill(buf, off, n, seed);
		aio_prep(&cb, fd, buf, n);
		CHECK_EQ(aio_write(&cb), 0);
		aio_wait_all(list, 1);
		CHECK_EQ(aio_error(&cb), 0);
		CHECK_EQ(aio_return(&cb), n);
		off += n;
	}
	CHECK(shutdown(fd, SHUT_WR) == 0);
}

/* aio_read of random sizes until AIO_TOTAL bytes are in; then aio_read returns 0 (EOF). */
static void aio_recv_stream(int fd, unsigned seed)
{
	static unsigned char buf[65536];
	uint32_t s = 37 + seed;
	uint64_t off = 0;

	for (;;) {
		struct aiocb cb;
		const struct aiocb *list[1] = {&cb};
		size_t want = 1 + xr(&s) % sizeof(buf);
		aio_prep(&cb, fd, buf, want);
		CHECK_EQ(aio_read(&cb), 0);
		aio_wait_all(list, 1);
		CHECK_EQ(aio_error(&cb), 0);
		ssize_t r = aio_return(&cb);
		CHECK(r >= 0);
		if (r == 0)
			break;
		CHECK((size_t)r <= want);
		CHECK((uint64_t)r <= AIO_TOTAL - off);
		CHECK_PAT(buf, off, (size_t)r, seed);
		off += (uint64_t)r;
	}
	CHECK_EQ(off, AIO_TOTAL);
}

static void case_aio(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		aio_send_stream(p.fd, SEED_UP);
		aio_recv_stream(p.fd, SEED_DOWN);
		calls_pair_close(&p);
	}
	aio_recv_stream(p.fd, SEED_UP);
	aio_send_stream(p.fd, SEED_DOWN);
	calls_pair_close(&p);
}

#define LIO_ROUNDS 40

/*
 * lio_listio(LIO_WAIT) of two writes on the socket per round: both complete in full, in
 * list order (glibc runs the requests of one descriptor one after the other).
 */
static void lio_send(int fd, unsigned seed, uint64_t *total)
{
	static unsigned char a[30000], b[30000];
	uint32_t s = 41 + seed;
	uint64_t off = 0;

	for (int i = 0; i < LIO_ROUNDS; i++) {
		struct aiocb ca, cb;
		struct aiocb *list[2] = {&ca, &cb};
		size_t na = 1 + xr(&s) % sizeof(a), nb = 1 + xr(&s) % sizeof(b);
		calls_pat_fill(a, off, na, seed);
		calls_pat_fill(b, off + na, nb, seed);
		aio_prep(&ca, fd, a, na);
		ca.aio_lio_opcode = LIO_WRITE;
		aio_prep(&cb, fd, b, nb);
		cb.aio_lio_opcode = LIO_WRITE;
		CHECK_EQ(lio_listio(LIO_WAIT, list, 2, NULL), 0);
		CHECK_EQ(aio_error(&ca), 0);
		CHECK_EQ(aio_error(&cb), 0);
		CHECK_EQ(aio_return(&ca), na);
		CHECK_EQ(aio_return(&cb), nb);
		off += na + nb;
	}
	*total = off;
	CHECK(shutdown(fd, SHUT_WR) == 0);
}

/* lio_listio(LIO_NOWAIT) of one read (and a LIO_NOP) per round, waited for with aio_suspend. */
static void lio_recv(int fd, unsigned seed, uint64_t total)
{
	static unsigned char buf[50000];
	uint64_t off = 0;

	for (;;) {
		struct aiocb cr, cn;
		struct aiocb *list[2] = {&cr, &cn};
		struct sigevent sev;
		memset(&sev, 0, sizeof(sev));
		sev.sigev_notify = SIGEV_NONE;
		aio_prep(&cr, fd, buf, sizeof(buf));
		cr.aio_lio_opcode = LIO_READ;
		aio_prep(&cn, fd, NULL, 0);
		cn.aio_lio_opcode = LIO_NOP;
		CHECK_EQ(lio_listio(LIO_NOWAIT, list, 2, &sev), 0);
		aio_wait_all((const struct aiocb *const *)list, 1);
		CHECK_EQ(aio_error(&cr), 0);
		ssize_t r = aio_return(&cr);
		CHECK(r >= 0);
		if (r == 0)
			break;
		CHECK((uint64_t)r <= total - off);
		CHECK_PAT(buf, off, (size_t)r, seed);
		off += (uint64_t)r;
	}
	CHECK_EQ(off, total);
}

/* The total lio_send sends for `seed`: both sides draw the same sizes. */
static uint64_t lio_total(unsigned seed)
{
	uint32_t s = 41 + seed;
	uint64_t total = 0;

	for (int i = 0; i < LIO_ROUNDS; i++) {
		total += 1 + xr(&s) % 30000;
		total += 1 + xr(&s) % 30000;
	}
	return total;
}

static void case_lio_listio(CALLS_ARGS)
{
	struct calls_pair p;
	uint64_t sent = 0;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		lio_send(p.fd, SEED_UP, &sent);
		CHECK_EQ(sent, lio_total(SEED_UP));
		lio_recv(p.fd, SEED_DOWN, lio_total(SEED_DOWN));
		calls_pair_close(&p);
	}
	lio_recv(p.fd, SEED_UP, lio_total(SEED_UP));
	lio_send(p.fd, SEED_DOWN, &sent);
	CHECK_EQ(sent, lio_total(SEED_DOWN));
	calls_pair_close(&p);
}

static const struct calls_case cases[] = {
	{"syscall_io", case_syscall_io},
	{"syscall_wait", case_syscall_wait},
	{"syscall_close", case_syscall_close},
	{"preadv2", case_preadv2},
	{"pread_espipe", case_pread_espipe},
	{"io_uring_before", case_io_uring_before},
	{"io_uring_after", case_io_uring_after},
	{"aio", case_aio},
	{"lio_listio", case_lio_listio},
	{NULL, NULL},
};

int main(int argc, char **argv)
{
	return calls_main(argc, argv, cases);
}
