/* SPDX-License-Identifier: MIT */
/*
 * The transport boundary. A transport carries the bytes of one connection; the core knows
 * connections (descriptors, references, the path, options, names, stat, hand-off, the
 * readiness loops) and reaches everything a transport does for a connection through the
 * connection's operations table, c->tp, which is set when the connection is bound to a
 * transport and never changes afterwards.
 *
 * Three transports exist:
 *   - kernel TCP (src/transport/kernel): the pass-through. Every connection starts on it,
 *     and one that never gets a fast path stays on it; its operations are the kernel's
 *     calls on the socket.
 *   - shared memory (src/transport/shm): bound when the connection gets a segment. A
 *     connection of this transport that moves back to kernel TCP (protocol.md, section 8)
 *     keeps its table: the move is part of this transport's protocol, and its operations
 *     serve the connection on TCP from then on.
 *   - the fabric (src/transport/fabric): libfabric between hosts, bound when a peer on
 *     another host proves that it runs ulsock for this connection (docs/protocol.md 9).
 *
 * Every transport but kernel TCP is listed in the transport table (src/transport/list.h),
 * in the order the core asks them to take a new connection. Adding one is a folder under
 * src/transport/ with its table of operations, and one line in that list.
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

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

struct uls_conn;

/*
 * The smallest piece of a message a blocking send puts out on a window of `window` bytes
 * (a ring, the peer's fabric window), unless the rest of the message is smaller: half the
 * window, at most ULS_SEND_PIECE_MAX. Between two pieces the send waits with its
 * direction unlocked, and another thread or process sending on the same socket may put
 * its own message there: kernel TCP copies a small write whole into any room its send
 * buffer has, so writers that share a socket never see a small message of theirs cut by
 * another's, and neither do they on a window. Receivers count on it too: a blocking
 * sender fills the window to all but one piece, so an SO_RCVLOWAT above that counts as
 * that (or the mark would never be reached).
 */
#define ULS_SEND_PIECE_MAX (64u << 10)

static inline uint64_t uls_send_piece(uint64_t window)
{
	return window / 2 < ULS_SEND_PIECE_MAX ? window / 2 : ULS_SEND_PIECE_MAX;
}

/* The room for a transport's own state in each connection (struct uls_conn, tp_state). */
#define ULS_TP_STATE_SIZE 256

/* What the program asked of a socket before it connected, for the transport to size by. */
struct uls_conn_hints {
	uint32_t sndbuf, rcvbuf; /* SO_SNDBUF and SO_RCVBUF as set, 0: not set */
};

/* A transport's answer when asked to take a connection (connect, accept). */
enum uls_tp_answer {
	ULS_TP_TAKEN,    /* c is bound to the transport (it set c->tp) */
	ULS_TP_DECLINED, /* the connection was this transport's to take, but it cannot: the
			  * reason it wrote is final, no other transport is asked */
	ULS_TP_NOT_MINE, /* not a connection of this transport (a peer on another host for
			  * shared memory): the next one is asked, and this reason stands if
			  * none takes it */
};

struct uls_transport_ops {
	const char *name;

	/*
	 * ---- set-up: only transports of the table (list.h) have these ----
	 * connect: before the kernel's connect on fd to dst; c is fresh (role ULS_CLIENT,
	 * peer_sa dst). On ULS_TP_TAKEN its path is ULS_PATH_PENDING: the peer proves itself
	 * later. Otherwise why (wlen bytes) says why not, and the transport leaves nothing of
	 * its own behind (no mapping in tp_state, c->tp unchanged): the next transport, or
	 * kernel TCP, gets c as it came. accept and adopt follow the same rule, except that
	 * accept may decline after it bound c (shared memory does when the client moved back
	 * to TCP first): c then keeps its table, which serves it on TCP.
	 */
	enum uls_tp_answer (*connect)(struct uls_conn *c, int fd, const struct sockaddr *dst,
				      const struct uls_conn_hints *hints, char *why, size_t wlen);
	/* The kernel's connect failed after connect took c: undo it (c is dropped next). */
	void (*connect_failed)(struct uls_conn *c);
	/* The kernel's connect on fd completed at once (not EINPROGRESS) after connect took
	 * c: the transport may set the connection up now, within bounded time. May be NULL. */
	void (*connected)(struct uls_conn *c, int fd);
	/* An accepted socket fd (role ULS_SERVER, names filled in): as connect. */
	enum uls_tp_answer (*accept)(struct uls_conn *c, int fd, char *why, size_t wlen);
	/* A socket that reached this process without a conn (exec, SCM_RIGHTS, pidfd_getfd):
	 * 1 when this transport found the connection's state and bound c, else 0. */
	int (*adopt)(struct uls_conn *c, int fd);

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
	 * parts named in events change, or make bell (core/bell.h) readable, which is in
	 * the same kernel wait set, where the transport can (-1: none). */
	void (*arm)(struct uls_conn *c, int events, int bell);
	/* The kernel said the socket is readable: take what arm asked for off it. */
	void (*drain)(struct uls_conn *c, int fd);
	/* While the kernel decides readability (ULS_KERNEL_RX), it reported the end of the
	 * peer's TCP stream to a poller that waits for POLLOUT on the transport: learn what
	 * that says of the peer, reading no byte (they are the program's). May be NULL. */
	void (*tcp_end)(struct uls_conn *c, int fd);
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

	/* ---- the rest of a connection's life ---- */
	/* The connection is on kernel TCP for good (uls_conn_set_kernel). */
	void (*settled)(struct uls_conn *c);
	/* The last close of this process, no call of it inside any more, before fd closes. */
	void (*closing)(struct uls_conn *c, int fd);
	/* Closes fd, that last descriptor: close's result, with errno. */
	int (*close)(struct uls_conn *c, int fd);
	/* Wakes this process's threads that sleep inside the transport on c, to look again
	 * (c->closed and the rest). */
	void (*wake)(struct uls_conn *c);
	/* The conn's memory goes back: release what the transport holds for it. */
	void (*destroy)(struct uls_conn *c);
	/* Has another process of this side joined the connection (exec, SCM_RIGHTS)? */
	int (*joined)(struct uls_conn *c);
	/*
	 * Fork children, counted (may be NULL: every fork shares the socket for good).
	 * forked: before a fork, in the forking thread; 1 when the transport counts the child
	 * among the side's holders (each holder's close takes itself back).
	 * alone: is this process the side's only counted holder again (1 at most once the
	 * count says so; the transport forgets what it cached of a shared side)?
	 */
	int (*forked)(struct uls_conn *c);
	int (*alone)(struct uls_conn *c);
	/* TCP_INFO as the kernel filled it (len bytes): its counters made true. */
	void (*tcp_info)(struct uls_conn *c, void *info, socklen_t len);

	/*
	 * ---- the process: the core calls these for every transport of the table, through
	 * the uls_transports_* functions below; any may be NULL ----
	 */
	void (*process_init)(void); /* start-up, when ulsock is enabled */
	void (*idle)(void);         /* a thread is about to sleep: deferred clean-up */
	int (*fd_shortage)(void);   /* EMFILE: 1 when a descriptor was given back */
	void (*uid_changed)(void);  /* the process's user changed (setuid and friends) */
	void (*fork_prepare)(void); /* before a fork, in the forking thread */
	void (*atfork_child)(void); /* in the child of a fork, its only thread */
	/* Before an exec, which may fail; spawn: posix_spawn's, where this process goes on
	 * and only the child runs the new program. */
	void (*exec_begin)(int spawn);
	void (*exec_failed)(void);  /* ...and after one that did */
	/* The program's sigaction for a signal the transport keeps (SIGBUS for shared
	 * memory): 0 when it handled the call (*ret is the result), -1 otherwise. */
	int (*sigaction)(int sig, const struct sigaction *act, struct sigaction *old, int *ret);
	/* The process ends (exit, _exit): last words for the connections it holds, within a
	 * bounded time; the kernel closes the sockets next. */
	void (*process_exit)(void);
	/* A descriptor that a sleeper in poll, select or epoll_wait adds to its kernel set
	 * (readable when the transport may have news for its connections), or -1. */
	int (*wait_fd)(void);
	/* The longest such a sleeper may stay away, in ns, while the transport has work
	 * that nothing wakes it for (a handshake under way); 0: no limit. */
	uint64_t (*nap_ns)(void);
};

/* Kernel TCP, the pass-through (not in the table: every connection starts on it). */
extern const struct uls_transport_ops uls_kernel_transport;
/* The transport table: list.h's transports in order, then NULL (src/transport/table.c). */
extern const struct uls_transport_ops *const uls_transports[];

/* The process hooks of every transport of the table (core/transport.c). */
void uls_transports_init(void);
void uls_transports_idle(void);
int uls_transports_fd_shortage(void);
void uls_transports_uid_changed(void);
void uls_transports_fork_prepare(void);
void uls_transports_atfork_child(void);
void uls_transports_exec_begin(int spawn);
void uls_transports_exec_failed(void);
void uls_transports_exit(void);
/* The first wait descriptor of a transport of the table (wait_fd), or -1. */
int uls_transports_wait_fd(void);
/* The shortest nap_ns of the transports of the table that have a limit, or 0. */
uint64_t uls_transports_nap_ns(void);
int uls_transports_sigaction(int sig, const struct sigaction *act, struct sigaction *old,
			     int *ret);

#endif
