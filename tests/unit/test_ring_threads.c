/* SPDX-License-Identifier: MIT */
/*
 * One ring in process memory, a producer thread and a consumer thread, following the
 * memory ordering documented in ring.h and shm/io.c:
 *   producer: uls_ring_writable (acquires head), copy_in, store tail with release;
 *   consumer: uls_ring_readable (acquires tail), copy_out, store head with release.
 * Under ThreadSanitizer this proves the ordering is enough for the plain memcpy of ring
 * data on both sides; in every build the consumer checks each byte of the stream.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "transport/shm/ring.h"

struct run {
	struct uls_ring r;
	struct uls_ring_shared *sh;
	uint64_t start; /* the first position, near UINT64_MAX to cross the wrap */
	uint64_t total; /* bytes to move */
	uint64_t seed;
	uint64_t max_chunk;
};

static size_t split(struct iovec *iov, uint8_t *buf, size_t n, uint64_t *rng)
{
	size_t a = n ? (size_t)check_rand_below(rng, n + 1) : 0;
	size_t b = n - a ? (size_t)check_rand_below(rng, n - a + 1) : 0;

	iov[0] = (struct iovec){.iov_base = buf, .iov_len = a};
	iov[1] = (struct iovec){.iov_base = buf + a, .iov_len = b};
	iov[2] = (struct iovec){.iov_base = buf + a + b, .iov_len = n - a - b};
	return 3;
}

static void *producer(void *arg)
{
	struct run *x = arg;
	uint64_t tail = x->start, sent = 0, rng = x->seed ^ 0x1111;
	uint8_t *buf = malloc(x->max_chunk);
	struct iovec iov[3];

	CHECK(buf != NULL);
	while (sent < x->total) {
		int64_t w = uls_ring_writable(&x->r, tail);
		CHECK_INT(w, >=, 0);
		if (w == 0) {
			sched_yield();
			continue;
		}
		uint64_t n = 1 + check_rand_below(&rng, x->max_chunk);
		if (n > (uint64_t)w)
			n = (uint64_t)w;
		if (n > x->total - sent)
			n = x->total - sent;
		check_stream_fill(buf, (size_t)n, x->seed, sent);
		uls_ring_copy_in(&x->r, tail, iov, (int)split(iov, buf, (size_t)n, &rng), 0,
				 (size_t)n);
		tail += n;
		sent += n;
		/* Release: the consumer sees the bytes before it sees the new tail. */
		atomic_store_explicit(&x->sh->prod.tail, tail, memory_order_release);
	}
	/* Release: a consumer that sees eof sees the final tail. */
	atomic_store_explicit(&x->sh->prod.eof, 1, memory_order_release);
	free(buf);
	return NULL;
}

static void *consumer(void *arg)
{
	struct run *x = arg;
	uint64_t head = x->start, got = 0, rng = x->seed ^ 0x2222;
	uint8_t *buf = malloc(x->max_chunk);
	struct iovec iov[3];

	CHECK(buf != NULL);
	for (;;) {
		int64_t a = uls_ring_readable(&x->r, head);
		CHECK_INT(a, >=, 0);
		if (a == 0) {
			if (atomic_load_explicit(&x->sh->prod.eof, memory_order_acquire) &&
			    uls_ring_readable(&x->r, head) == 0)
				break;
			sched_yield();
			continue;
		}
		uint64_t n = 1 + check_rand_below(&rng, x->max_chunk);
		if (n > (uint64_t)a)
			n = (uint64_t)a;
		uls_ring_copy_out(&x->r, head, iov, (int)split(iov, buf, (size_t)n, &rng), 0,
				  (size_t)n);
		size_t bad = check_stream_cmp(buf, (size_t)n, x->seed, got);
		if (bad != n)
			check_context("stream differs at byte %llu",
				      (unsigned long long)(got + bad));
		CHECK_U64(bad, ==, n);
		head += n;
		got += n;
		/* Release: the producer may overwrite the space once it sees the new head. */
		atomic_store_explicit(&x->sh->cons.head, head, memory_order_release);
	}
	CHECK_U64(got, ==, x->total);
	free(buf);
	return NULL;
}

static void run_one(uint64_t size, uint64_t start, uint64_t total, uint64_t max_chunk,
		    uint64_t seed)
{
	struct run x = {.start = start, .total = total, .seed = seed, .max_chunk = max_chunk};
	uint8_t *data = malloc(size);
	pthread_t p, c;

	check_context("threads size=%llu start=%#llx total=%llu", (unsigned long long)size,
		      (unsigned long long)start, (unsigned long long)total);
	x.sh = aligned_alloc(ULS_CACHELINE, sizeof(*x.sh));
	CHECK(data && x.sh);
	memset(x.sh, 0, sizeof(*x.sh));
	atomic_store(&x.sh->prod.tail, start);
	atomic_store(&x.sh->cons.head, start);
	uls_ring_init(&x.r, x.sh, data, size);
	CHECK_EQ(pthread_create(&c, NULL, consumer, &x), 0);
	CHECK_EQ(pthread_create(&p, NULL, producer, &x), 0);
	CHECK_EQ(pthread_join(p, NULL), 0);
	CHECK_EQ(pthread_join(c, NULL), 0);
	CHECK_U64(atomic_load(&x.sh->prod.tail), ==, start + total);
	CHECK_U64(atomic_load(&x.sh->cons.head), ==, start + total);
	free(data);
	free(x.sh);
}

int main(void)
{
	/* A small ring that is full most of the time, with chunks larger than the ring. */
	run_one(ULS_RING_MIN, UINT64_MAX - 100000, 16u << 20, 3 * ULS_RING_MIN, 0xabc1);
	/* A larger ring and smaller chunks: both sides find it partly full. */
	run_one(1u << 16, (uint64_t)-(32u << 20), 64u << 20, 9000, 0xabc2);
	check_context("%s", "");
	return CHECK_PASS;
}
