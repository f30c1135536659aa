/* SPDX-License-Identifier: MIT */
/*
 * What the connection harnesses share (fuzz_conn.c, fuzz_server_peer.c): the core set up
 * as the preload sets it up, and a loopback listener whose accepted connections the
 * harness pairs with the clients it makes, one per input.
 */
#ifndef ULS_FUZZ_LOOP_H
#define ULS_FUZZ_LOOP_H

#include <netinet/in.h>
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

#endif
