/* SPDX-License-Identifier: MIT */
/*
 * The SPSC byte ring on its own, in process memory: the readable/writable arithmetic at
 * its boundaries, copies in and out through odd iovecs with skip offsets, free-running
 * positions across UINT64_MAX, and hostile positions from a peer. The ring's data area
 * sits between two PROT_NONE pages, so a copy that strays out of bounds crashes the test
 * even without a sanitizer.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "transport/shm/ring.h"

/* ThreadSanitizer adds nothing to this single-threaded test, but slows every byte. */
#if defined(__SANITIZE_THREAD__)
#define SLOW_BUILD 4
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SLOW_BUILD 4
#endif
#endif
#ifndef SLOW_BUILD
#define SLOW_BUILD 1
#endif

struct tring {
	struct uls_ring r;
	struct uls_ring_shared *sh;
	uint8_t *map; /* guard page, data, guard page */
	size_t map_len;
	uint8_t *image; /* what the data area must hold, maintained by the test */
};

static size_t page_size(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

static void tring_init(struct tring *t, uint64_t size)
{
	size_t pg = page_size(), data_len = (size_t)size;

	if (data_len % pg)
		data_len += pg - data_len % pg;
	t->map_len = data_len + 2 * pg;
	t->map = mmap(NULL, t->map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(t->map != MAP_FAILED);
	CHECK_EQ(mprotect(t->map + pg, data_len, PROT_READ | PROT_WRITE), 0);
	/* The data ends exactly at the second guard page, so one byte too far faults. */
	uint8_t *data = t->map + pg + data_len - size;
	memset(data, 0x5a, size);
	t->sh = aligned_alloc(ULS_CACHELINE, sizeof(*t->sh));
	CHECK(t->sh != NULL);
	memset(t->sh, 0, sizeof(*t->sh));
	t->image = malloc(size);
	CHECK(t->image != NULL);
	memset(t->image, 0x5a, size);
	uls_ring_init(&t->r, t->sh, data, size);
}

static void tring_fini(struct tring *t)
{
	munmap(t->map, t->map_len);
	free(t->sh);
	free(t->image);
}

static void set_pos(struct tring *t, uint64_t head, uint64_t tail)
{
	atomic_store(&t->sh->cons.head, head);
	atomic_store(&t->sh->prod.tail, tail);
}

/* The data area must hold exactly what the test wrote, nothing more. */
static void check_image(const struct tring *t)
{
	CHECK_MEM(t->r.data, t->image, t->r.size);
}

/* Byte k of the test stream for a seed: independent of ring positions. */
static uint8_t stream_byte(uint64_t seed, uint64_t k)
{
	uint64_t x = (k + 1) * 0x9e3779b97f4a7c15ull ^ seed;

	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 29;
	return (uint8_t)x;
}

/* ---- readable / writable ---- */

static void test_bounds(uint64_t size, uint64_t head)
{
	struct tring t;

	check_context("bounds size=%llu head=%#llx", (unsigned long long)size,
		      (unsigned long long)head);
	tring_init(&t, size);
	/* Empty: head == tail. */
	set_pos(&t, head, head);
	CHECK_INT(uls_ring_readable(&t.r, head), ==, 0);
	CHECK_INT(uls_ring_writable(&t.r, head), ==, (int64_t)size);
	/* One byte. */
	set_pos(&t, head, head + 1);
	CHECK_INT(uls_ring_readable(&t.r, head), ==, 1);
	CHECK_INT(uls_ring_writable(&t.r, head + 1), ==, (int64_t)size - 1);
	/* One short of full. */
	set_pos(&t, head, head + size - 1);
	CHECK_INT(uls_ring_readable(&t.r, head), ==, (int64_t)size - 1);
	CHECK_INT(uls_ring_writable(&t.r, head + size - 1), ==, 1);
	/* Full: tail - head == size, although both land on the same data offset. */
	set_pos(&t, head, head + size);
	CHECK_U64((head + size) & t.r.mask, ==, head & t.r.mask);
	CHECK_INT(uls_ring_readable(&t.r, head), ==, (int64_t)size);
	CHECK_INT(uls_ring_writable(&t.r, head + size), ==, 0);
	/* One past full is impossible. */
	set_pos(&t, head, head + size + 1);
	CHECK_INT(uls_ring_readable(&t.r, head), ==, -EPROTO);
	CHECK_INT(uls_ring_writable(&t.r, head + size + 1), ==, -EPROTO);
	check_image(&t);
	tring_fini(&t);
}

/* Positions a peer could write: every one must be rejected without touching data. */
static void test_hostile(uint64_t size, uint64_t head)
{
	const uint64_t bad[] = {
		size + 1, size + 2, 2 * size, 2 * size + 1, (uint64_t)ULS_RING_MAX + 1,
		1ull << 32, (1ull << 63) - 1, 1ull << 63, (1ull << 63) + 1,
		UINT64_MAX,        /* tail one behind head */
		UINT64_MAX - 1,
		(uint64_t)-size,   /* a whole ring behind */
		(uint64_t)-size - 1, (uint64_t)-size + 1,
	};
	struct tring t;

	check_context("hostile size=%llu head=%#llx", (unsigned long long)size,
		      (unsigned long long)head);
	tring_init(&t, size);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t tail = head + bad[i];

		/* Consumer: a tail behind head or more than a ring ahead. */
		set_pos(&t, head, tail);
		CHECK_INT(uls_ring_readable(&t.r, head), ==, -EPROTO);
		/* Producer: a head ahead of tail, or more than a ring behind it. */
		CHECK_INT(uls_ring_writable(&t.r, tail), ==, -EPROTO);
		/* The same two positions with the roles swapped: legitimate only when the
		 * reversed distance is within one ring. */
		uint64_t rev = (uint64_t)0 - bad[i];
		int64_t want_r = rev <= size ? (int64_t)rev : -EPROTO;
		int64_t want_w = rev <= size ? (int64_t)(size - rev) : -EPROTO;
		set_pos(&t, tail, head);
		CHECK_INT(uls_ring_readable(&t.r, tail), ==, want_r);
		CHECK_INT(uls_ring_writable(&t.r, head), ==, want_w);
	}
	/* Every distance in [0, size] is legitimate. */
	for (uint64_t d = 0; d <= size; d += (d < 8 || d > size - 8) ? 1 : size / 16) {
		set_pos(&t, head, head + d);
		CHECK_INT(uls_ring_readable(&t.r, head), ==, (int64_t)d);
		CHECK_INT(uls_ring_writable(&t.r, head + d), ==, (int64_t)(size - d));
	}
	check_image(&t);
	tring_fini(&t);
}

static void test_dist(void)
{
	check_context("uls_ring_dist");
	CHECK_U64(uls_ring_dist(0, 0), ==, 0);
	CHECK_U64(uls_ring_dist(5, 9), ==, 4);
	CHECK_U64(uls_ring_dist(9, 5), ==, UINT64_MAX);
	CHECK_U64(uls_ring_dist(UINT64_MAX, 3), ==, 4);
	CHECK_U64(uls_ring_dist(3, UINT64_MAX), ==, UINT64_MAX);
	CHECK_U64(uls_ring_dist(0, (1ull << 63) - 1), ==, (1ull << 63) - 1);
	CHECK_U64(uls_ring_dist(0, 1ull << 63), ==, UINT64_MAX);
	CHECK(uls_ring_size_valid(ULS_RING_MIN));
	CHECK(uls_ring_size_valid(ULS_RING_MAX));
	CHECK(uls_ring_size_valid(1u << 16));
	CHECK(!uls_ring_size_valid(0));
	CHECK(!uls_ring_size_valid(ULS_RING_MIN / 2));
	CHECK(!uls_ring_size_valid(2u * ULS_RING_MAX));
	CHECK(!uls_ring_size_valid(ULS_RING_MIN + 1));
	CHECK(!uls_ring_size_valid(3u << 12));
	CHECK(!uls_ring_size_valid(UINT64_MAX));
	CHECK(!uls_ring_size_valid(1ull << 63));
}

/* ---- iovec sets over one buffer, with gaps, for checking what a copy touched ---- */

#define MAX_IOV 12

struct iovset {
	struct iovec iov[MAX_IOV];
	int cnt;
	size_t total;  /* sum of iov_len */
	uint8_t *buf;  /* backing memory, gaps included */
	size_t buf_len;
	size_t *phys;  /* logical byte i of the iovecs lies at buf[phys[i]] */
};

/*
 * Splits `total` logical bytes into up to MAX_IOV iovecs of random (odd, sometimes zero)
 * sizes, separated by random gaps in the backing buffer.
 */
static void iovset_make(struct iovset *s, uint64_t *rng, size_t total, uint8_t fill)
{
	size_t left = total, pos = 0, li = 0;
	int n = 1 + (int)check_rand_below(rng, MAX_IOV);

	s->total = total;
	s->buf_len = total + (size_t)n * 8 + 1;
	s->buf = malloc(s->buf_len);
	s->phys = malloc((total ? total : 1) * sizeof(size_t));
	CHECK(s->buf && s->phys);
	memset(s->buf, fill, s->buf_len);
	s->cnt = 0;
	for (int i = 0; i < n; i++) {
		size_t len;

		if (i == n - 1)
			len = left;
		else if (check_rand_below(rng, 5) == 0)
			len = 0;
		else
			len = left ? (size_t)check_rand_below(rng, left + 1) | 1 : 0;
		if (len > left)
			len = left;
		pos += (size_t)check_rand_below(rng, 8); /* gap */
		s->iov[s->cnt].iov_base = s->buf + pos;
		s->iov[s->cnt].iov_len = len;
		s->cnt++;
		for (size_t k = 0; k < len; k++)
			s->phys[li++] = pos + k;
		pos += len;
		left -= len;
	}
	CHECK_U64(li, ==, total);
	CHECK_U64(pos, <=, s->buf_len);
}

static void iovset_free(struct iovset *s)
{
	free(s->buf);
	free(s->phys);
}

/* ---- the random model test ---- */

/*
 * The reference model: a FIFO of stream offsets. produced/consumed count bytes; byte k of
 * the stream is stream_byte(seed, k), and it lives at ring position start + k.
 */
struct model {
	uint64_t seed, start;
	uint64_t produced, consumed;
};

static size_t pick_len(uint64_t *rng, size_t max)
{
	switch (check_rand_below(rng, 6)) {
	case 0:
		return 0;
	case 1:
		return max;
	case 2:
		return max < 7 ? max : (size_t)check_rand_below(rng, 8);
	default:
		return (size_t)check_rand_below(rng, max + 1);
	}
}

static void model_write(struct tring *t, struct model *m, uint64_t *rng)
{
	uint64_t tail = m->start + m->produced;
	int64_t w = uls_ring_writable(&t->r, tail);
	size_t n, skip, slack;
	struct iovset s;

	CHECK_INT(w, ==, (int64_t)(t->r.size - (m->produced - m->consumed)));
	n = pick_len(rng, (size_t)w);
	skip = (size_t)check_rand_below(rng, 40);
	slack = (size_t)check_rand_below(rng, 3) ? 0 : (size_t)check_rand_below(rng, 20);
	iovset_make(&s, rng, skip + n + slack, 0xee);
	for (size_t i = 0; i < n; i++)
		s.buf[s.phys[skip + i]] = stream_byte(m->seed, m->produced + i);
	if (check_rand_below(rng, 4) == 0) {
		/* The plain-memory variant of the producer copy. */
		uint8_t *flat = malloc(n ? n : 1);
		CHECK(flat != NULL);
		for (size_t i = 0; i < n; i++)
			flat[i] = stream_byte(m->seed, m->produced + i);
		uls_ring_put(&t->r, tail, flat, n);
		free(flat);
	} else {
		uls_ring_copy_in(&t->r, tail, s.iov, s.cnt, skip, n);
	}
	for (size_t i = 0; i < n; i++)
		t->image[(tail + i) % t->r.size] = stream_byte(m->seed, m->produced + i);
	iovset_free(&s);
	atomic_store_explicit(&t->sh->prod.tail, tail + n, memory_order_release);
	m->produced += n;
	check_image(t);
}

static void model_read(struct tring *t, struct model *m, uint64_t *rng, int peek)
{
	uint64_t head = m->start + m->consumed;
	int64_t avail = uls_ring_readable(&t->r, head);
	size_t n, skip, slack;
	struct iovset s;

	CHECK_INT(avail, ==, (int64_t)(m->produced - m->consumed));
	n = pick_len(rng, (size_t)avail);
	skip = (size_t)check_rand_below(rng, 40);
	slack = (size_t)check_rand_below(rng, 3) ? 0 : (size_t)check_rand_below(rng, 20);
	iovset_make(&s, rng, skip + n + slack, 0xa5);
	uls_ring_copy_out(&t->r, head, s.iov, s.cnt, skip, n);
	/* Exactly the logical bytes [skip, skip + n) changed, to the model's bytes. */
	uint8_t *want = malloc(s.buf_len);
	CHECK(want != NULL);
	memset(want, 0xa5, s.buf_len);
	for (size_t i = 0; i < n; i++)
		want[s.phys[skip + i]] = stream_byte(m->seed, m->consumed + i);
	CHECK_MEM(s.buf, want, s.buf_len);
	free(want);
	iovset_free(&s);
	if (!peek) {
		atomic_store_explicit(&t->sh->cons.head, head + n, memory_order_release);
		m->consumed += n;
	}
	check_image(t);
}

static void test_model(uint64_t size, uint64_t start, uint64_t seed, int ops)
{
	struct tring t;
	struct model m = {.seed = seed, .start = start};
	uint64_t rng = seed;

	check_context("model size=%llu start=%#llx seed=%#llx", (unsigned long long)size,
		      (unsigned long long)start, (unsigned long long)seed);
	tring_init(&t, size);
	set_pos(&t, start, start);
	for (int i = 0; i < ops; i++) {
		uint64_t op = check_rand_below(&rng, 10);
		if (op < 5)
			model_write(&t, &m, &rng);
		else if (op < 9)
			model_read(&t, &m, &rng, 0);
		else
			model_read(&t, &m, &rng, 1);
	}
	/* Drain: everything produced comes out in order. */
	while (m.consumed < m.produced)
		model_read(&t, &m, &rng, 0);
	CHECK_INT(uls_ring_readable(&t.r, start + m.consumed), ==, 0);
	CHECK_INT(uls_ring_writable(&t.r, start + m.produced), ==, (int64_t)size);
	tring_fini(&t);
}

/* ---- fixed cases for skip offsets and wrap-around ---- */

static void test_skip_cases(void)
{
	const uint64_t size = ULS_RING_MIN;
	const size_t lens[] = {3, 0, 5, 1, 7, 0, 2};
	const int cnt = (int)(sizeof(lens) / sizeof(lens[0]));
	uint8_t buf[18 + 16], *p;
	struct iovec iov[sizeof(lens) / sizeof(lens[0])];
	struct tring t;
	uint8_t src[64];

	tring_init(&t, size);
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)(i * 7 + 1);
	/* Positions that wrap the data area at every offset of the copy. */
	for (uint64_t pos = size - 20 / SLOW_BUILD; pos != size + 20 / SLOW_BUILD; pos++) {
		for (size_t skip = 0; skip <= 18; skip++) {
			for (size_t len = 0; len + skip <= 18; len++) {
				check_context("skip pos=%llu skip=%zu len=%zu",
					      (unsigned long long)pos, skip, len);
				/* In: the iovecs hold src at logical offsets. */
				memset(buf, 0xcc, sizeof(buf));
				p = buf;
				for (int i = 0; i < cnt; i++) {
					iov[i].iov_base = p;
					iov[i].iov_len = lens[i];
					p += lens[i] + 1; /* one gap byte after each */
				}
				size_t li = 0;
				for (int i = 0; i < cnt; i++)
					for (size_t k = 0; k < lens[i]; k++)
						((uint8_t *)iov[i].iov_base)[k] = src[li++];
				uls_ring_copy_in(&t.r, pos, iov, cnt, skip, len);
				for (size_t k = 0; k < len; k++)
					t.image[(pos + k) % size] = src[skip + k];
				check_image(&t);
				/* Out: only logical bytes [skip, skip + len) change. */
				memset(buf, 0xcc, sizeof(buf));
				uls_ring_copy_out(&t.r, pos, iov, cnt, skip, len);
				li = 0;
				for (int i = 0; i < cnt; i++) {
					const uint8_t *b = iov[i].iov_base;
					for (size_t k = 0; k < lens[i]; k++, li++) {
						uint8_t want = li >= skip && li < skip + len
								       ? src[li]
								       : 0xcc;
						CHECK_INT(b[k], ==, want);
					}
					CHECK_INT(b[lens[i]], ==, 0xcc); /* the gap byte */
				}
			}
		}
	}
	/* A skip past every iovec with nothing to copy is a no-op. */
	check_context("skip past end");
	uls_ring_copy_out(&t.r, 0, iov, cnt, 100, 0);
	uls_ring_copy_in(&t.r, 0, iov, cnt, 100, 0);
	check_image(&t);
	/* No iovecs at all. */
	uls_ring_copy_out(&t.r, 5, NULL, 0, 0, 0);
	uls_ring_copy_in(&t.r, 5, NULL, 0, 0, 0);
	check_image(&t);
	tring_fini(&t);
}

/* A whole ring in one copy, at every data offset of a small ring's edges. */
static void test_full_copies(void)
{
	const uint64_t size = ULS_RING_MIN;
	uint8_t *src = malloc(size), *dst = malloc(size + 1);
	struct tring t;

	CHECK(src && dst);
	tring_init(&t, size);
	for (uint64_t i = 0; i < size; i++)
		src[i] = (uint8_t)(i ^ (i >> 8));
	const uint64_t starts[] = {0, 1, size / 2, size - 1, UINT64_MAX - size + 1,
				   UINT64_MAX - 1, UINT64_MAX, (1ull << 63) - 3};
	for (size_t s = 0; s < sizeof(starts) / sizeof(starts[0]); s++) {
		uint64_t pos = starts[s];
		struct iovec in = {.iov_base = src, .iov_len = size};
		struct iovec out = {.iov_base = dst, .iov_len = size};

		check_context("full copy at %#llx", (unsigned long long)pos);
		set_pos(&t, pos, pos);
		CHECK_INT(uls_ring_writable(&t.r, pos), ==, (int64_t)size);
		uls_ring_copy_in(&t.r, pos, &in, 1, 0, size);
		atomic_store_explicit(&t.sh->prod.tail, pos + size, memory_order_release);
		for (uint64_t i = 0; i < size; i++)
			t.image[(pos + i) % size] = src[i];
		check_image(&t);
		/* Full, and distinguishable from empty. */
		CHECK_INT(uls_ring_readable(&t.r, pos), ==, (int64_t)size);
		CHECK_INT(uls_ring_writable(&t.r, pos + size), ==, 0);
		dst[size] = 0x77;
		uls_ring_copy_out(&t.r, pos, &out, 1, 0, size);
		CHECK_MEM(dst, src, size);
		CHECK_INT(dst[size], ==, 0x77);
		atomic_store_explicit(&t.sh->cons.head, pos + size, memory_order_release);
		CHECK_INT(uls_ring_readable(&t.r, pos + size), ==, 0);
		CHECK_INT(uls_ring_writable(&t.r, pos + size), ==, (int64_t)size);
	}
	tring_fini(&t);
	free(src);
	free(dst);
}

/* A copy never writes past the iovecs it was given, even asked for more. */
static void test_short_iovecs(void)
{
	const uint64_t size = ULS_RING_MIN;
	struct tring t;
	uint8_t buf[32];
	struct iovec iov[2] = {{.iov_base = buf, .iov_len = 4},
			       {.iov_base = buf + 8, .iov_len = 6}};

	check_context("short iovecs");
	tring_init(&t, size);
	for (uint64_t i = 0; i < size; i++)
		t.image[i] = t.r.data[i] = (uint8_t)i;
	memset(buf, 0xcc, sizeof(buf));
	uls_ring_copy_out(&t.r, size - 3, iov, 2, 1, 100);
	CHECK_INT(buf[0], ==, 0xcc);
	CHECK_INT(buf[1], ==, (uint8_t)(size - 3));
	CHECK_INT(buf[3], ==, (uint8_t)(size - 1));
	CHECK_INT(buf[4], ==, 0xcc);
	CHECK_INT(buf[8], ==, 0);
	CHECK_INT(buf[13], ==, 5);
	for (size_t i = 14; i < sizeof(buf); i++)
		CHECK_INT(buf[i], ==, 0xcc);
	uls_ring_copy_in(&t.r, size - 2, iov, 2, 0, 100);
	t.image[size - 2] = 0xcc;
	t.image[size - 1] = (uint8_t)(size - 3);
	t.image[0] = (uint8_t)(size - 2);
	t.image[1] = (uint8_t)(size - 1);
	for (int i = 0; i < 6; i++)
		t.image[2 + i] = buf[8 + i];
	check_image(&t);
	tring_fini(&t);
}

int main(int argc, char **argv)
{
	const uint64_t sizes[] = {ULS_RING_MIN, 8192, 1u << 16};
	const uint64_t heads[] = {0, 1, 4095, (1ull << 63) - 1, 1ull << 63, UINT64_MAX - 4096,
				  UINT64_MAX - 1, UINT64_MAX};
	uint64_t seed0 = argc > 1 ? strtoull(argv[1], NULL, 0) : 0x5eed0001;

	test_dist();
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		for (size_t h = 0; h < sizeof(heads) / sizeof(heads[0]); h++) {
			test_bounds(sizes[s], heads[h]);
			test_hostile(sizes[s], heads[h]);
		}
	}
	test_skip_cases();
	test_full_copies();
	test_short_iovecs();
	/* Many random operations per seed, with starts that cross UINT64_MAX early. */
	for (int i = 0; i < 24; i++) {
		uint64_t seed = seed0 + (uint64_t)i * 0x1000193, rng = seed;
		uint64_t size = sizes[i % 3], start;

		switch (i % 4) {
		case 0:
			start = 0;
			break;
		case 1:
			start = UINT64_MAX - size / 2;
			break;
		case 2:
			start = UINT64_MAX - 3 * size - 17;
			break;
		default:
			start = check_rand(&rng);
			break;
		}
		test_model(size, start, seed, (size > 8192 ? 1500 : 4000) / SLOW_BUILD);
	}
	check_context("%s", "");
	return CHECK_PASS;
}
