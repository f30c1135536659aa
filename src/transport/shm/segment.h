/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory segment of one accelerated connection: a header page followed by two
 * rings, client-to-server and server-to-client. The client creates it as a file in
 * /dev/shm named after its TCP socket's inode, before it calls connect(); the server finds
 * it after accept() through the inode the kernel reports for the peer socket. See
 * docs/protocol.md for the layout and the handshake.
 *
 * This is an ABI between two processes: fixed-width fields, explicit alignment, no
 * pointers. Every field can be written by the peer, so readers validate what they use.
 */
#ifndef ULS_SEGMENT_H
#define ULS_SEGMENT_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "../../core/ring.h"

#define ULS_SEG_MAGIC 0x0031474553534c55ULL /* "ULSSEG1" */
#define ULS_SEG_VERSION 3u
#define ULS_SEG_HDR_SIZE 4096u

enum { ULS_CLIENT = 0, ULS_SERVER = 1 };
enum { ULS_C2S = 0, ULS_S2C = 1 };

/* Side state flags. */
#define ULS_SIDE_ATTACHED 0x1u /* server: the server uses the rings (set once, first) */
#define ULS_SIDE_DECLINED 0x2u /* server: it found the segment but stays on TCP */
#define ULS_SIDE_CLOSED 0x4u   /* no process of this side holds the connection any more */
#define ULS_SIDE_RESET 0x10u   /* closed with SO_LINGER {1, 0}: the peer reports ECONNRESET */
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
_Static_assert(sizeof(struct uls_seg_ident) == 128, "ident size");

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
_Static_assert(sizeof(struct uls_side) == 3 * ULS_CACHELINE, "side size");

struct uls_seg_hdr {
	struct uls_seg_ident id;
	struct uls_side side[2];           /* [ULS_CLIENT], [ULS_SERVER] */
	struct uls_ring_shared ring[2];    /* [ULS_C2S], [ULS_S2C] */
};
_Static_assert(sizeof(struct uls_seg_hdr) <= ULS_SEG_HDR_SIZE, "header fits its page");

/* A process's mapping of one segment. */
struct uls_seg {
	struct uls_seg_hdr *hdr;
	size_t map_size;
	struct uls_ring ring[2];
	uint64_t ino; /* the client socket inode that names the file */
	uid_t uid;    /* the client's uid, also part of the name */
};

/* Every segment file's name starts so: /dev/shm/ulsock.<uid>.<client socket inode>. */
#define ULS_SEG_PATH_PREFIX "/dev/shm/ulsock."

/*
 * Creates the segment for a client socket (inode ino, cookie) with the given ring sizes.
 * Returns 0 or -errno. It uses the spare when one of these sizes is ready.
 */
int uls_seg_create(struct uls_seg *seg, uint64_t ino, uint64_t cookie, uint64_t c2s_size,
		   uint64_t s2c_size);

/*
 * Maps an existing segment named by the client inode, owned by one of the trusted uids,
 * and validates its identity against the cookie the kernel reported for the client socket.
 * Returns 0, -ENOENT when there is none, or another -errno (-EPROTO: invalid contents).
 */
int uls_seg_open(struct uls_seg *seg, uint64_t ino, uint64_t cookie);

/* The same, for a segment created by another (trusted) user. */
int uls_seg_open_as(struct uls_seg *seg, uid_t uid, uint64_t ino, uint64_t cookie);

/* Removes the name of a mapped segment (created by this or another user). */
void uls_seg_remove(const struct uls_seg *seg);

/* Unmaps; accepts a zeroed seg. */
void uls_seg_unmap(struct uls_seg *seg);

/*
 * Unmaps a closed connection's segment later: when the process is about to sleep
 * (uls_seg_reap), or when ULS_SEG_RETIRE_MAX wait already (the oldest goes then).
 * Zeroes seg. Each idle moment reaps them all, so a few slots are enough.
 */
#define ULS_SEG_RETIRE_MAX 4
void uls_seg_retire(struct uls_seg *seg);

/*
 * The spare: a process that created a client segment makes the next one while it is about
 * to sleep anyway (uls_seg_reap), so that its next connect only names it. A spare is an
 * unnamed file (O_TMPFILE) in /dev/shm, sized, mapped and with its header and the first
 * page of each ring touched, held on a descriptor >= ULS_SEG_SPARE_FD_MIN (close-on-exec).
 * uls_seg_create links it under the socket's name through /proc/self/fd. It checks first
 * that the descriptor still is the spare (the program may have closed it and reused the
 * number) and claims the header's client_pid with a compare-and-swap, so two processes
 * that both inherited it without fork's handlers never share it. Nobody else can reach an
 * unnamed file, and a process that dies leaves nothing behind. docs/PERFORMANCE.md.
 */
#define ULS_SEG_SPARE_FD_MIN 900

/* Work that waits for the process's next sleep: retired mappings, a spare to make. */
struct uls_seg_idle {
	_Atomic int retired;      /* mappings in the retire list */
	_Atomic int spare_wanted; /* a client segment was created and no spare is ready */
};
extern struct uls_seg_idle uls_seg_idle;

/* Unmaps the retired segments and makes the spare; cheap when there is nothing to do. Call
 * before sleeping. errno is kept. */
void uls_seg_reap_slow(void);
static inline void uls_seg_reap(void)
{
	if (atomic_load_explicit(&uls_seg_idle.retired, memory_order_relaxed) |
	    atomic_load_explicit(&uls_seg_idle.spare_wanted, memory_order_relaxed))
		uls_seg_reap_slow();
}

/* Drops the spare (its descriptor only if it still is the spare's). */
void uls_seg_spare_drop(void);

/*
 * The program ran out of descriptors (EMFILE): gives the spare's back and makes no more
 * spares in this process. 1 when a descriptor was freed, so the call is worth retrying.
 */
int uls_seg_spare_yield(void);

/* The spare's descriptor, or -1 when there is none (for tests). */
int uls_seg_spare_fd(void);

/* In a fork child: the locks may have been held by another thread, and the spare is the
 * parent's. */
void uls_seg_atfork_child(void);

/* Removes the file name; the mapping stays valid. */
void uls_seg_unlink(uint64_t ino);

/* Writes the file name of this user's segment for inode ino into buf. */
void uls_seg_path(char *buf, size_t len, uint64_t ino);
void uls_seg_path_of(char *buf, size_t len, uid_t uid, uint64_t ino);

/*
 * Removes segments of this user whose processes are all gone, and files too short for a
 * header that are older than ULS_SEG_SWEEP_AGE seconds (truncated); returns how many.
 */
#define ULS_SEG_SWEEP_AGE 60
int uls_seg_sweep(void);

#endif
