/* SPDX-License-Identifier: MIT */
/*
 * What the fuzz targets of the shared-memory transport share: the assertion that reports
 * a broken invariant, the input's little-endian fields, and the segment file a client
 * leaves in /dev/shm, written from the fuzzer's image, with what uls_seg_open promises
 * about a mapping it accepts (docs/protocol.md, sections 2 and 7).
 *
 * gen_corpus.py writes the images: the asserts below fail the build when the layout moves
 * from under it, instead of leaving seeds that no longer validate.
 */
#ifndef ULS_FUZZ_SHM_H
#define ULS_FUZZ_SHM_H

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport/shm/segment.h"

/* A broken invariant aborts, which libFuzzer reports with the input that broke it. */
#define FUZZ_ASSERT(c)                                                                     \
	do {                                                                               \
		if (!(c)) {                                                                \
			fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__,         \
				__LINE__, #c);                                             \
			abort();                                                           \
		}                                                                          \
	} while (0)

/* gen_corpus.py: MAGIC, VERSION, HDR, IDENT_SIZE, SIDE_SIZE, RING_HDR, RINGS_OFF. */
_Static_assert(ULS_SEG_MAGIC == 0x0031474553534c55ULL && ULS_SEG_VERSION == 5,
	       "seed layout: magic and version");
_Static_assert(ULS_SEG_HDR_SIZE == 4096 && sizeof(struct uls_seg_ident) == 128,
	       "seed layout: header page and identity");
_Static_assert(offsetof(struct uls_seg_hdr, side) == 128 && sizeof(struct uls_side) == 192,
	       "seed layout: sides");
_Static_assert(offsetof(struct uls_seg_hdr, ring) == 512 &&
		       sizeof(struct uls_ring_shared) == 256,
	       "seed layout: ring positions");
_Static_assert(offsetof(struct uls_seg_hdr, both.offer) == 1024 &&
		       sizeof(struct uls_seg_hdr) == 1088,
	       "seed layout: both sides' line");
_Static_assert(offsetof(struct uls_seg_ident, client_ino) == 56 &&
		       offsetof(struct uls_seg_ident, client_cookie) == 64,
	       "seed layout: identity");

/* The largest segment file uls_seg_open maps. */
#define FUZZ_SEG_MAX (2ull * ULS_RING_MAX + ULS_SEG_HDR_SIZE)

/*
 * Stamp the kernel's inode and cookie of the client socket into the image; with the
 * inode, this process's pid as client_pid, so that the sweep of another ulsock process
 * of this user (uls_seg_sweep) leaves the file alone.
 */
#define FUZZ_PATCH_INO 1
#define FUZZ_PATCH_COOKIE 2

static inline uint64_t fuzz_le(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/*
 * Writes the image (at most two pages of it) as the segment file at path, cut or extended
 * to file_size, with the inode and cookie stamped in where patch says. Returns 0 or -1.
 */
static inline int fuzz_seg_write(const char *path, const uint8_t *image, size_t len,
				 uint64_t file_size, uint64_t ino, uint64_t cookie, int patch)
{
	uint8_t page[ULS_SEG_HDR_SIZE * 2];
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);

	if (fd < 0)
		return -1;
	if (len > sizeof(page))
		len = sizeof(page);
	memcpy(page, image, len);
	if ((patch & FUZZ_PATCH_INO) && len >= offsetof(struct uls_seg_ident, client_pid) + 4) {
		uint32_t pid = (uint32_t)getpid();
		memcpy(page + offsetof(struct uls_seg_ident, client_ino), &ino, 8);
		memcpy(page + offsetof(struct uls_seg_ident, client_pid), &pid, 4);
	} else if ((patch & FUZZ_PATCH_INO) &&
		   len >= offsetof(struct uls_seg_ident, client_ino) + 8) {
		memcpy(page + offsetof(struct uls_seg_ident, client_ino), &ino, 8);
	}
	if ((patch & FUZZ_PATCH_COOKIE) &&
	    len >= offsetof(struct uls_seg_ident, client_cookie) + 8)
		memcpy(page + offsetof(struct uls_seg_ident, client_cookie), &cookie, 8);
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

/*
 * The rules of docs/protocol.md, section 7, for an identity, stated independently of
 * segment.c: the one a server may accept for a file of file_size bytes named after the
 * client socket (ino, cookie).
 */
static inline int fuzz_ident_valid(const struct uls_seg_ident *id, uint64_t ino,
				   uint64_t cookie, uint64_t file_size)
{
	uint64_t c2s = id->ring_size[ULS_C2S], s2c = id->ring_size[ULS_S2C];

	return id->magic == ULS_SEG_MAGIC && id->version == ULS_SEG_VERSION &&
	       id->hdr_size == ULS_SEG_HDR_SIZE && uls_ring_size_valid(c2s) &&
	       uls_ring_size_valid(s2c) && id->total_size == ULS_SEG_HDR_SIZE + c2s + s2c &&
	       file_size == id->total_size && id->ring_off[ULS_C2S] == ULS_SEG_HDR_SIZE &&
	       id->ring_off[ULS_S2C] == ULS_SEG_HDR_SIZE + c2s && id->client_ino == ino &&
	       id->client_cookie == cookie;
}

/* What uls_seg_open promised: a mapping laid out as this process computes it. */
static inline void fuzz_seg_check_layout(const struct uls_seg *seg, uint64_t file_size,
					 uint64_t ino, uint64_t cookie)
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
	FUZZ_ASSERT(seg->hdr->id.client_ino == ino);
	FUZZ_ASSERT(seg->hdr->id.client_cookie == cookie);
}

#endif
