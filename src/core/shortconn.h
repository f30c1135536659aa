/* SPDX-License-Identifier: MIT */
/*
 * Destinations whose connections are too short to pay for a fast path.
 *
 * A connection on shared memory costs its two processes about 60 µs of CPU more to set
 * up and tear down than kernel TCP (a segment file created, mapped, named, opened by the
 * server, unmapped and freed: docs/PERFORMANCE.md, "Short connections"); a connection
 * that carries one request and its answer never wins that back, and a program that opens
 * one per request (Ganglia, HTTP/1.0, a health check) runs slower than on kernel TCP.
 *
 * So a client process remembers, per destination (address and port), whether its last
 * connections there were short: fewer than ULSOCK_SHORT_CALLS units on the client's side
 * in less than ULS_SHORT_LIFE_NS. A unit is a turn of the conversation (a call that
 * moved data in the other direction than the one before it, the first one included), an
 * eighth of a unit each other call that moved data, and one unit per 64 KiB moved in
 * all: a turn is a wake-up each way that the rings save (and, spinning, most of a round
 * trip's latency), a call in the same direction only its system call, and a long stream
 * the kernel's copies. Counting every call alike made a reader that takes one answer in
 * many pieces "long" (wrk reading 64 KiB HTTP bodies 8 KiB at a time, a connection per
 * request: Node.js served it at half kernel TCP's rate, each fresh segment's pages
 * allocated and freed for one answer). After ULS_SHORT_RUN short ones in a row, new
 * connections there stay on kernel TCP, with that reason in the log and `ulsock stat`.
 * Those are measured too, from the kernel's own counts (TCP_INFO) at their last close:
 * twice the smaller of the data segments in and out (an exchange is a segment each way),
 * one more where they differ, and one per 64 KiB sent or received; the first one that is
 * not short gives the destination back to the fast path. A connection that was offered
 * the fast path and never got on it (a server without ulsock, one that declined, a move
 * back before the server attached) counts as short whatever it moved: the offer cost a
 * segment and bought nothing. One that left the fast path later (a move back to kernel
 * TCP) teaches nothing.
 *
 * The table is per process and small (the least recently used destination goes); its
 * lock is only ever tried (connect and close may run in a signal handler), and a busy
 * lock means "accelerate" and "learn nothing".
 */
#ifndef ULS_SHORTCONN_H
#define ULS_SHORTCONN_H

#include <stdint.h>
#include <sys/socket.h>

#include "config.h"

#define ULS_SHORT_RUN 4
#define ULS_SHORT_LIFE_NS 50000000ull
#define ULS_SHORT_UNIT_SHIFT 16
#define ULS_SHORT_DESTS 64

/* The reason a connection kept off the fast path here gets. */
#define ULS_SHORT_REASON "last connections to this destination were short or not accelerated (ULSOCK_SHORT_CALLS)"

/* Should a new connection to dst stay on kernel TCP? 1: yes. */
int uls_short_skip(const struct sockaddr *dst);

/* A client connection to dst ended after moving `units` in life_ns. */
void uls_short_note(const struct sockaddr *dst, uint32_t units, uint64_t life_ns);

/* The units of a connection on kernel TCP, from the kernel's counts of data segments
 * and bytes (TCP_INFO); UINT32_MAX when the kernel cannot tell (it then counts as long). */
uint32_t uls_short_kernel_units(int fd);

/*
 * A fast-path connection's count, as one word: eighths of units so far (a turn 8, another
 * call 1) times 2, plus the direction of the last call that moved data (0 send, 1
 * receive); 0 before any. uls_short_turn gives the word after a call in direction dir
 * moved data.
 */
#define ULS_SHORT_TURN 8
static inline uint32_t uls_short_turn(uint32_t word, unsigned dir)
{
	uint32_t eighths = (word >> 1) + (word && (word & 1) == dir ? 1 : ULS_SHORT_TURN);

	if (eighths > ULS_SHORT_CALLS_MAX * ULS_SHORT_TURN)
		eighths = ULS_SHORT_CALLS_MAX * ULS_SHORT_TURN;
	return eighths << 1 | dir;
}

/* The units of a fast-path connection: its count, plus one per 64 KiB it moved. */
static inline uint32_t uls_short_units(uint32_t word, uint64_t moved)
{
	uint64_t u = (uint64_t)(word >> 1) / ULS_SHORT_TURN + (moved >> ULS_SHORT_UNIT_SHIFT);

	return u > ULS_SHORT_CALLS_MAX ? ULS_SHORT_CALLS_MAX : (uint32_t)u;
}

/* In a fork child: the lock may have been held by another thread. */
void uls_short_atfork_child(void);

/* Forgets every destination (tests). */
void uls_short_reset(void);

#endif
