/* SPDX-License-Identifier: MIT */
/*
 * The layout of a shared-memory segment: an ABI between two processes that may run
 * different builds of ulsock (docs/protocol.md, section 2). Fixed-width fields, explicit
 * alignment, no pointers; every field can be written by the peer, so readers validate
 * what they use (ring.h, segment.c). The asserts at the end pin every size and offset and
 * that each atomic field is lock-free (a lock-free atomic needs no lock that lives outside
 * the mapping, so it works between processes). A change to any of them is a new
 * ULS_SEG_VERSION.
 */
#ifndef ULS_SHM_ABI_H
#define ULS_SHM_ABI_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define ULS_CACHELINE 64

/*
 * The pipe a sleeper in poll, select or epoll_wait waits on besides its socket (its bell,
 * core/bell.h), for a waker that may open it through /proc/PID/fd/FD: who is PID << 32 |
 * FD, ino the pipe's inode, which the waker checks on what it opened. Written by the
 * sleeper before it sets ULS_WANT_PIPE; untrusted (transport/shm/wakepipe.h).
 */
struct uls_wake_pipe {
	_Atomic uint64_t who;
	_Atomic uint64_t ino;
};

/*
 * Written only by the producer. The position has a line of its own: the consumer reads it
 * all the time, the flags rarely, and the producer reads the consumer's flags on every
 * send, which must not miss the cache each time the consumer moves its position.
 */
struct uls_ring_prod {
	_Alignas(ULS_CACHELINE) _Atomic uint64_t tail; /* bytes ever published */
	uint8_t pad0[ULS_CACHELINE - 8];
	_Alignas(ULS_CACHELINE) _Atomic uint32_t eof; /* 1: nothing will follow tail */
	_Atomic uint32_t want_space; /* ULS_WANT_*: the producer sleeps until head moves */
	struct uls_wake_pipe space_pipe; /* ULS_WANT_PIPE of want_space: where to write */
	uint8_t pad1[ULS_CACHELINE - 24];
};

/* Written only by the consumer (want_data is also cleared by the producer). */
struct uls_ring_cons {
	_Alignas(ULS_CACHELINE) _Atomic uint64_t head; /* bytes ever consumed */
	uint8_t pad0[ULS_CACHELINE - 8];
	_Alignas(ULS_CACHELINE) _Atomic uint32_t want_data; /* ULS_WANT_*: the consumer sleeps */
	_Atomic uint32_t closed; /* 1: the consumer will never read again */
	struct uls_wake_pipe data_pipe; /* ULS_WANT_PIPE of want_data: where to write */
	uint8_t pad1[ULS_CACHELINE - 24];
};

/*
 * How a sleeper wants to be woken when the other side moves the ring: a byte on TCP (for
 * poll and epoll, which sleep in the kernel on the socket), a FUTEX_WAKE on the flag word
 * itself (for a call blocked in recv or send), a byte into the pipe the line names (poll
 * and epoll again, where the waker may open it; else the byte on TCP), or several. The
 * mover exchanges the word for 0 and does what it finds.
 */
#define ULS_WANT_TOKEN 0x1u
#define ULS_WANT_FUTEX 0x2u
#define ULS_WANT_PIPE 0x4u

struct uls_ring_shared {
	struct uls_ring_prod prod;
	struct uls_ring_cons cons;
};

#define ULS_SEG_MAGIC 0x0031474553534c55ULL /* "ULSSEG1" */
#define ULS_SEG_VERSION 5u
#define ULS_SEG_HDR_SIZE 4096u

enum { ULS_SIDE_CLIENT = 0, ULS_SIDE_SERVER = 1 }; /* side[] by role (core/conn.h) */
enum { ULS_C2S = 0, ULS_S2C = 1 };

/* Side state flags. */
#define ULS_SIDE_ATTACHED 0x1u /* server: the server uses the rings (set once, first) */
#define ULS_SIDE_DECLINED 0x2u /* server: it found the segment but stays on TCP */
#define ULS_SIDE_CLOSED 0x4u   /* no process of this side holds the connection any more */
#define ULS_SIDE_RESET 0x10u   /* closed with SO_LINGER {1, 0}, or sent to a peer shut both
				* ways: the peer reports ECONNRESET */
#define ULS_SIDE_TCP_SHUT 0x8u /* client: shut TCP down for writing before its switch, so
				* it never switches (no wake-ups can follow the FIN) */

/* Written once by the client before connect(); read-only afterwards. */
struct uls_seg_ident {
	uint64_t magic;
	uint32_t version;
	uint32_t hdr_size;
	uint64_t total_size;
	uint64_t ring_off[2];
	uint64_t ring_size[2];
	uint64_t client_ino;    /* inode of the client's TCP socket */
	uint64_t client_cookie; /* SO_COOKIE of the client's TCP socket */
	uint32_t client_uid;
	uint32_t client_pid;
	uint8_t pad[128 - 80];
};

/* Written only by the processes of one side. */
struct uls_side {
	/* Line 0: locks serializing this side's threads and processes, per direction. */
	_Alignas(ULS_CACHELINE) _Atomic uint32_t lock[2]; /* [0] send, [1] receive */
	_Atomic uint32_t lock_owner[2];                   /* pid holding each lock */
	_Atomic uint32_t token_lock;   /* serializes wake-up sends against a revert */
	_Atomic uint32_t token_owner;
	_Atomic uint32_t solo_busy[2]; /* pid running a call without the lock, per direction */
	_Atomic uint32_t multi;        /* a second process of this side uses the connection */
	uint8_t pad0[ULS_CACHELINE - 36];
	/* Line 1: state the peer reads. */
	_Alignas(ULS_CACHELINE) _Atomic uint32_t state; /* ULS_SIDE_* */
	_Atomic uint32_t refs;       /* processes of this side mapping the segment */
	_Atomic uint32_t pid;        /* last process of this side to attach */
	_Atomic uint32_t reason;     /* why the server declined (enum uls_reason) */
	_Atomic uint64_t cookie;     /* SO_COOKIE of this side's TCP socket */
	_Atomic uint64_t tcp_data;   /* client: data bytes sent on TCP; server: consumed */
	_Atomic uint64_t switch_pos; /* client: TCP data bytes before the ring takes over */
	_Atomic uint32_t switched;   /* client: 1 once switch_pos is valid */
	_Atomic uint32_t pad1;
	_Atomic uint64_t tokens_sent; /* wake-up bytes this side put on its TCP direction */
	uint8_t pad2[ULS_CACHELINE - 56];
	/* Line 2: written rarely (wake-ups drained, a revert), read by the peer. */
	_Alignas(ULS_CACHELINE) _Atomic uint32_t light_fence; /* publishes with light fences */
	_Atomic uint32_t tokens_closed; /* reverting: no wake-up reads may start (section 8) */
	_Atomic uint32_t token_readers; /* calls of this side reading wake-ups right now */
	/* Closing: this side reads no more wake-ups, so the peer sends none (conn.c). */
	_Atomic uint32_t tokens_refused;
	_Atomic uint64_t tokens_seen; /* wake-up bytes consumed from the peer */
	/* Moving the connection back to kernel TCP in place (docs/protocol.md, section 8). */
	_Atomic uint32_t revert_req;  /* this side asks the peer to send on TCP again */
	_Atomic uint32_t tx_reverted; /* this side sends on TCP again (fields below valid) */
	_Atomic uint64_t revert_ring_end; /* ring position where this side's ring bytes end */
	_Atomic uint64_t revert_tcp_pos;  /* TCP bytes (data and wake-ups) it sent before */
	_Atomic uint32_t rx_back;     /* this side receives on TCP again */
	uint8_t pad3[ULS_CACHELINE - 52];
};

/*
 * Written by both sides: each word is a task that one of them does, once; whoever
 * exchanges it for 0 first does it.
 */
struct uls_seg_both {
	/* 1: the client's offer is counted on its user's board (offers.h) and nobody has
	 * taken it back yet: the server that finds the segment, or the client that learns
	 * the server never will. Read as a hint: a wrong value moves a count on the board. */
	_Alignas(ULS_CACHELINE) _Atomic uint32_t offer;
	uint8_t pad[ULS_CACHELINE - 4];
};

struct uls_seg_hdr {
	struct uls_seg_ident id;
	struct uls_side side[2];           /* [ULS_SIDE_CLIENT], [ULS_SIDE_SERVER] */
	struct uls_ring_shared ring[2];    /* [ULS_C2S], [ULS_S2C] */
	struct uls_seg_both both;
};

/* ---- the layout, pinned ---- */

#define ULS_ABI_AT(type, field, off) \
	_Static_assert(offsetof(type, field) == (off), #type "." #field " at " #off)

_Static_assert(ATOMIC_INT_LOCK_FREE == 2 && ATOMIC_LLONG_LOCK_FREE == 2,
	       "32- and 64-bit atomics are lock-free");
_Static_assert(sizeof(_Atomic uint32_t) == 4 && sizeof(_Atomic uint64_t) == 8,
	       "atomic fields have their plain sizes");

_Static_assert(sizeof(struct uls_ring_prod) == 2 * ULS_CACHELINE, "prod lines");
_Static_assert(sizeof(struct uls_ring_shared) == 4 * ULS_CACHELINE, "ring header");
ULS_ABI_AT(struct uls_ring_shared, prod.tail, 0);
ULS_ABI_AT(struct uls_ring_shared, prod.eof, 64);
ULS_ABI_AT(struct uls_ring_shared, prod.want_space, 68);
ULS_ABI_AT(struct uls_ring_shared, prod.space_pipe.who, 72);
ULS_ABI_AT(struct uls_ring_shared, prod.space_pipe.ino, 80);
ULS_ABI_AT(struct uls_ring_shared, cons.head, 128);
ULS_ABI_AT(struct uls_ring_shared, cons.want_data, 192);
ULS_ABI_AT(struct uls_ring_shared, cons.closed, 196);
ULS_ABI_AT(struct uls_ring_shared, cons.data_pipe.who, 200);
ULS_ABI_AT(struct uls_ring_shared, cons.data_pipe.ino, 208);

_Static_assert(sizeof(struct uls_seg_ident) == 128, "ident size");
ULS_ABI_AT(struct uls_seg_ident, magic, 0);
ULS_ABI_AT(struct uls_seg_ident, version, 8);
ULS_ABI_AT(struct uls_seg_ident, hdr_size, 12);
ULS_ABI_AT(struct uls_seg_ident, total_size, 16);
ULS_ABI_AT(struct uls_seg_ident, ring_off, 24);
ULS_ABI_AT(struct uls_seg_ident, ring_size, 40);
ULS_ABI_AT(struct uls_seg_ident, client_ino, 56);
ULS_ABI_AT(struct uls_seg_ident, client_cookie, 64);
ULS_ABI_AT(struct uls_seg_ident, client_uid, 72);
ULS_ABI_AT(struct uls_seg_ident, client_pid, 76);

_Static_assert(sizeof(struct uls_side) == 3 * ULS_CACHELINE, "side size");
ULS_ABI_AT(struct uls_side, lock, 0);
ULS_ABI_AT(struct uls_side, lock_owner, 8);
ULS_ABI_AT(struct uls_side, token_lock, 16);
ULS_ABI_AT(struct uls_side, token_owner, 20);
ULS_ABI_AT(struct uls_side, solo_busy, 24);
ULS_ABI_AT(struct uls_side, multi, 32);
ULS_ABI_AT(struct uls_side, state, 64);
ULS_ABI_AT(struct uls_side, refs, 68);
ULS_ABI_AT(struct uls_side, pid, 72);
ULS_ABI_AT(struct uls_side, reason, 76);
ULS_ABI_AT(struct uls_side, cookie, 80);
ULS_ABI_AT(struct uls_side, tcp_data, 88);
ULS_ABI_AT(struct uls_side, switch_pos, 96);
ULS_ABI_AT(struct uls_side, switched, 104);
ULS_ABI_AT(struct uls_side, tokens_sent, 112);
ULS_ABI_AT(struct uls_side, light_fence, 128);
ULS_ABI_AT(struct uls_side, tokens_closed, 132);
ULS_ABI_AT(struct uls_side, token_readers, 136);
ULS_ABI_AT(struct uls_side, tokens_refused, 140);
ULS_ABI_AT(struct uls_side, tokens_seen, 144);
ULS_ABI_AT(struct uls_side, revert_req, 152);
ULS_ABI_AT(struct uls_side, tx_reverted, 156);
ULS_ABI_AT(struct uls_side, revert_ring_end, 160);
ULS_ABI_AT(struct uls_side, revert_tcp_pos, 168);
ULS_ABI_AT(struct uls_side, rx_back, 176);

_Static_assert(sizeof(struct uls_seg_both) == ULS_CACHELINE, "both sides' line");
ULS_ABI_AT(struct uls_seg_both, offer, 0);

_Static_assert(sizeof(struct uls_seg_hdr) == 1088, "segment header");
_Static_assert(sizeof(struct uls_seg_hdr) <= ULS_SEG_HDR_SIZE, "header fits its page");
ULS_ABI_AT(struct uls_seg_hdr, id, 0);
ULS_ABI_AT(struct uls_seg_hdr, side[ULS_SIDE_CLIENT], 128);
ULS_ABI_AT(struct uls_seg_hdr, side[ULS_SIDE_SERVER], 320);
ULS_ABI_AT(struct uls_seg_hdr, ring[ULS_C2S], 512);
ULS_ABI_AT(struct uls_seg_hdr, ring[ULS_S2C], 768);
ULS_ABI_AT(struct uls_seg_hdr, both, 1024);

#undef ULS_ABI_AT

#endif
