/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for what a client reads from its own segment that its server writes
 * (docs/protocol.md, sections 3 to 8): the server's side (its state with ATTACHED,
 * DECLINED, CLOSED and RESET, cookie, wake-up counts and token flags, the revert words),
 * the S2C ring's producer positions and bytes and the C2S ring's consumer words. The
 * client is the core's own (uls_conn_connect_prepare, connect, uls_conn_connect_done, the
 * shm transport's calls, uls_conn_close), the server this harness (fuzz_server_peer.c).
 *
 * Input layout (little-endian):
 *   u8  flags      bits 0-1: C2S ring size, 4 KiB << (v % 3); bits 2-3: S2C, the same
 *   then 9-byte operations of fuzz_server_peer.c
 *
 * While the server is honest, the client's receives return exactly the server's stream:
 * TCP data of a server that never attached, the ring after an attach, TCP after a revert,
 * never a wake-up byte. Whatever the server writes, the client writes nothing of the
 * server's, every non-blocking call returns, a protocol break is ECONNRESET from then on
 * and never a crash, and the close is bounded.
 */
#include "fuzz_server_peer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fzc f;

	if (size < 1)
		return 0;
	uint64_t c2s = (uint64_t)ULS_RING_MIN << ((data[0] & 3) % 3);
	uint64_t s2c = (uint64_t)ULS_RING_MIN << (((data[0] >> 2) & 3) % 3);
	if (fzc_open(&f, c2s, s2c) == 0)
		fzc_run(&f, data + 1, size - 1);
	fzc_close(&f);
	return 0;
}
