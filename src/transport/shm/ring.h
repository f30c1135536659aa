/* SPDX-License-Identifier: MIT */
/*
 * One direction of a connection: a single-producer, single-consumer byte ring in shared
 * memory. Positions are free-running 64-bit byte counters; the data offset of a position is
 * (pos & mask). The producer owns `tail`, the consumer owns `head`.
 *
 * Everything in struct uls_ring_shared can be written by the peer process, so the helpers
 * below never use a shared value to address memory: the size and mask come from the
 * process-local struct uls_ring, validated once when the segment was mapped, and every
 * distance read from shared memory is checked against the size before use.
 */
#ifndef ULS_RING_H
#define ULS_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "shm_abi.h"

/* Process-local view of one ring: trusted. */
struct uls_ring {
	struct uls_ring_shared *sh;
	uint8_t *data;
	uint64_t size; /* power of two */
	uint64_t mask;
};

#define ULS_RING_MIN (4u << 10)
#define ULS_RING_MAX (64u << 20)

static inline int uls_ring_size_valid(uint64_t size)
{
	return size >= ULS_RING_MIN && size <= ULS_RING_MAX && (size & (size - 1)) == 0;
}

/* Bytes between two positions, or UINT64_MAX when `later` is behind `earlier`. */
static inline uint64_t uls_ring_dist(uint64_t earlier, uint64_t later)
{
	uint64_t d = later - earlier;
	return (int64_t)d < 0 ? UINT64_MAX : d;
}

void uls_ring_init(struct uls_ring *r, struct uls_ring_shared *sh, uint8_t *data, uint64_t size);

/*
 * Consumer side. Returns the number of readable bytes at `head`, or -EPROTO when the
 * producer's tail is impossible (behind head or more than a ring ahead).
 */
int64_t uls_ring_readable(const struct uls_ring *r, uint64_t head);

/* Producer side: free bytes at `tail`, or -EPROTO when the consumer's head is impossible. */
int64_t uls_ring_writable(const struct uls_ring *r, uint64_t tail);

/*
 * Producer side with the consumer's head cached in *seen: free bytes at `tail`. The shared
 * head (a line the consumer keeps writing) is read again only when the cached one leaves
 * fewer than `want` bytes. A cached head is never ahead of the real one, so the answer is
 * never more than the truth.
 */
int64_t uls_ring_space_reload(const struct uls_ring *r, uint64_t tail, uint64_t *seen);

static inline int64_t uls_ring_space_cached(const struct uls_ring *r, uint64_t tail,
					    uint64_t *seen, uint64_t want)
{
	uint64_t used = uls_ring_dist(*seen, tail);

	if (used <= r->size && r->size - used >= want)
		return (int64_t)(r->size - used);
	return uls_ring_space_reload(r, tail, seen);
}

/*
 * Producer: how far past its new tail a send asks for a line in writable state, and the
 * request. The consumer's reads (and its hardware prefetcher running ahead of them) leave
 * copies of the free lines in its cache; a store into such a line waits for the peer's
 * copy to be invalidated, and the program's next loads of its own freshly written buffer
 * (the next message) wait behind that store. Two lines ahead was best for 64-byte sends
 * (docs/PERFORMANCE.md); further ahead the consumer's prefetcher takes the line back.
 */
#define ULS_RING_PREFETCH 128u

static inline void uls_ring_prefetch_write(const struct uls_ring *r, uint64_t pos)
{
#if defined(__x86_64__)
	/* PREFETCHW (0F 0D /1): a no-op on the x86-64 processors that lack it. */
	__asm__ volatile("prefetchw %0" : : "m"(r->data[pos & r->mask]));
#else
	__builtin_prefetch(&r->data[pos & r->mask], 1, 3);
#endif
}

/* Copies `len` bytes at position `pos` out of the ring into an iovec array, skipping `skip`
 * bytes of the iovecs first. The caller has checked len against uls_ring_readable. */
void uls_ring_copy_out(const struct uls_ring *r, uint64_t pos, const struct iovec *iov,
		       int iovcnt, size_t skip, size_t len);

/* Copies `len` bytes from an iovec array (after `skip` bytes) into the ring at `pos`. */
void uls_ring_copy_in(struct uls_ring *r, uint64_t pos, const struct iovec *iov, int iovcnt,
		      size_t skip, size_t len);

/* Copies `len` bytes of plain memory into the ring at `pos`. */
void uls_ring_put(struct uls_ring *r, uint64_t pos, const void *src, size_t len);

#endif
