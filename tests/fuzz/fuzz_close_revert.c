/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the control words a client writes that its server reads while
 * the connection runs, moves back to kernel TCP and closes (docs/protocol.md, sections 4,
 * 6 and 8): its state, switch position, wake-up counts and token flags, the revert
 * request, ring end and TCP position, its ring positions and flags. The segment's
 * identity is always valid and the server's side begins zeroed, as a client leaves them,
 * so every input attaches and the whole stream model of fuzz_conn.c holds.
 *
 * Input layout (little-endian):
 *   u8  flags      bits 0-1: C2S ring size, 4 KiB << (v % 3); bits 2-3: S2C, the same
 *   u8  pre        bytes the client sends on TCP before the accept
 *   u16 lines_len  bytes that follow, written at offset 128 of the segment (the sides,
 *                  the ring positions and the offer word, up to offset 1088; the
 *                  server's side is then cleared)
 *   lines_len bytes
 *   then 9-byte operations of fuzz_conn.c
 *
 * Besides what fuzz_conn.c checks after each operation, the close must mark the server's
 * side CLOSED (RESET where ring bytes were left unread), end both rings, leave the client's
 * words alone, remove the file's name once the client said it closed and keep it while
 * the client's socket lives and said nothing, and take at most its bounded wait.
 */
#include "fuzz_conn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A header page with a valid identity for these ring sizes, the lines from the input. */
static void make_image(uint8_t *img, const uint8_t *lines, size_t len, uint64_t c2s,
		       uint64_t s2c)
{
	struct uls_seg_ident id = {
		.magic = ULS_SEG_MAGIC,
		.version = ULS_SEG_VERSION,
		.hdr_size = ULS_SEG_HDR_SIZE,
		.total_size = ULS_SEG_HDR_SIZE + c2s + s2c,
		.ring_off = {ULS_SEG_HDR_SIZE, ULS_SEG_HDR_SIZE + c2s},
		.ring_size = {c2s, s2c},
		.client_uid = (uint32_t)getuid(),
		.client_pid = (uint32_t)getpid(),
	};
	size_t room = sizeof(struct uls_seg_hdr) - sizeof(id);

	memset(img, 0, ULS_SEG_HDR_SIZE);
	memcpy(img, &id, sizeof(id));
	memcpy(img + sizeof(id), lines, len < room ? len : room);
	memset(img + offsetof(struct uls_seg_hdr, side[ULS_SIDE_SERVER]), 0,
	       sizeof(struct uls_side));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t img[ULS_SEG_HDR_SIZE];
	struct fz f;

	if (size < 4)
		return 0;
	uint64_t c2s = (uint64_t)ULS_RING_MIN << ((data[0] & 3) % 3);
	uint64_t s2c = (uint64_t)ULS_RING_MIN << (((data[0] >> 2) & 3) % 3);
	size_t len = (size_t)fuzz_le(data + 2, 2);
	if (len > size - 4)
		len = size - 4;
	make_image(img, data + 4, len, c2s, s2c);
	if (fz_open(&f, img, sizeof(img), ULS_SEG_HDR_SIZE + c2s + s2c,
		    FUZZ_PATCH_INO | FUZZ_PATCH_COOKIE, data[1]) == 0) {
		fz_attach(&f);
		fz_run(&f, data + 4 + len, size - 4 - len);
	}
	fz_close(&f);
	return 0;
}
