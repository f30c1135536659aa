/* SPDX-License-Identifier: MIT */
/*
 * Internal to the connection code: what conn_io.c (the data path) and revert.c (moving
 * back to kernel TCP) share. Not for the preload layer.
 */
#ifndef ULS_CONN_IO_H
#define ULS_CONN_IO_H

#include "conn.h"
#include "../transport/shm/shm.h"

enum { TXL = 0, RXL = 1 }; /* the side's send and receive locks */

/* The conn of the send or receive this thread runs solo (conn_io.c), or NULL. */
extern __thread struct uls_conn *uls_solo_call __attribute__((tls_model("initial-exec")));

/*
 * A process that starts to use a connection another process of its side may run solo
 * (conn_io.c) announces itself and waits for such a call to end. Before its first call.
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
 * Wakes the threads that sleep on a futex in the rings (conn_io.c, futex_sleep) after a
 * change that is not a ring position: the peer's threads, or this process's own.
 */
void uls_conn_wake_peer(struct uls_conn *c);
void uls_conn_wake_self(struct uls_conn *c);
int uls_token_read_begin(struct uls_conn *c);
void uls_token_read_end(struct uls_conn *c);
/* The client moves its sending direction onto the ring. Caller holds the send lock. */
void uls_conn_client_switch(struct uls_conn *c, int fd);
void uls_conn_broken(struct uls_conn *c, int fd, const char *what);

/* The peer asked for this side's bytes on TCP (revert.c). */
void uls_revert_serve(struct uls_conn *c, int fd);
void uls_revert_serve_locked(struct uls_conn *c, int fd); /* caller holds the send lock */
/* 1 when the receiving direction is back on TCP, 0 while ring bytes remain, or -errno. */
int uls_revert_rx_back(struct uls_conn *c, int fd);

#endif
