/* SPDX-License-Identifier: MIT */
/*
 * The harness of the fuzz targets that drive a whole accelerated connection: the server's
 * end is the core's own (uls_conn_accept, the shm transport's calls, uls_conn_close), the
 * client is this harness, which writes what a client may write in the segment and on TCP
 * (fuzz_conn.c: the server's side and the checks; fuzz_peer.c: the client).
 *
 * Each input gets a fresh loopback TCP connection (the client's end plainly, with
 * SO_LINGER {1, 0} so that no TIME_WAIT piles up) and writes the fuzzer's image as the
 * segment file the kernel's sock_diag answer names, with the client socket's real inode
 * and cookie stamped in where the target says. The harness maps the same file itself:
 * that mapping is the client process's view, through which the operations write the
 * client's side, its ring positions and ring bytes, and through which every check reads
 * what the server wrote. docs/protocol.md, sections 2 to 8, is what is checked.
 *
 * What the harness never writes (a held lock word, a nonzero token_readers) only delays a
 * call by a bound the protocol states (100 ms, 5 s); the harness keeps the client's lock
 * words and token_readers zero so that an input stays fast. It also plays an honest
 * client on TCP where a lie would only cost such a wait: it ends its TCP direction once its
 * side says CLOSED, and sends the bytes its revert position counts before the server
 * looks for them.
 */
#ifndef ULS_FUZZ_CONN_H
#define ULS_FUZZ_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "fuzz_shm.h"

struct uls_conn;

/* One operation: u8 op, u64 value (little-endian). */
#define FZ_OP_SIZE 9

struct fz {
	int cfd, sfd;          /* the client's plain socket, the server's */
	uint64_t ino, cookie;  /* the client socket's, as the kernel reports them */
	char path[96];         /* the segment file */
	uint64_t file_size;
	struct uls_seg_hdr *h; /* the client's mapping of the file (the harness's own) */
	int h_heap;            /* a file too short to map: h is a copy of what it holds */
	struct uls_conn *c;    /* the server's conn: the code under test */
	int shm;               /* the shm transport took the connection */
	int removed;           /* a revert removed the file's name */
	int reverted;          /* this side's revert was tried (once, as uls_conn_revert) */
	uint64_t size[2];      /* the ring sizes the attach validated */
	uint8_t *data[2];      /* the rings' data in the harness's mapping */
	/* The client's TCP direction: bytes sent (the pattern fz_tcp_byte), and its end. */
	uint64_t c_sent;
	int c_fin;
	int rx_off; /* the server shut down reading: its TCP accounting is not checked */
	/*
	 * The server's TCP direction as the client reads it: wake-up bytes until the
	 * server's revert point, then the server's bytes from its ring end on. tx_log holds
	 * every byte the server took from its sends, by S2C position from tx_base (its tail
	 * at attach).
	 */
	uint64_t s_read;
	int out_ok;       /* the model of that direction holds */
	int out_data;     /* from out_at on, it carries data from ring position out_end */
	uint64_t out_at, out_end;
	uint8_t *tx_log;
	size_t tx_len, tx_cap;
	uint64_t tx_base;
	/* What only the client may write, as it last wrote it (fz_peer_snap). */
	uint8_t peer[sizeof(struct uls_seg_hdr)];
};

/*
 * libFuzzer's set-up of a target that uses this harness (fuzz_conn.c defines it): the
 * core as the interposer sets it up, and a loopback listener.
 */
int LLVMFuzzerInitialize(int *argc, char ***argv);

/*
 * A fresh connection and its segment file: the image (len bytes, at most two pages) cut
 * or extended to file_size, the client's inode and cookie stamped in as patch says
 * (FUZZ_PATCH_*), the client's locks and token_readers cleared; then the client sends pre
 * bytes on TCP. Returns 0, or -1 when the system refused (nothing to check then).
 */
int fz_open(struct fz *f, const uint8_t *image, size_t len, uint64_t file_size, int patch,
	    unsigned pre);

/*
 * The server's accept: uls_conn_accept, which attaches when the identity holds. Checks
 * what an attach promises against the image as written: taken exactly when the identity
 * is valid (fuzz_ident_valid), declined when the client had moved back to TCP already,
 * and nothing written in the file but the server's own pid, cookie and state.
 */
void fz_attach(struct fz *f);

/* Runs the operations (FZ_OP_SIZE bytes each) that fuzz_conn.c describes, each checked. */
void fz_run(struct fz *f, const uint8_t *ops, size_t len);

/* The server's close, checked (section 6), then everything of the input goes. */
void fz_close(struct fz *f);

/* ---- inside the harness: fuzz_conn.c (the server's side) and fuzz_peer.c ---- */

#define MAX_XFER 8192  /* bytes per receive, send or ring operation */
#define MAX_TCP 2048   /* bytes per TCP send of the client */
#define MAX_FILL 65536 /* bytes the client sends so that a discard need not wait */

/* FZ_TRACE=1: each operation and its result on stderr, to follow a reproducer. */
extern int fz_trace;
#define TRACE(...) (fz_trace ? (void)fprintf(stderr, __VA_ARGS__) : (void)0)

/* The byte the client sends at TCP offset k. */
static inline uint8_t tcp_byte(uint64_t k)
{
	return (uint8_t)(0x80 | ((k * 7 + (k >> 7)) & 0x7f));
}

/* The segment's words, by offset in the header. */
#define CLI(field) offsetof(struct uls_seg_hdr, side[ULS_SIDE_CLIENT].field)
#define SRV(field) offsetof(struct uls_seg_hdr, side[ULS_SIDE_SERVER].field)
#define C2S(field) offsetof(struct uls_seg_hdr, ring[ULS_C2S].field)
#define S2C(field) offsetof(struct uls_seg_hdr, ring[ULS_S2C].field)

static inline uint64_t rd(const struct fz *f, size_t off, int width)
{
	uint64_t v = 0;

	memcpy(&v, (const uint8_t *)f->h + off, (size_t)width);
	return v;
}

static inline void wr(struct fz *f, size_t off, int width, uint64_t v)
{
	memcpy((uint8_t *)f->h + off, &v, (size_t)width);
}

#define RD64(off) rd(f, off, 8)
#define RD32(off) ((uint32_t)rd(f, off, 4))

/* The client's TCP bytes (n of them, fewer where the queues are full), and its FIN. */
void fz_client_send(struct fz *f, uint64_t n);
void fz_client_fin(struct fz *f);
/* Operations 0 to 4 of fuzz_conn.c. */
void fz_client_op(struct fz *f, uint8_t op, uint64_t v);
/* Reads what the server sent on TCP, checked: counted wake-ups, then its bytes. */
void fz_client_read_tcp(struct fz *f);
/* Records the client's words as it wrote them; then checks the server left them so. */
void fz_peer_snap(struct fz *f);
void fz_check_peer_untouched(const struct fz *f);

#endif
