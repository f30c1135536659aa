/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory segment of one accelerated connection: a header page followed by two
 * rings, client-to-server and server-to-client. The client creates it as a file in
 * /dev/shm named after its TCP socket's inode, before it calls connect(); the server finds
 * it after accept() through the inode the kernel reports for the peer socket. See
 * docs/protocol.md for the layout and the handshake.
 *
 * The shared layout is an ABI between two processes, in shm_abi.h with its offsets
 * pinned; this header is the process-local side: the mapping and its operations.
 */
#ifndef ULS_SEGMENT_H
#define ULS_SEGMENT_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "ring.h"

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
 * The same walk of /dev/shm removes the names of this user's dead bells
 * (uls_bell_sweep_one): one readdir at start-up.
 */
#define ULS_SEG_SWEEP_AGE 60
int uls_seg_sweep(void);

#endif
