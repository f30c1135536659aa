/* SPDX-License-Identifier: MIT */
/*
 * The harness of fuzz_client: the core's client end of a real loopback connection (the
 * code under test, made as tests/unit/conn_pair.h's pair_connect makes it), and a server
 * that this harness plays itself: it accepts the TCP connection plainly and writes what a
 * server may write in the client's segment file (the server's side, the S2C ring's
 * producer words and bytes, the C2S ring's consumer words) and on TCP, honestly or any
 * word to any value (fuzz_server_peer.c). docs/protocol.md, sections 2 to 8, is what is
 * checked.
 *
 * What the harness never writes (the server's lock words, its token_readers) only delays a
 * call of the client by a bound the protocol states (100 ms, 5 s); they stay zero so that
 * an input stays fast.
 */
#ifndef ULS_FUZZ_SERVER_PEER_H
#define ULS_FUZZ_SERVER_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "fuzz_shm.h"

struct uls_conn;

/* One operation: u8 op, u64 value (little-endian). */
#define FZC_OP_SIZE 9

struct fzc {
	int cfd, sfd;          /* the client's socket (the core's), the server's (plain) */
	struct uls_conn *c;    /* the client's conn: the code under test */
	char path[96];         /* the segment file the client made */
	struct uls_seg_hdr *h; /* the server's mapping of it (the harness's own) */
	size_t map_size;
	uint64_t size[2];
	uint8_t *data[2];
	uint64_t c2s_base; /* C2S position of the client's first ring byte */
	/* The server: attached (declined), sent data on TCP before that, its FIN. */
	int attached, declined, plain, s_fin;
	int honest;      /* the server wrote only what an honest one writes */
	int data_only;   /* it never said ATTACHED and sent only data on TCP */
	uint64_t s_pos;  /* the server's stream: bytes it put on TCP or S2C (less resent) */
	uint64_t s_took; /* TCP bytes the server read */
	uint64_t s_tcp;  /* TCP bytes the server sent (data and wake-ups) */
	int c_fin;       /* the server read the client's FIN */
	int s_reset;     /* it closed with C2S bytes unread: a reset */
	int s_closed;    /* it closed: it reads nothing more, the kernel drops what comes */
	/* The client: bytes its receives returned, bytes it sent; its shutdown, revert. */
	uint64_t c_got, c_sent;
	int shut_rd, reverted;
	/* What only the server may write, as it last wrote it. */
	uint8_t srv[sizeof(struct uls_seg_hdr)];
};

/* libFuzzer's set-up: the core as the interposer sets it up, and a loopback listener. */
int LLVMFuzzerInitialize(int *argc, char ***argv);

/*
 * A fresh connection: the client's conn with rings of these sizes asked as its socket
 * buffers, the server's accept, the server's mapping of the segment. Returns 0, or -1
 * when there is no segment to play with (fzc_close cleans up either way).
 */
int fzc_open(struct fzc *f, uint64_t c2s, uint64_t s2c);

/* Runs the operations (FZC_OP_SIZE bytes each) that fuzz_server_peer.c describes. */
void fzc_run(struct fzc *f, const uint8_t *ops, size_t len);

/* The client's close, bounded, then everything of the input goes. */
void fzc_close(struct fzc *f);

/* Records the server's words as it wrote them. */
void fzc_snap(struct fzc *f);

/* FZ_TRACE=1: each operation and its result on stderr. */
extern int fzc_trace;

#endif
