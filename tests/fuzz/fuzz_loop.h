/* SPDX-License-Identifier: MIT */
/*
 * What the connection harnesses share (fuzz_conn.c and fuzz_peer.c, fuzz_server_peer.c):
 * the core set up as the preload sets it up, a loopback listener whose accepted
 * connections the harness pairs with the clients it makes, one per input, and the check
 * that the library's side wrote nothing of the side the harness plays.
 */
#ifndef ULS_FUZZ_LOOP_H
#define ULS_FUZZ_LOOP_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

extern int fuzz_listen_fd;
extern struct sockaddr_in fuzz_listen_addr;

/* The core's start-up (libc, configuration, log, descriptor table, fences) with the
 * library's warnings off, SIGPIPE ignored, and the listener; aborts when one fails. */
void fuzz_loop_init(void);

uint64_t fuzz_now_ns(void);

/* Has a connect, interrupted by a signal (libFuzzer's timer), gone through? */
int fuzz_connected(int fd);

/* Accepts the connection of client socket cfd: one an earlier input left in the queue is
 * not it, and is closed. The accepted descriptor, or -1. */
int fuzz_accept_client(int cfd);

/*
 * A range of the segment that only the side the harness plays may write; may_clear: the
 * library's side may clear bits of the (4-byte) word there, no more (a mover exchanges
 * the sleeper's want word for 0; a sleeper clears the peer's light_fence).
 */
struct fuzz_range {
	size_t off, len;
	int may_clear;
};

/* The library's side (who: "server" or "client") wrote none of the n ranges: now, the
 * segment, against before, a copy taken earlier. Aborts with the bytes it changed. */
void fuzz_check_untouched(const void *now, const void *before, const struct fuzz_range *r,
			  size_t n, const char *who);

#endif
