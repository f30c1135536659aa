/* SPDX-License-Identifier: MIT */
/*
 * Internal to the shared-memory transport: its state in each connection, and what its
 * files share: io.c (the data path, the switch, wake-ups, readiness), revert.c (moving
 * back to kernel TCP), attach.c (set-up and close) and tcpinfo.c.
 */
#ifndef ULS_SHM_INT_H
#define ULS_SHM_INT_H

#include "../../core/conn.h"
#include "segment.h"
#include "shm.h"

/* The transport's state in a connection (struct uls_conn, tp_state). */
struct uls_shm_conn {
	uint64_t tx_head_seen; /* the consumer's head as last read (send lock) */
	/*
	 * The positions this process published last as its side's only producer or consumer
	 * (solo calls, io.c). The next solo call starts from them instead of loading its own
	 * position back from the line the peer keeps reading: with 64-byte sends, 86% of
	 * ring_send's samples waited on that load. Any other call drops them; nothing else
	 * publishes while calls are solo. A side goes back to solo only when its fork's
	 * other holders closed (shm_alone, attach.c), which drops them as well: a fork child
	 * starts with its parent's.
	 */
	uint64_t tx_tail_mine, rx_head_mine;
	uint8_t tx_mine_ok, rx_mine_ok;
	/*
	 * Receive pacing (ring_recv): the last receive emptied the ring and this process has
	 * sent nothing since (a one-way stream), and when a paced receive last looked.
	 */
	_Atomic uint8_t rx_stream;
	_Atomic uint64_t rx_looked_ns;
	_Atomic uint64_t tcp_checked; /* when a poller last looked at the TCP socket (ns) */
	_Atomic unsigned fence_streak[2]; /* publications that found the peer awake (fence.h) */
	_Atomic int on_rings; /* kernel_parts found both directions on the rings (cache) */
	_Atomic uint64_t tx_full; /* times a send found the ring full (EPOLLOUT edges) */
	/* This process is one of the side's counted holders (side.refs): the one that made or
	 * attached the side, and its fork children (attach.c, shm_forked). */
	uint8_t counted;
	_Atomic uint8_t fin_awaited; /* a send waited for the FIN of a peer shut both ways (io.c) */
	struct uls_seg seg;
	struct uls_ring *tx, *rx;
	struct uls_side *me, *peer;
};

_Static_assert(sizeof(struct uls_shm_conn) <= ULS_TP_STATE_SIZE,
	       "the shared-memory state fits a connection's tp_state");
_Static_assert((int)ULS_SIDE_CLIENT == (int)ULS_CLIENT && (int)ULS_SIDE_SERVER == (int)ULS_SERVER,
	       "a segment's sides are indexed by role");

static inline struct uls_shm_conn *shm_of(struct uls_conn *c)
{
	return (struct uls_shm_conn *)(void *)c->tp_state;
}

enum { TXL = 0, RXL = 1 }; /* the side's send and receive locks */

/*
 * A process that starts to use a connection another process of its side may run solo
 * (io.c) announces itself and waits for such a call to end. Before its first call.
 */
void uls_conn_join_side(struct uls_conn *c);
void uls_conn_lock(struct uls_conn *c, int which);
void uls_conn_unlock(struct uls_conn *c, int which);
/* Takes a direction's lock if free (1); a solo call of this thread counts as its holder. */
int uls_conn_trylock(struct uls_conn *c, int which);
int uls_conn_peer_attached(struct uls_conn *c);
void uls_conn_send_token(struct uls_conn *c, int fd);
/* Sends one wake-up byte and counts it; caller holds the side's token lock. */
int uls_conn_send_token_locked(struct uls_conn *c, int fd);
/*
 * Around every read of the peer's wake-up bytes: begin fails (0) once the peer has
 * started to move its sending direction back to TCP, whose bytes are data from then on.
 */
/*
 * Wakes the threads that sleep on a futex in the rings (io.c, futex_sleep) after a
 * change that is not a ring position: the peer's threads, or this process's own.
 */
void uls_conn_wake_peer(struct uls_conn *c);
void uls_conn_wake_self(struct uls_conn *c);
int uls_token_read_begin(struct uls_conn *c);
void uls_token_read_end(struct uls_conn *c);
/* The client moves its sending direction onto the ring. Caller holds the send lock. */
void uls_conn_client_switch(struct uls_conn *c, int fd);
void uls_conn_broken(struct uls_conn *c, int fd, const char *what);
/*
 * A client's server never attached: the connection stays on kernel TCP, with reason
 * plain, or one that names the server's uid where its socket is another user's.
 */
void uls_conn_never_attached(struct uls_conn *c, int fd, const char *plain);

/* The peer asked for this side's bytes on TCP (revert.c). */
void uls_revert_serve(struct uls_conn *c, int fd);
void uls_revert_serve_locked(struct uls_conn *c, int fd); /* caller holds the send lock */
/*
 * 1 when the receiving direction is back on TCP, 0 while ring bytes remain, or -errno;
 * nonblock: -EAGAIN where the peer's wake-ups before its revert point are still to come,
 * instead of waiting for them.
 */
int uls_revert_rx_back(struct uls_conn *c, int fd, int nonblock);

/* Are the bytes still to come on TCP from the peer wake-ups that this side may read? */
int uls_conn_reads_tokens(struct uls_conn *c);

#endif
