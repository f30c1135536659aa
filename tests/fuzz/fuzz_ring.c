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
#include <stdatomic.h>
#include <sys/uio.h>

#include "core/config.h"
#include "fuzz_shm.h"
#include "os/libc.h"

#define FUZZ_COOKIE 0x1122334455667788ull
#define MAX_FILE (FUZZ_SEG_MAX + ULS_SEG_HDR_SIZE)
#define MAX_COPY 8192 /* bytes per operation, so that one input stays fast */
#define OP_SIZE 9

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
		run_op(rings[(op >> 3) % nrings], op, fuzz_le(ops + i + 1, 8));
	}
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
	size_t image_len = (size_t)fuzz_le(data + 2, 2);
	uint64_t file_size = fuzz_le(data + 4, 4) % (MAX_FILE + 1);
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
	if (fuzz_seg_write(fuzz_path, image, image_len, file_size, fuzz_ino, FUZZ_COOKIE,
			   flags & (FUZZ_PATCH_INO | FUZZ_PATCH_COOKIE)) == 0) {
		int err = uls_seg_open(&seg, fuzz_ino, FUZZ_COOKIE);
		FUZZ_ASSERT(err <= 0);
		if (err == 0) {
			fuzz_seg_check_layout(&seg, file_size, fuzz_ino, FUZZ_COOKIE);
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
