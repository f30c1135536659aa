/* SPDX-License-Identifier: MIT */
/*
 * The transport boundary. A transport carries the bytes of one connection; the core knows
 * connections (descriptors, references, the path, options, names, stat, hand-off, the
 * readiness loops) and reaches everything a transport does for a connection through the
 * connection's operations table, c->tp, which is set when the connection is bound to a
 * transport and never changes afterwards.
 *
 * Two transports exist:
 *   - kernel TCP (src/transport/kernel): the pass-through. Every connection starts on it,
 *     and one that never gets a fast path stays on it; its operations are the kernel's
 *     calls on the socket.
 *   - shared memory (src/transport/shm, whose data path still lives in core/conn_io.c and
 *     core/revert.c): bound when the connection gets a segment. A connection of this
 *     transport that moves back to kernel TCP (protocol.md, section 8) keeps its table:
 *     the move is part of this transport's protocol, and its operations serve the
 *     connection on TCP from then on.
 *
 * The contract, for every operation: the caller holds the connection (uls_conn_hold, or
 * one of its descriptors) and passes the descriptor it was called on, fd; results are
 * the core's convention (a count or 0, or -errno), never errno. Operations may sleep only
 * where the program's call would (send, recv, revert), honour O_NONBLOCK and the socket's
 * timeouts, and are safe against each other from several threads and processes of one
 * side.
 */
#ifndef ULS_TRANSPORT_H
#define ULS_TRANSPORT_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

struct uls_conn;

struct uls_transport_ops {
	const char *name;

	/* ---- data: bytes moved, 0 at EOF (recv), or -errno ---- */
	ssize_t (*send)(struct uls_conn *c, int fd, const struct iovec *iov, int iovcnt,
			int flags);
	ssize_t (*recv)(struct uls_conn *c, int fd, struct msghdr *msg, int flags);
	int (*shutdown)(struct uls_conn *c, int fd, int how);

	/* ---- readiness, for poll, select and epoll (core/poll.c, core/epoll_wait.c) ---- */
	/* Which readiness the kernel socket decides right now (ULS_KERNEL_RX, _TX). */
	int (*kernel_parts)(struct uls_conn *c);
	/* Readiness of the other parts: POLLIN, POLLOUT, POLLRDHUP, POLLHUP, POLLERR. */
	int (*ready)(struct uls_conn *c, int events);
	/* Before a sleep in the kernel on the socket: make the socket readable when the
	 * parts named in events change. */
	void (*arm)(struct uls_conn *c, int events);
	/* The kernel said the socket is readable: take what arm asked for off it. */
	void (*drain)(struct uls_conn *c, int fd);
	/* A blocking wait for what arm asked for, in one system call; 1 after one, 0 when it
	 * does not apply (the caller polls), or -errno. */
	int (*sleep_recv)(struct uls_conn *c, int fd);
	/* For edge-triggered epoll: a number that changes when the readiness may have. */
	uint64_t (*gen)(struct uls_conn *c, int events);
	/* FIONREAD, SIOCOUTQ and SIOCATMARK on the parts the transport carries. */
	int (*inq)(struct uls_conn *c, int fd, int *out);
	int (*outq)(struct uls_conn *c, int fd, int *out);
	int (*atmark)(struct uls_conn *c, int fd, int *out);

	/* ---- back to kernel TCP, in place, no byte lost or repeated ---- */
	/* Both directions, before the socket leaves ulsock's reach; 0 or -errno. */
	int (*revert)(struct uls_conn *c, int fd, int timeout_ms);
	/* This side's sending direction only (before urgent data); 0 or -errno. */
	int (*tx_to_kernel)(struct uls_conn *c, int fd);
	/* O_ASYNC was set: signal-driven I/O is the kernel's. */
	void (*async)(struct uls_conn *c, int fd);
};

/* The transports of this build. */
extern const struct uls_transport_ops uls_kernel_transport;
extern const struct uls_transport_ops uls_shm_transport;

#endif
