/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for what a server reads from a client's segment when it attaches:
 * the identity, both sides' lines and the ring positions as the client left them
 * (docs/protocol.md, sections 2, 3 and 7), through the core's own accept
 * (uls_conn_accept: sock_diag, uls_seg_open_as, the shm transport's attach) on a real
 * loopback connection, then the server's first calls on what it attached to (fuzz_conn.c).
 *
 * Input layout (little-endian):
 *   u8  flags      bit 0: stamp the client socket's inode into client_ino
 *                  bit 1: stamp its cookie into client_cookie
 *   u8  pre        bytes the client sends on TCP before the accept
 *   u16 image_len  bytes of segment image that follow (at most two pages are used)
 *   u32 file_size  the segment file is cut or extended to this (mod FUZZ_SEG_MAX + 4097)
 *   image_len bytes: written at offset 0 of the segment file
 *   then 9-byte operations of fuzz_conn.c
 *
 * The attach must take the segment exactly when the identity is what section 7 asks
 * (fuzz_ident_valid), map it as the server computes the layout, write nothing but its
 * own side, which it starts afresh whatever the client left there (a rejected file not
 * a byte), and decline a client that is back on TCP already. Then the operations run
 * with the checks of fuzz_conn.c, and the close is checked.
 */
#include "fuzz_conn.h"

#define MAX_FILE (FUZZ_SEG_MAX + ULS_SEG_HDR_SIZE)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f;

	if (size < 8)
		return 0;
	size_t image_len = (size_t)fuzz_le(data + 2, 2);
	uint64_t file_size = fuzz_le(data + 4, 4) % (MAX_FILE + 1);
	if (image_len > size - 8)
		image_len = size - 8;
	if (fz_open(&f, data + 8, image_len, file_size, data[0] & 3, data[1]) == 0) {
		fz_attach(&f);
		fz_run(&f, data + 8 + image_len, size - 8 - image_len);
	}
	fz_close(&f);
	return 0;
}
