/* SPDX-License-Identifier: MIT */
#include "ring.h"

#include <errno.h>
#include <string.h>

void uls_ring_init(struct uls_ring *r, struct uls_ring_shared *sh, uint8_t *data, uint64_t size)
{
	r->sh = sh;
	r->data = data;
	r->size = size;
	r->mask = size - 1;
}

int64_t uls_ring_readable(const struct uls_ring *r, uint64_t head)
{
	/* Acquire: the bytes before tail were written before the producer published it. */
	uint64_t tail = atomic_load_explicit(&r->sh->prod.tail, memory_order_acquire);
	uint64_t d = uls_ring_dist(head, tail);

	if (d > r->size)
		return -EPROTO;
	return (int64_t)d;
}

int64_t uls_ring_writable(const struct uls_ring *r, uint64_t tail)
{
	/* Acquire: the consumer finished reading the bytes before head before publishing it. */
	uint64_t head = atomic_load_explicit(&r->sh->cons.head, memory_order_acquire);
	uint64_t used = uls_ring_dist(head, tail);

	if (used > r->size)
		return -EPROTO;
	return (int64_t)(r->size - used);
}

int64_t uls_ring_space_reload(const struct uls_ring *r, uint64_t tail, uint64_t *seen)
{
	/* Acquire, as in uls_ring_writable. */
	uint64_t head = atomic_load_explicit(&r->sh->cons.head, memory_order_acquire);
	uint64_t used = uls_ring_dist(head, tail);
	if (used > r->size)
		return -EPROTO;
	*seen = head;
	return (int64_t)(r->size - used);
}

/* Calls fn on each contiguous piece of [pos, pos + len) in the ring. */
#define RING_SPANS(r, pos, len, fn)                                                        \
	do {                                                                               \
		uint64_t off_ = (pos) & (r)->mask;                                         \
		size_t first_ = (size_t)((r)->size - off_);                                \
		if (first_ > (len))                                                        \
			first_ = (len);                                                    \
		fn((r)->data + off_, first_, 0);                                           \
		if ((len) > first_)                                                        \
			fn((r)->data, (len) - first_, first_);                             \
	} while (0)

struct iov_cursor {
	const struct iovec *iov;
	int iovcnt;
	int i;
	size_t off;
};

static void cursor_init(struct iov_cursor *c, const struct iovec *iov, int iovcnt, size_t skip)
{
	c->iov = iov;
	c->iovcnt = iovcnt;
	c->i = 0;
	c->off = skip;
	while (c->i < iovcnt && c->off >= iov[c->i].iov_len) {
		c->off -= iov[c->i].iov_len;
		c->i++;
	}
}

/* Moves n bytes between ring memory and the iovecs, in the direction `out`. */
static void cursor_xfer(struct iov_cursor *c, uint8_t *ring, size_t n, int out)
{
	while (n > 0 && c->i < c->iovcnt) {
		size_t room = c->iov[c->i].iov_len - c->off;
		size_t k = room < n ? room : n;
		uint8_t *user = (uint8_t *)c->iov[c->i].iov_base + c->off;

		if (out)
			memcpy(user, ring, k);
		else
			memcpy(ring, user, k);
		ring += k;
		n -= k;
		c->off += k;
		if (c->off == c->iov[c->i].iov_len) {
			c->i++;
			c->off = 0;
		}
	}
}

/* Bytes of a single iovec after skip. */
static inline size_t iov_room(const struct iovec *iov, size_t skip)
{
	return skip < iov[0].iov_len ? iov[0].iov_len - skip : 0;
}

void uls_ring_copy_out(const struct uls_ring *r, uint64_t pos, const struct iovec *iov,
		       int iovcnt, size_t skip, size_t len)
{
	struct iov_cursor c;

	if (iovcnt == 1) { /* read, recv: no cursor; never past the buffer, as with one */
		uint8_t *d = (uint8_t *)iov[0].iov_base + skip;
		if (len > iov_room(iov, skip))
			len = iov_room(iov, skip);
#define GET_SPAN(p, n, at) memcpy(d + (at), (p), (n))
		RING_SPANS(r, pos, len, GET_SPAN);
#undef GET_SPAN
		return;
	}
	cursor_init(&c, iov, iovcnt, skip);
#define OUT_SPAN(p, n, at) cursor_xfer(&c, (p), (n), 1)
	RING_SPANS(r, pos, len, OUT_SPAN);
#undef OUT_SPAN
}

void uls_ring_copy_in(struct uls_ring *r, uint64_t pos, const struct iovec *iov, int iovcnt,
		      size_t skip, size_t len)
{
	struct iov_cursor c;

	if (iovcnt == 1) { /* write, send: no cursor (the caller's len fits the buffer) */
		uls_ring_put(r, pos, (const uint8_t *)iov[0].iov_base + skip, len);
		return;
	}
	cursor_init(&c, iov, iovcnt, skip);
#define IN_SPAN(p, n, at) cursor_xfer(&c, (p), (n), 0)
	RING_SPANS(r, pos, len, IN_SPAN);
#undef IN_SPAN
}

void uls_ring_put(struct uls_ring *r, uint64_t pos, const void *src, size_t len)
{
	const uint8_t *s = src;
#define PUT_SPAN(p, n, at) memcpy((p), s + (at), (n))
	RING_SPANS(r, pos, len, PUT_SPAN);
#undef PUT_SPAN
}
