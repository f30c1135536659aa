/* SPDX-License-Identifier: MIT */
/*
 * A TCP connection as one process of one side sees it. The kernel socket stays the
 * program's descriptor; the conn adds the per-process state: references, the path, the
 * options ulsock keeps for the program, the names, the stat record, and the state of the
 * transport that carries its bytes (c->tp, c->tp_state; transport.h). What a transport
 * shares between processes lives in its own shared state (for shared memory, the segment's
 * struct uls_side), so a process that inherits the socket by fork, exec or SCM_RIGHTS
 * finds the same connection.
 */
#ifndef ULS_CONN_H
#define ULS_CONN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "bell.h"
#include "shortconn.h"
#include "stat.h"
#include "transport.h"
#include "wait.h"

enum uls_path { ULS_PATH_PENDING, ULS_PATH_SHM, ULS_PATH_KERNEL, ULS_PATH_FABRIC };
/* The side a process is on: the one that connected, or the one that accepted. */
enum uls_role { ULS_CLIENT = 0, ULS_SERVER = 1 };

struct uls_conn {
	pthread_mutex_t mu; /* process-local fields: refs, path, logged */
	struct uls_waitq wq; /* threads of this process sleeping on this connection */
	struct uls_bells bells; /* their bells, and those of epoll waits on it (bell.h) */
	int refs;           /* descriptors of this process that name the socket */
	_Atomic int life;   /* 1 while refs > 0, plus one per call in progress */
	_Atomic int closed; /* the last descriptor was closed: calls still inside fail */
	int role;           /* ULS_CLIENT or ULS_SERVER */
	_Atomic int path;
	/* Turns and bytes moved on a fast path (uls_conn_count, core/shortconn.h): beside
	 * path, which every call reads. */
	_Atomic uint32_t units;
	_Atomic uint64_t moved;
	_Atomic int nonblock;
	/* The socket was shared and is this process's alone now: O_NONBLOCK, which the
	 * others could change, is asked of the kernel once more (transport/shm/io.c). */
	_Atomic int nonblock_stale;
	_Atomic int peer_gone; /* the TCP stream from the peer ended (FIN or RST) */
	_Atomic int peer_err;  /* errno to report once the ring is drained, or 0 */
	_Atomic int broken;    /* the peer broke the protocol: ECONNRESET from now on */
	_Atomic int shut_rd, shut_wr;
	_Atomic int linger_reset; /* SO_LINGER {1, 0}: close resets the connection */
	_Atomic int reset_seen;   /* ECONNRESET was reported once; EOF from then on */
	/*
	 * The transport's own state of the connection: its folder defines what is in it
	 * (for shared memory, struct uls_shm_conn in transport/shm/shm_int.h) and asserts that
	 * it fits. Embedded rather than pointed to: the data path reads it on every call.
	 */
	_Alignas(16) unsigned char tp_state[ULS_TP_STATE_SIZE];
	uint64_t rcvtimeo_ns, sndtimeo_ns; /* 0: none */
	struct sockaddr_storage local_sa, peer_sa;
	char reason[96];
	int logged;
	_Atomic int shared; /* another process may hold the socket: ULS_SHARED_* (0: none) */
	_Atomic uint64_t sock_ino; /* the inode of this side's socket, once asked (0: not yet) */
	/*
	 * The program closed its last descriptor while calls of other threads were inside
	 * (uls_conn_close): the socket stays open on a private descriptor until the last of
	 * those calls ends, as the kernel keeps a file open for the calls that hold it. The
	 * calls' kernel work goes there from then on (uls_conn_fd).
	 */
	/*
	 * MSG_ZEROCOPY on the ring: a send copies at once, and the completion the program
	 * waits for is made here (uls_conn_zc_*): the ids of sends not yet reported, as the
	 * kernel numbers them per socket from 0. Under mu.
	 */
	int zc_state; /* SO_ZEROCOPY: 0 not asked yet, 1 off, 2 on */
	uint32_t zc_next, zc_lo, zc_hi;
	_Atomic int zc_pending;
	/* SO_PEEK_OFF on the ring as the program set it, -1: off (the kernel's default). */
	_Atomic int peek_off;
	_Atomic int tcp_inq; /* TCP_INQ: receives report the bytes left (TCP_CM_INQ) */
	_Atomic int kept;
	int kept_fd; /* an own descriptor (ownfd.h): a dup2 onto it moves it */
	_Atomic int app_nodelay; /* TCP_NODELAY as the program set it (the kernel's is 1) */
	/*
	 * SO_RCVLOWAT as the program set it (0: never). The kernel socket of a connection
	 * whose bytes may come on the ring keeps 1: its readiness and ulsock's own reads of it
	 * are about single wake-up bytes. It gets the program's value back with the kernel path.
	 */
	_Atomic int rcvlowat;
	_Atomic int solo_hold; /* a signal handler's close held the conn for a solo call */
	/* O_ASYNC came while the connection could not move back yet (uls_conn_async). */
	_Atomic int revert_owed;
	_Atomic int nodelay_forced; /* this process set TCP_NODELAY for wake-ups (under mu) */
	struct ulsock_stat_rec *stat;
	struct uls_conn *next; /* process-wide list */
	/* The transport (transport.h): kernel TCP until the connection is bound to another,
	 * then that one for good. */
	const struct uls_transport_ops *tp;
	/* The connection's name in its transport, the same in both ends' processes (for
	 * shared memory the segment's): tells a conn from one that reused its memory. 0 on
	 * kernel TCP. */
	uint64_t tp_id;
	/* A client's measure of its connection for core/shortconn.h: when it was made,
	 * whether it was kept on kernel TCP (then the kernel counts its units; on a fast
	 * path, units does), and whether its peer never took the fast path offered (under
	 * mu). */
	uint64_t born_ns;
	int short_kept;
	int short_refused;
};

/*
 * Some of c's bytes may travel off the kernel path: it is bound to a fast transport and
 * has not moved back to kernel TCP. The one test of "is this connection accelerated" (NULL:
 * no). Readiness decisions that must see the pending client use the attachment alone.
 */
static inline int uls_conn_accelerated(struct uls_conn *c)
{
	return c && c->tp != &uls_kernel_transport && atomic_load(&c->path) != ULS_PATH_KERNEL;
}

/* A call on c moved n bytes (n > 0 counts) in direction dir (0 send, 1 receive): its
 * count (a turn or a call) and bytes for core/shortconn.h. Two threads at once may lose
 * one; it only decides whether the connection was short. */
static inline void uls_conn_count(struct uls_conn *c, ssize_t n, unsigned dir)
{
	if (n <= 0)
		return;
	uint32_t u = atomic_load_explicit(&c->units, memory_order_relaxed);
	atomic_store_explicit(&c->units, uls_short_turn(u, dir), memory_order_relaxed);
	atomic_store_explicit(&c->moved,
			      atomic_load_explicit(&c->moved, memory_order_relaxed) + (uint64_t)n,
			      memory_order_relaxed);
}

/* The descriptor for c's kernel work: fd, or the one kept for calls a close overtook. */
static inline int uls_conn_fd(struct uls_conn *c, int fd)
{
	if (__builtin_expect(!atomic_load_explicit(&c->kept, memory_order_acquire), 1))
		return fd;
	return c->kept_fd;
}

/* Process-wide list of conns, for fork bookkeeping. */
struct uls_conn *uls_conn_alloc(void);
void uls_conn_get(struct uls_conn *c);
/*
 * A call in progress holds the conn, so that a close() from another thread cannot free
 * it underneath. uls_conn_hold fails when the conn is already gone.
 */
int uls_conn_hold(struct uls_conn *c);
void uls_conn_unhold(struct uls_conn *c);
/*
 * Drops one descriptor's reference and closes fd when do_close (dup2 onto a conn fd lets
 * the kernel close it). The last reference in this process releases the conn; when no
 * process holds the socket any more, the peer is told and the segment's name removed.
 * Returns what close() returned, with errno.
 */
int uls_conn_close(struct uls_conn *c, int fd, int do_close);

/*
 * connect(): before the kernel's connect on fd to dst (len bytes), the transports of the
 * table are asked to take the connection (transport.h). Returns its conn, NULL only when
 * out of memory; connect_done tells it the kernel's result (err: errno or 0) and returns
 * it, or NULL when the connect failed (the conn is gone then).
 */
struct uls_conn *uls_conn_connect_prepare(int fd, const struct sockaddr *dst, socklen_t len,
					  const struct uls_conn_hints *hints);
struct uls_conn *uls_conn_connect_done(struct uls_conn *c, int fd, int err);
/* accept(): decides the path of an accepted socket; returns its conn (maybe kernel). */
struct uls_conn *uls_conn_accept(int fd, const struct sockaddr *peer, socklen_t len);
/* A socket this process did not create or accept (exec, SCM_RIGHTS): asks the transports
 * to find its connection, else it is kernel TCP's. */
struct uls_conn *uls_conn_adopt(int fd);

/*
 * Wake-up bytes must not wait for Nagle: the kernel socket gets TCP_NODELAY before the
 * first one is sent (not before: most short connections never send one). From then on
 * the program's own setting is only remembered (app_nodelay).
 */
void uls_conn_nodelay(struct uls_conn *c, int fd);
/* setsockopt(TCP_NODELAY) by the program: returns what setsockopt returns, with errno. */
int uls_conn_set_app_nodelay(struct uls_conn *c, int fd, int on);
void uls_conn_set_kernel(struct uls_conn *c, int fd, const char *reason);
/*
 * SO_RCVLOWAT for a connection whose bytes may come on the ring: the kernel validates and
 * caps the value, c keeps it and the kernel socket keeps 1. Returns setsockopt's result.
 */
int uls_conn_set_rcvlowat(struct uls_conn *c, int fd, int val);
/* Takes over a SO_RCVLOWAT the socket had before it became c's (connect, accept). */
void uls_conn_adopt_rcvlowat(struct uls_conn *c, int fd, int val);
void uls_conn_log_path(struct uls_conn *c, int fd);
/* "LOCAL -> PEER", for log lines. */
const char *uls_conn_names(struct uls_conn *c, char *buf, size_t len);

/* An O_ASYNC move back that had to wait (uls_conn_async) is done now, if it can be. */
void uls_conn_revert_owed(struct uls_conn *c, int fd);

/* Readiness for poll and epoll. */
#define ULS_KERNEL_RX 0x1 /* receive readiness is the kernel's (TCP data before the switch) */
#define ULS_KERNEL_TX 0x2 /* send readiness is the kernel's (client still on TCP) */

/*
 * The conn of the send or receive this thread runs without a hold (a transport's solo
 * call: transport/shm/io.c), or NULL. A signal handler that closes its socket keeps the
 * conn for it (uls_conn_close).
 */
extern __thread struct uls_conn *uls_solo_call __attribute__((tls_model("initial-exec")));

/* SO_ZEROCOPY was set on fd (or asked now); returns 1 when on. */
int uls_conn_zc_enabled(struct uls_conn *c, int fd);
void uls_conn_zc_set(struct uls_conn *c, int on);
/* A send with MSG_ZEROCOPY took bytes: its completion (the next id) is pending. */
void uls_conn_zc_sent(struct uls_conn *c);
/* recvmsg(MSG_ERRQUEUE): the pending completions as the kernel reports them, or -EAGAIN. */
ssize_t uls_conn_zc_report(struct uls_conn *c, struct msghdr *msg);
/* Peeks of the next receive of this thread ignore SO_PEEK_OFF (splice's own). */
extern __thread int uls_peek_raw;

/* 1 if this process holds a connection that is not on the kernel path. */
int uls_conn_any_accelerated(void);

/*
 * Births and execs. A connection is being born from the moment its transport is chosen
 * (connect or accept) until its descriptor's entry names it: a walk of the descriptor
 * table (an exec's, handoff.c) cannot see it meanwhile. connect() and accept() bracket
 * that stretch with birth_begin and birth_end; an exec into a program without ulsock
 * closes the gate first, so that later births stay on kernel TCP, and waits for those
 * under way to end (at most wait_ns: 0 when none is left, else -EBUSY). The gate opens
 * again when the exec fails or the spawn returned.
 */
void uls_conn_birth_begin(void);
void uls_conn_birth_end(void);
int uls_conn_exec_gate_close(uint64_t wait_ns);
void uls_conn_exec_gate_open(void);

/*
 * Who else may hold a connection's socket (c->shared, any value but 0: it is shared).
 * STICKY: a process the library does not count (exec, spawn, popen, SCM_RIGHTS, a clone
 * in this memory): shared for good. FORK: fork children that the transport counts (its
 * forked op); a side whose other holders all closed is alone again
 * (uls_conn_maybe_shared), so a process-per-connection server's child, once its parent
 * closed the accepted socket, runs as if it had accepted it itself.
 */
#define ULS_SHARED_STICKY 1
#define ULS_SHARED_FORK 2

/* Every conn of the process: before fork (FORK), before spawn, popen, system, a clone
 * in this memory (STICKY). */
void uls_conn_mark_shared_all(int how);

/*
 * Calls fn for every conn of the process, under the list's lock, which is only tried (the
 * caller may be a signal handler that interrupted its holder: _exit); when it cannot be
 * had, fn is not called at all.
 */
void uls_conn_each_try(void (*fn)(struct uls_conn *c, void *arg), void *arg);

/* Records the inode of c's socket from fd, one of its descriptors (once). */
void uls_conn_note_socket(struct uls_conn *c, int fd);
/* The conn whose socket has inode ino (uls_conn_note_socket), or NULL. */
struct uls_conn *uls_conn_by_socket(uint64_t ino);
/* The other end of c when this process holds it too (a descriptor of it in *fd). */
struct uls_conn *uls_conn_local_peer(struct uls_conn *c, int *fd);
/*
 * Is the socket maybe held by another process too (fork, spawn, a process that joined)?
 * A conn shared only with counted fork children whose holders all closed their copies
 * becomes this process's alone here (then 0).
 */
int uls_conn_maybe_shared(struct uls_conn *c);

/* After fork, in the child: one more process holds each conn. */
void uls_conn_atfork_child(void);

/*
 * The connection's operations, through its transport (transport.h, where each is
 * described). Send, receive and shutdown return bytes, 0 at EOF, or -errno.
 */
static inline ssize_t uls_conn_send(struct uls_conn *c, int fd, const struct iovec *iov,
				    int iovcnt, int flags)
{
	return c->tp->send(c, fd, iov, iovcnt, flags);
}

static inline ssize_t uls_conn_recv(struct uls_conn *c, int fd, struct msghdr *msg, int flags)
{
	return c->tp->recv(c, fd, msg, flags);
}

static inline int uls_conn_shutdown(struct uls_conn *c, int fd, int how)
{
	return c->tp->shutdown(c, fd, how);
}

/* Readiness for poll and epoll (transport.h). */
static inline int uls_conn_kernel_parts(struct uls_conn *c)
{
	return c->tp->kernel_parts(c);
}

static inline int uls_conn_ready(struct uls_conn *c, int events)
{
	return c->tp->ready(c, events);
}

static inline void uls_conn_arm(struct uls_conn *c, int events, int bell)
{
	c->tp->arm(c, events, bell);
}

static inline int uls_conn_sleep_recv(struct uls_conn *c, int fd)
{
	return c->tp->sleep_recv(c, fd);
}

static inline void uls_conn_drain(struct uls_conn *c, int fd)
{
	c->tp->drain(c, fd);
}

static inline uint64_t uls_conn_gen(struct uls_conn *c, int events)
{
	return c->tp->gen(c, events);
}

static inline int uls_conn_inq(struct uls_conn *c, int fd, int *out)
{
	return c->tp->inq(c, fd, out);
}

static inline int uls_conn_outq(struct uls_conn *c, int fd, int *out)
{
	return c->tp->outq(c, fd, out);
}

static inline int uls_conn_atmark(struct uls_conn *c, int fd, int *out)
{
	return c->tp->atmark(c, fd, out);
}

/*
 * Moves an accelerated connection back to plain kernel TCP in place, before the socket
 * leaves ulsock's reach (exec without the preload, SCM_RIGHTS to a process without it,
 * fdopen). Both sides cooperate; no byte is lost or duplicated. Returns 0 or -errno
 * (-ETIMEDOUT when the peer did not answer in time, -EBUSY when it cannot be done).
 */
static inline int uls_conn_revert(struct uls_conn *c, int fd, int timeout_ms)
{
	return c->tp->revert(c, fd, timeout_ms);
}

/*
 * Moves only this side's sending direction back to kernel TCP (before urgent data, which
 * the kernel then sends). Needs nothing of the peer. Returns 0 or -errno.
 */
static inline int uls_conn_tx_to_kernel(struct uls_conn *c, int fd)
{
	return c->tp->tx_to_kernel(c, fd);
}

/* TCP_INFO as the kernel filled it (len bytes): the transport makes its counters true. */
static inline void uls_conn_fix_tcp_info(struct uls_conn *c, void *info, socklen_t len)
{
	c->tp->tcp_info(c, info, len);
}

/*
 * O_ASYNC or FIOASYNC was set on fd: signal-driven I/O is the kernel's (a signal for every
 * arrival), so the connection moves back to kernel TCP. A server that has not yet read the
 * client's bytes from before the switch moves at the receive that reads past them
 * (uls_conn_revert_owed, called with c->revert_owed set); until then the first arrival on
 * the ring still makes the kernel raise the signal.
 */
static inline void uls_conn_async(struct uls_conn *c, int fd)
{
	c->tp->async(c, fd);
}

#endif
