/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for everything a peer can write that the receive path reads: the
 * segment file a client leaves in /dev/shm, and the ring positions it moves afterwards.
 *
 * Input layout (little-endian):
 *   u8  flags      bit 0: stamp this process's inode name into client_ino
 *                  bit 1: stamp the expected cookie into client_cookie
 *                  bits 4-6: size of the process-local ring, 4 KiB << (v % 5)
 *   u8  unused
 *   u16 image_len  bytes of segment image that follow
 *   u32 file_size  the segment file is cut or extended to this (mod MAX_FILE + 1)
 *   image_len bytes: written at offset 0 of the segment file
 *   then 9-byte operations: u8 op, u64 v, on one of the rings (see run_op)
 *
 * (a) The image goes through uls_seg_open. It must never crash; when it validates, the
 *     mapping must match the layout, and both rings are read from the positions the image
 *     holds, then driven by the operations.
 * (b) The operations always also drive a process-local ring whose data is a malloc block
 *     of exactly its size, so AddressSanitizer sees any copy that leaves it: legitimate
 *     reads and writes interleaved with hostile head/tail values from the "peer".
 * After every step the ring helpers must agree with an independent oracle.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/config.h"
#include "transport/shm/ring.h"
#include "os/libc.h"
#include "transport/shm/segment.h"

#define FUZZ_COOKIE 0x1122334455667788ull
#define MAX_FILE (2ull * ULS_RING_MAX + 2 * ULS_SEG_HDR_SIZE)
#define MAX_COPY 8192 /* bytes per operation, so that one input stays fast */
#define OP_SIZE 9

/* gen_corpus.py writes seed images with this layout. */
_Static_assert(offsetof(struct uls_seg_hdr, ring) == 512, "seed layout: ring positions");
_Static_assert(offsetof(struct uls_seg_ident, client_ino) == 56, "seed layout: identity");

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(c)                                                                     \
	do {                                                                               \
		if (!(c)) {                                                                \
			fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__,         \
				__LINE__, #c);                                             \
			abort();                                                           \
		}                                                                          \
	} while (0)

static uint64_t fuzz_ino;
static char fuzz_path[96];

static void remove_file(void)
{
	unlink(fuzz_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	uls_libc_init();
	uls_config_load();
	fuzz_ino = 0x7e59000000000000ull | (uint64_t)getpid();
	uls_seg_path(fuzz_path, sizeof(fuzz_path), fuzz_ino);
	atexit(remove_file);
	return 0;
}

static uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* The oracle: what readable/writable must return for these positions. */
static int64_t expect_space(uint64_t earlier, uint64_t later, uint64_t size, int free_space)
{
	uint64_t d = later - earlier;

	if (d > size) /* also every "negative" distance */
		return -EPROTO;
	return free_space ? (int64_t)(size - d) : (int64_t)d;
}

/* Up to three iovecs over buf (n bytes after skip), split where v says. */
static int make_iov(struct iovec *iov, uint8_t *buf, size_t skip, size_t n, uint64_t v)
{
	size_t total = skip + n;
	size_t a = total ? (size_t)(v % (total + 1)) : 0;
	size_t b = total - a ? (size_t)((v >> 20) % (total - a + 1)) : 0;

	iov[0] = (struct iovec){.iov_base = buf, .iov_len = a};
	iov[1] = (struct iovec){.iov_base = buf + a, .iov_len = b};
	iov[2] = (struct iovec){.iov_base = buf + a + b, .iov_len = total - a - b};
	return 3;
}

/* A consumer's read at its current head, as ring_recv does it. */
static void legit_read(struct uls_ring *r, uint64_t v, int peek)
{
	uint64_t head = atomic_load_explicit(&r->sh->cons.head, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&r->sh->prod.tail, memory_order_relaxed);
	int64_t a = uls_ring_readable(r, head);
	struct iovec iov[3];

	FUZZ_ASSERT(a == expect_space(head, tail, r->size, 0));
	if (a <= 0)
		return;
	size_t n = (size_t)a < (size_t)(v & (MAX_COPY - 1)) + 1 ? (size_t)a
								 : (size_t)(v & (MAX_COPY - 1)) + 1;
	size_t skip = (size_t)(v >> 13) & 7;
	/* Exactly skip + n bytes: a copy past the iovecs is a heap overflow. */
	uint8_t *buf = malloc(skip + n);
	FUZZ_ASSERT(buf != NULL);
	uls_ring_copy_out(r, head, iov, make_iov(iov, buf, skip, n, v >> 16), skip, n);
	/* The copy equals the ring's bytes at those positions. */
	for (size_t i = 0; i < n; i += 1 + (i >> 4))
		FUZZ_ASSERT(buf[skip + i] == r->data[(head + i) % r->size]);
	free(buf);
	if (!peek)
		atomic_store_explicit(&r->sh->cons.head, head + n, memory_order_release);
}

/* A producer's write at its current tail, as ring_send does it. */
static void legit_write(struct uls_ring *r, uint64_t v, int plain)
{
	uint64_t tail = atomic_load_explicit(&r->sh->prod.tail, memory_order_relaxed);
	uint64_t head = atomic_load_explicit(&r->sh->cons.head, memory_order_relaxed);
	int64_t w = uls_ring_writable(r, tail);
	struct iovec iov[3];

	FUZZ_ASSERT(w == expect_space(head, tail, r->size, 1));
	if (w <= 0)
		return;
	size_t n = (size_t)w < (size_t)(v & (MAX_COPY - 1)) + 1 ? (size_t)w
								 : (size_t)(v & (MAX_COPY - 1)) + 1;
	size_t skip = (size_t)(v >> 13) & 7;
	uint8_t *buf = malloc(skip + n);
	FUZZ_ASSERT(buf != NULL);
	for (size_t i = 0; i < skip + n; i++)
		buf[i] = (uint8_t)(i * 31 + (v >> 40));
	if (plain)
		uls_ring_put(r, tail, buf + skip, n);
	else
		uls_ring_copy_in(r, tail, iov, make_iov(iov, buf, skip, n, v >> 16), skip, n);
	for (size_t i = 0; i < n; i += 1 + (i >> 4))
		FUZZ_ASSERT(r->data[(tail + i) % r->size] == buf[skip + i]);
	free(buf);
	atomic_store_explicit(&r->sh->prod.tail, tail + n, memory_order_release);
}

/* One operation: hostile writes of the peer's position, or a legitimate step. */
static void run_op(struct uls_ring *r, uint8_t op, uint64_t v)
{
	struct uls_ring_shared *sh = r->sh;
	uint64_t head = atomic_load(&sh->cons.head), tail = atomic_load(&sh->prod.tail);

	switch (op & 7) {
	case 0: /* the producer (peer) writes any tail */
		atomic_store(&sh->prod.tail, v);
		break;
	case 1: /* the consumer (peer) writes any head */
		atomic_store(&sh->cons.head, v);
		break;
	case 2: /* a tail near the legal boundary, either side of it */
		atomic_store(&sh->prod.tail, head + v % (4 * r->size) - 2 * r->size);
		break;
	case 3:
		atomic_store(&sh->cons.head, tail - v % (4 * r->size) + 2 * r->size);
		break;
	case 4:
		legit_read(r, v, 0);
		break;
	case 5:
		legit_write(r, v, (op >> 5) & 1);
		break;
	case 6:
		legit_read(r, v, 1);
		break;
	default: /* both positions reset, e.g. near the u64 wrap */
		atomic_store(&sh->cons.head, v);
		atomic_store(&sh->prod.tail, v + (op >> 5));
		break;
	}
	/* Both helpers agree with the oracle whatever the positions are now. */
	head = atomic_load(&sh->cons.head);
	tail = atomic_load(&sh->prod.tail);
	FUZZ_ASSERT(uls_ring_readable(r, head) == expect_space(head, tail, r->size, 0));
	FUZZ_ASSERT(uls_ring_writable(r, tail) == expect_space(head, tail, r->size, 1));
}

static void run_ops(struct uls_ring **rings, int nrings, const uint8_t *ops, size_t len)
{
	for (size_t i = 0; i + OP_SIZE <= len; i += OP_SIZE) {
		uint8_t op = ops[i];
		run_op(rings[(op >> 3) % nrings], op, get_le(ops + i + 1, 8));
	}
}

/* Writes the image as the segment file for fuzz_ino. Returns 0 or -1. */
static int write_file(const uint8_t *image, size_t len, uint64_t file_size, uint8_t flags)
{
	uint8_t page[ULS_SEG_HDR_SIZE * 2];
	int fd = open(fuzz_path, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);

	if (fd < 0)
		return -1;
	if (len > sizeof(page))
		len = sizeof(page);
	memcpy(page, image, len);
	if ((flags & 1) && len >= offsetof(struct uls_seg_ident, client_ino) + 8)
		memcpy(page + offsetof(struct uls_seg_ident, client_ino), &fuzz_ino, 8);
	if ((flags & 2) && len >= offsetof(struct uls_seg_ident, client_cookie) + 8) {
		uint64_t c = FUZZ_COOKIE;
		memcpy(page + offsetof(struct uls_seg_ident, client_cookie), &c, 8);
	}
	if (len > file_size)
		len = (size_t)file_size;
	if (ftruncate(fd, (off_t)file_size) < 0 ||
	    (len && pwrite(fd, page, len, 0) != (ssize_t)len)) {
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* What uls_seg_open promised: a mapping laid out as this process computes it. */
static void check_layout(const struct uls_seg *seg, uint64_t file_size)
{
	const uint8_t *base = (const uint8_t *)seg->hdr;
	uint64_t c2s = seg->ring[ULS_C2S].size, s2c = seg->ring[ULS_S2C].size;

	FUZZ_ASSERT(uls_ring_size_valid(c2s) && uls_ring_size_valid(s2c));
	FUZZ_ASSERT(seg->ring[ULS_C2S].mask == c2s - 1 && seg->ring[ULS_S2C].mask == s2c - 1);
	FUZZ_ASSERT(seg->map_size == file_size);
	FUZZ_ASSERT(seg->map_size == ULS_SEG_HDR_SIZE + c2s + s2c);
	FUZZ_ASSERT(seg->ring[ULS_C2S].data == base + ULS_SEG_HDR_SIZE);
	FUZZ_ASSERT(seg->ring[ULS_S2C].data == base + ULS_SEG_HDR_SIZE + c2s);
	FUZZ_ASSERT(seg->ring[ULS_C2S].sh == &seg->hdr->ring[ULS_C2S]);
	FUZZ_ASSERT(seg->ring[ULS_S2C].sh == &seg->hdr->ring[ULS_S2C]);
	FUZZ_ASSERT(seg->hdr->id.client_ino == fuzz_ino);
	FUZZ_ASSERT(seg->hdr->id.client_cookie == FUZZ_COOKIE);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct uls_ring_shared local_sh;
	struct uls_ring local, *rings[3];
	struct uls_seg seg;
	int nrings = 1;

	if (size < 8)
		return 0;
	uint8_t flags = data[0];
	size_t image_len = (size_t)get_le(data + 2, 2);
	uint64_t file_size = get_le(data + 4, 4) % (MAX_FILE + 1);
	const uint8_t *image = data + 8, *ops;
	if (image_len > size - 8)
		image_len = size - 8;
	ops = image + image_len;
	size_t ops_len = size - 8 - image_len;

	/* (b): a ring in process memory, its positions taken from the first operation. */
	uint64_t local_size = (uint64_t)ULS_RING_MIN << (((flags >> 4) & 7) % 5);
	uint8_t *local_data = malloc(local_size);
	FUZZ_ASSERT(local_data != NULL);
	memset(local_data, 0, local_size);
	memset(&local_sh, 0, sizeof(local_sh));
	uls_ring_init(&local, &local_sh, local_data, local_size);
	rings[0] = &local;

	/* (a): the image as a segment file. */
	memset(&seg, 0, sizeof(seg));
	if (write_file(image, image_len, file_size, flags) == 0) {
		int err = uls_seg_open(&seg, fuzz_ino, FUZZ_COOKIE);
		FUZZ_ASSERT(err <= 0);
		if (err == 0) {
			check_layout(&seg, file_size);
			/* Read from the positions the creator left, before anything else. */
			legit_read(&seg.ring[ULS_C2S], UINT64_MAX, 0);
			legit_read(&seg.ring[ULS_S2C], UINT64_MAX, 0);
			rings[nrings++] = &seg.ring[ULS_C2S];
			rings[nrings++] = &seg.ring[ULS_S2C];
		} else {
			FUZZ_ASSERT(seg.hdr == NULL);
		}
	}
	run_ops(rings, nrings, ops, ops_len);
	uls_seg_unmap(&seg);
	free(local_data);
	return 0;
}
