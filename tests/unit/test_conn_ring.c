/* SPDX-License-Identifier: MIT */
/*
 * The ring protocol between two processes, without the preload: the parent creates a
 * segment as a client would, a forked child opens it by name as a server would, and 64 MiB
 * move through ring[ULS_C2S] in chunks of random size and random iovec splits, using only
 * ring.h and the documented ordering:
 *   producer: uls_ring_writable, copy_in, store tail with release (eof after the last);
 *   consumer: uls_ring_readable, copy_out, store head with release.
 * The child checks every byte of the stream and sends back on ring[ULS_S2C] the number of
 * bytes it verified and a checksum, which the parent compares with its own.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "core/config.h"
#include "os/libc.h"
#include "transport/shm/segment.h"

#define TOTAL (64ull << 20)
#define C2S_SIZE (256u << 10)
#define S2C_SIZE ULS_RING_MIN
#define MAX_CHUNK (300u << 10) /* sometimes more than the ring holds */
#define SEED 0x0c0ffee5eedull
#define COOKIE 0xfeedf00d12345678ull
#define STALL_SEC 30

static uint64_t seg_ino;
static pid_t main_pid, child_pid;
static int child_status = -1; /* set once the child was reaped */

static void cleanup(void)
{
	if (getpid() == main_pid)
		uls_seg_unlink(seg_ino);
}

static uint64_t now_sec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec;
}

/* Waits a moment for a stalled ring; fails the test after STALL_SEC without progress. */
static void stall(uint64_t *since, const char *what)
{
	if (!*since)
		*since = now_sec();
	if (now_sec() - *since > STALL_SEC) {
		check_context("%s: no progress for %d s", what, STALL_SEC);
		CHECK(!"stalled");
	}
	/* A child that failed ends the wait. One that passed has published all it had to
	 * (its report ends with eof), so the ring tells the rest; it is reaped here. */
	if (child_pid > 0 && getpid() == main_pid) {
		int st;
		if (waitpid(child_pid, &st, WNOHANG) == child_pid) {
			child_pid = 0;
			child_status = st;
			if (!WIFEXITED(st) || WEXITSTATUS(st) != CHECK_PASS) {
				check_context("%s: the child exited early (status %#x)", what, st);
				CHECK(!"child gone");
			}
		}
	}
	sched_yield();
}

static int split(struct iovec *iov, uint8_t *buf, size_t n, uint64_t *rng)
{
	int cnt = 1 + (int)check_rand_below(rng, 4);
	size_t left = n;

	for (int i = 0; i < cnt; i++) {
		size_t len = i == cnt - 1 ? left : (size_t)check_rand_below(rng, left + 1);
		iov[i].iov_base = buf + (n - left);
		iov[i].iov_len = len;
		left -= len;
	}
	return cnt;
}

static uint64_t chunk(uint64_t *rng)
{
	/* Mostly small writes, as a request/response program makes; some very large. */
	switch (check_rand_below(rng, 4)) {
	case 0:
		return 1 + check_rand_below(rng, 64);
	case 1:
		return 1 + check_rand_below(rng, 4096);
	default:
		return 1 + check_rand_below(rng, MAX_CHUNK);
	}
}

static uint64_t checksum(uint64_t sum, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sum = (sum ^ p[i]) * 0x100000001b3ull; /* FNV-1a */
	return sum;
}

/* Producer side of one ring: sends len bytes from the stream (or from src if not NULL). */
static uint64_t produce(struct uls_ring *r, uint64_t total, const uint8_t *src, uint64_t *rng)
{
	uint8_t *buf = malloc(MAX_CHUNK);
	uint64_t tail = atomic_load_explicit(&r->sh->prod.tail, memory_order_relaxed);
	uint64_t sent = 0, since = 0, sum = 0xcbf29ce484222325ull;
	struct iovec iov[4];

	CHECK(buf != NULL);
	while (sent < total) {
		int64_t w = uls_ring_writable(r, tail);
		CHECK_INT(w, >=, 0);
		if (w == 0) {
			stall(&since, "producer");
			continue;
		}
		since = 0;
		uint64_t n = chunk(rng);
		if (n > (uint64_t)w)
			n = (uint64_t)w;
		if (n > total - sent)
			n = total - sent;
		if (src)
			memcpy(buf, src + sent, (size_t)n);
		else
			check_stream_fill(buf, (size_t)n, SEED, sent);
		sum = checksum(sum, buf, (size_t)n);
		uls_ring_copy_in(r, tail, iov, split(iov, buf, (size_t)n, rng), 0, (size_t)n);
		tail += n;
		sent += n;
		/* Release: the consumer sees the bytes before it sees the new tail. */
		atomic_store_explicit(&r->sh->prod.tail, tail, memory_order_release);
	}
	/* Release: a consumer that sees eof sees the final tail. */
	atomic_store_explicit(&r->sh->prod.eof, 1, memory_order_release);
	free(buf);
	return sum;
}

/*
 * Consumer side of one ring, until eof: checks the stream (or copies into dst when not
 * NULL, at most cap bytes). Returns the byte count; *sum gets the checksum.
 */
static uint64_t consume(struct uls_ring *r, uint8_t *dst, uint64_t cap, uint64_t *sum,
			uint64_t *rng)
{
	uint8_t *buf = malloc(MAX_CHUNK);
	uint64_t head = atomic_load_explicit(&r->sh->cons.head, memory_order_relaxed);
	uint64_t got = 0, since = 0;
	struct iovec iov[4];

	CHECK(buf != NULL);
	*sum = 0xcbf29ce484222325ull;
	for (;;) {
		int64_t a = uls_ring_readable(r, head);
		CHECK_INT(a, >=, 0);
		if (a == 0) {
			/* Acquire on eof, then look again: the final tail was published first. */
			if (atomic_load_explicit(&r->sh->prod.eof, memory_order_acquire) &&
			    uls_ring_readable(r, head) == 0)
				break;
			stall(&since, "consumer");
			continue;
		}
		since = 0;
		uint64_t n = chunk(rng);
		if (n > (uint64_t)a)
			n = (uint64_t)a;
		uls_ring_copy_out(r, head, iov, split(iov, buf, (size_t)n, rng), 0, (size_t)n);
		if (dst) {
			CHECK_U64(got + n, <=, cap);
			memcpy(dst + got, buf, (size_t)n);
		} else {
			size_t bad = check_stream_cmp(buf, (size_t)n, SEED, got);
			if (bad != n)
				check_context("stream differs at byte %llu",
					      (unsigned long long)(got + bad));
			CHECK_U64(bad, ==, n);
		}
		*sum = checksum(*sum, buf, (size_t)n);
		head += n;
		got += n;
		/* Release: the producer may reuse the space once it sees the new head. */
		atomic_store_explicit(&r->sh->cons.head, head, memory_order_release);
	}
	free(buf);
	return got;
}

struct report {
	uint64_t bytes, sum;
};

/* The server side: attach, verify the stream, report on the other ring. */
static void child(void)
{
	struct uls_seg seg;
	struct report rep;
	uint64_t rng = SEED ^ 0xc41d;

	/* What the preload's fork hook does in a child: renew the cached pid. */
	uls_config_atfork_child();
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	check_context("child");
	memset(&seg, 0, sizeof(seg));
	CHECK_EQ(uls_seg_open(&seg, seg_ino, COOKIE), 0);
	CHECK_U64(seg.ring[ULS_C2S].size, ==, C2S_SIZE);
	CHECK_U64(seg.ring[ULS_S2C].size, ==, S2C_SIZE);
	atomic_store(&seg.hdr->side[ULS_SIDE_SERVER].pid, (uint32_t)getpid());
	/* Release: the client that sees ATTACHED sees everything the server set before. */
	atomic_fetch_or_explicit(&seg.hdr->side[ULS_SIDE_SERVER].state, ULS_SIDE_ATTACHED,
				 memory_order_seq_cst);
	rep.bytes = consume(&seg.ring[ULS_C2S], NULL, 0, &rep.sum, &rng);
	CHECK_U64(rep.bytes, ==, TOTAL);
	produce(&seg.ring[ULS_S2C], sizeof(rep), (const uint8_t *)&rep, &rng);
	uls_seg_unmap(&seg);
	_exit(CHECK_PASS);
}

int main(void)
{
	struct uls_seg seg;
	struct report rep;
	uint64_t rng = SEED ^ 0x9a4e, since = 0, sum, rsum;
	int status;

	main_pid = getpid();
	seg_ino = 0x7e58000000000000ull | (uint64_t)main_pid << 8;
	uls_libc_init();
	unsetenv("ULSOCK_TRUST_UIDS");
	uls_config_load();
	atexit(cleanup);

	memset(&seg, 0, sizeof(seg));
	int err = uls_seg_create(&seg, seg_ino, COOKIE, C2S_SIZE, S2C_SIZE);
	if (err == -ENOENT || err == -EACCES)
		CHECK_SKIP("cannot create a segment in /dev/shm: %s", strerror(-err));
	CHECK_EQ(err, 0);
	child_pid = fork();
	CHECK(child_pid >= 0);
	if (child_pid == 0)
		child();

	/* The client side: wait for the server to attach, then the name can go. */
	check_context("parent");
	while (!(atomic_load_explicit(&seg.hdr->side[ULS_SIDE_SERVER].state, memory_order_acquire) &
		 ULS_SIDE_ATTACHED))
		stall(&since, "attach");
	uls_seg_unlink(seg_ino);
	sum = produce(&seg.ring[ULS_C2S], TOTAL, NULL, &rng);
	memset(&rep, 0, sizeof(rep));
	CHECK_U64(consume(&seg.ring[ULS_S2C], (uint8_t *)&rep, sizeof(rep), &rsum, &rng), ==,
		  sizeof(rep));
	if (child_pid > 0) {
		CHECK_EQ(waitpid(child_pid, &status, 0), child_pid);
		child_pid = 0;
	} else {
		status = child_status;
	}
	CHECK(WIFEXITED(status));
	CHECK_INT(WEXITSTATUS(status), ==, CHECK_PASS);
	CHECK_U64(rep.bytes, ==, TOTAL);
	CHECK_U64(rep.sum, ==, sum);
	/* Both rings ended where they should. */
	CHECK_U64(atomic_load(&seg.hdr->ring[ULS_C2S].prod.tail), ==, TOTAL);
	CHECK_U64(atomic_load(&seg.hdr->ring[ULS_C2S].cons.head), ==, TOTAL);
	CHECK_U64(atomic_load(&seg.hdr->ring[ULS_S2C].cons.head), ==, sizeof(rep));
	uls_seg_unmap(&seg);
	check_context("%s", "");
	return CHECK_PASS;
}
