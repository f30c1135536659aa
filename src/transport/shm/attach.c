/* SPDX-License-Identifier: MIT */
/*
 * A connection's life on shared memory outside its calls: the client's segment made
 * before connect, the server's attach at accept, a process that finds the connection
 * again (exec, SCM_RIGHTS), the last close (telling the peer, removing the segment's
 * name), and the process-wide hooks of the transport table (core/transport.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm_int.h"

#include "../../core/config.h"
#include "../../core/handshake.h"
#include "../../core/log.h"
#include "../../os/cpu.h"
#include "../../os/libc.h"
#include "fence.h"
#include "guard.h"
#include "offers.h"
#include "shmlock.h"
#include "wakepipe.h"

static void bind_role(struct uls_conn *c, int role)
{
	struct uls_shm_conn *s = shm_of(c);

	c->role = role;
	s->me = &s->seg.hdr->side[role];
	s->peer = &s->seg.hdr->side[!role];
	s->tx = &s->seg.ring[role == ULS_CLIENT ? ULS_C2S : ULS_S2C];
	s->rx = &s->seg.ring[role == ULS_CLIENT ? ULS_S2C : ULS_C2S];
	c->tp = &uls_shm_transport;
	c->tp_id = s->seg.ino;
	atomic_store_explicit(&s->me->pid, (uint32_t)uls_pid(), memory_order_relaxed);
}

/*
 * side.refs counts the processes of a side that hold the socket and that the library
 * can count: the one that made the side (the client at connect, the server at accept),
 * and the children of its forks (shm_forked, before each fork), each taking itself back
 * when it closes its copy (shm_close). A holder that exits or execs without closing is
 * never taken back, nor is a process that joined through the segment (exec, SCM_RIGHTS:
 * `multi` shares the side for good), so the count errs high only: a side is alone
 * (shm_alone) when it says 1, this process is counted and nobody joined.
 */
static void count_first(struct uls_shm_conn *s)
{
	atomic_store(&s->me->refs, 1);
	s->counted = 1;
}

/* A ring as large as the socket buffer the program asked for (a power of two), or the
 * configured size. */
static uint64_t ring_size_for(uint32_t requested)
{
	uint64_t size = uls_cfg.ring_size;

	if (requested) {
		size = ULS_RING_MIN;
		while (size < requested && size < ULS_RING_MAX)
			size <<= 1;
	}
	return size;
}

static enum uls_tp_answer shm_connect(struct uls_conn *c, int fd, const struct sockaddr *dst,
				      const struct uls_conn_hints *hints, char *why, size_t wlen)
{
	struct uls_shm_conn *s = shm_of(c);
	struct stat st;
	int err;

	if (!uls_addr_is_local(dst)) {
		snprintf(why, wlen, "peer address is not on this host");
		return ULS_TP_NOT_MINE;
	}
	if (fstat(fd, &st) < 0) {
		snprintf(why, wlen, "fstat failed: %s", strerror(errno));
		return ULS_TP_DECLINED;
	}
	err = uls_seg_create(&s->seg, st.st_ino, uls_sock_cookie(fd),
			     ring_size_for(hints->sndbuf), ring_size_for(hints->rcvbuf));
	if (err < 0) {
		snprintf(why, wlen, "cannot create segment: %s", strerror(-err));
		return ULS_TP_DECLINED;
	}
	bind_role(c, ULS_CLIENT);
	count_first(s);
	atomic_store(&s->me->cookie, s->seg.hdr->id.client_cookie);
	atomic_store(&s->seg.hdr->both.offer, 1);
	uls_offer_made(dst);
	return ULS_TP_TAKEN;
}

/*
 * The client's offer is answered: the one of its server's and its own processes that
 * exchanges the segment's word first takes it off the client's board, once (a server
 * between finding the segment and attaching, a client that settles meanwhile: one).
 */
static void offer_answered(struct uls_shm_conn *s, const struct sockaddr *port)
{
	if (s->seg.hdr && atomic_exchange(&s->seg.hdr->both.offer, 0))
		uls_offer_done(port);
}

static void shm_connect_failed(struct uls_conn *c)
{
	offer_answered(shm_of(c), (struct sockaddr *)&c->peer_sa);
	uls_seg_remove(&shm_of(c)->seg);
}

static enum uls_tp_answer shm_accept(struct uls_conn *c, int fd, char *why, size_t wlen)
{
	struct uls_shm_conn *s = shm_of(c);
	const struct sockaddr *self = (struct sockaddr *)&c->local_sa;
	const struct sockaddr *peer = (struct sockaddr *)&c->peer_sa;
	struct uls_sockid id;
	int err, look;

	if (!peer->sa_family || !uls_addr_is_local(peer)) {
		snprintf(why, wlen, "peer address is not on this host");
		return ULS_TP_NOT_MINE;
	}
	/*
	 * No client of this user offered a segment to this port lately: no look (offers.h).
	 * With path lines in the log, where reasons are read, the sock_diag query is still
	 * made, so that the reason names what it tells (another user, a closed peer); only
	 * the open is skipped.
	 */
	look = uls_offer_waiting(self);
	if (!look && uls_cfg.log_level < ULS_LOG_INFO) {
		snprintf(why, wlen, ULS_OFFER_NONE_REASON);
		return ULS_TP_DECLINED;
	}
	err = uls_diag_lookup(peer, self, &id);
	if (err == -ENOENT) {
		snprintf(why, wlen, "peer socket not in this network namespace");
		return ULS_TP_DECLINED;
	}
	if (err < 0) {
		snprintf(why, wlen, "sock_diag lookup failed: %s", strerror(-err));
		return ULS_TP_DECLINED;
	}
	if (!uls_config_uid_trusted(id.uid)) {
		snprintf(why, wlen, "peer uid %u is another user (see ULSOCK_TRUST_UIDS)",
			 (unsigned)id.uid);
		return ULS_TP_DECLINED;
	}
	/* No inode: every process closed the client's socket (the kernel finishes its close
	 * alone), and with it any segment; what it sent before went over TCP. */
	if (id.ino == 0) {
		snprintf(why, wlen, "peer closed its socket before the accept");
		return ULS_TP_DECLINED;
	}
	if (!look) {
		snprintf(why, wlen, ULS_OFFER_NONE_REASON);
		return ULS_TP_DECLINED;
	}
	err = uls_seg_open_as(&s->seg, id.uid, id.ino, id.cookie);
	if (err == -ENOENT) {
		snprintf(why, wlen, "peer made no segment (no ulsock, or short connections)");
		return ULS_TP_DECLINED;
	}
	if (err < 0) {
		snprintf(why, wlen, "peer segment rejected: %s", strerror(-err));
		return ULS_TP_DECLINED;
	}
	/* Its board is this user's only where the client is this user (offers.h). */
	if (id.uid == uls_uid())
		offer_answered(s, self);
	/*
	 * The client made the file, server's side included: this side starts it afresh, so
	 * that nothing a client left there (a lock word held, a revert flag) stalls or
	 * misleads the server's calls. No process of this side has used it yet.
	 */
	memset((void *)&s->seg.hdr->side[ULS_SIDE_SERVER], 0, sizeof(struct uls_side));
	bind_role(c, ULS_SERVER);
	count_first(s);
	atomic_store(&s->me->cookie, uls_sock_cookie(fd));
	/* Release: a client that sees ATTACHED sees the cookie, and every later ring write. */
	atomic_fetch_or_explicit(&s->me->state, ULS_SIDE_ATTACHED, memory_order_seq_cst);
	/* Both sides store, fence, then read: a client going back to TCP sees ATTACHED, or
	 * this side sees its request and stays off the ring. The core moves the connection to
	 * kernel TCP with this reason. */
	if (atomic_load_explicit(&s->peer->tx_reverted, memory_order_seq_cst)) {
		atomic_fetch_or(&s->me->state, ULS_SIDE_DECLINED);
		snprintf(why, wlen, "peer moved back to kernel TCP before the accept");
		return ULS_TP_DECLINED;
	}
	atomic_store(&c->path, ULS_PATH_SHM);
	return ULS_TP_TAKEN;
}

/* A process that is not the first of its side: found by the segment, it joins the side. */
static int joined_as(struct uls_conn *c, int fd, int role, int path)
{
	bind_role(c, role);
	c->path = path;
	atomic_store(&c->shared, ULS_SHARED_STICKY);
	uls_conn_join_side(c);
	uls_dbg("fd=%d adopted as %s", fd, role == ULS_CLIENT ? "client" : "server");
	return 1;
}

static int shm_adopt(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);
	uint64_t cookie = uls_sock_cookie(fd);
	struct uls_sockid id;
	struct stat st;

	if (fstat(fd, &st) < 0)
		return 0;
	/* Our own socket's inode names the segment if we are the client. */
	if (uls_seg_open(&s->seg, st.st_ino, cookie) == 0) {
		int attached = atomic_load(&s->seg.hdr->side[ULS_SIDE_SERVER].state) & ULS_SIDE_ATTACHED;
		return joined_as(c, fd, ULS_CLIENT, attached ? ULS_PATH_SHM : ULS_PATH_PENDING);
	}
	if (uls_diag_lookup((struct sockaddr *)&c->peer_sa, (struct sockaddr *)&c->local_sa,
			    &id) == 0 &&
	    uls_seg_open_as(&s->seg, id.uid, id.ino, id.cookie) == 0) {
		struct uls_side *srv = &s->seg.hdr->side[ULS_SIDE_SERVER];
		if ((atomic_load(&srv->state) & ULS_SIDE_ATTACHED) &&
		    atomic_load(&srv->cookie) == cookie)
			return joined_as(c, fd, ULS_SERVER, ULS_PATH_SHM);
		uls_seg_unmap(&s->seg);
	}
	return 0;
}

static void shm_settled(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);

	if (c->role != ULS_CLIENT || !s->seg.hdr)
		return;
	/*
	 * A server that never attached never took the offer back (a server without ulsock,
	 * or one that declined): the client does, or the slot would make every server of its
	 * ports look for 10 s.
	 */
	offer_answered(s, (struct sockaddr *)&c->peer_sa);
	/* A client whose peer will never attach has no use for its segment's name. */
	uls_seg_remove(&s->seg);
}

/*
 * Is the socket self -> other closed in every process? The kernel knows. Once the socket
 * is gone, the lookup of its 4-tuple answers with a listening socket on the same local
 * address, if there is one (a server's): when its SO_COOKIE is known (not 0), another
 * socket's cookie says it is gone as well.
 */
static int socket_gone(const struct sockaddr_storage *self, const struct sockaddr_storage *other,
		       uint64_t cookie)
{
	struct uls_sockid id;
	int err = uls_diag_lookup((const struct sockaddr *)self, (const struct sockaddr *)other, &id);

	return err == -ENOENT || (err == 0 && (id.ino == 0 || (cookie && id.cookie != cookie)));
}

/*
 * socket_gone, for a socket whose last known holder just closed it or died: is it closed
 * in every process? A close ends the socket only where no other reference to its file
 * exists at that moment, and a process that reads /proc/<pid>/fd (lsof, ss -p, a
 * monitoring agent) holds one for the length of its call: the socket then ends in that
 * call, microseconds later. So an answer that the socket still lives is asked again,
 * twice, after a yield; a holder that keeps it (a fork child, a process it was passed to)
 * answers the same three times. (A loop of readlink over every /proc/<pid>/fd/<n> beside
 * fuzz_close_revert made about one close in 1,200 leave its peer untold, its side never
 * CLOSED.)
 */
static int gone_everywhere(const struct sockaddr_storage *self,
			   const struct sockaddr_storage *other, uint64_t cookie)
{
	for (int i = 0; i < 3; i++) {
		if (i)
			sched_yield();
		if (socket_gone(self, other, cookie))
			return 1;
	}
	return 0;
}

/*
 * Is the peer's last attached process still there? Then it removes the name itself when
 * it closes, and the kernel need not be asked (a sock_diag round trip per close). A pid
 * reused meanwhile only leaves the name to the sweep.
 */
static int peer_pid_alive(struct uls_conn *c)
{
	pid_t pid = (pid_t)atomic_load(&shm_of(c)->peer->pid);

	return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

/*
 * The last holder of our socket closed it: tell the peer, and remove the segment's name
 * when nobody can need it any more.
 */
static void release_shared(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);
	uint32_t peer_state;
	/* Kernel TCP resets a connection closed with bytes unread, as SO_LINGER {1, 0} does. */
	int64_t unread = uls_ring_readable(s->rx, atomic_load(&s->rx->sh->cons.head));
	int reset = atomic_load(&c->linger_reset) || unread != 0;

	atomic_store(&s->tx->sh->prod.eof, 1);
	atomic_store(&s->rx->sh->cons.closed, 1);
	atomic_fetch_or_explicit(&s->me->state, ULS_SIDE_CLOSED | (reset ? ULS_SIDE_RESET : 0),
				 memory_order_seq_cst);
	peer_state = atomic_load_explicit(&s->peer->state, memory_order_seq_cst);
	uls_conn_wake_peer(c);
	/*
	 * Whoever closes last removes the name. A FIN on the wake-up stream comes only from
	 * the peer's last close; a peer that died or exec'd away without closing is caught by
	 * its pid, or by the sweep of the next ulsock process.
	 */
	/*
	 * The client owns the name (a server of another user could not remove it from the
	 * sticky /dev/shm): it removes it when it is done. A server removes it when the
	 * client is gone without having done so.
	 */
	if (c->role == ULS_CLIENT || (peer_state & ULS_SIDE_CLOSED) ||
	    atomic_load(&c->peer_gone) ||
	    (!peer_pid_alive(c) && gone_everywhere(&c->peer_sa, &c->local_sa, 0)))
		uls_seg_remove(&s->seg);
}

/* How long a close waits for the peer's token lock, and then for wake-ups in flight. */
#define CLOSE_LOCK_NS (2000u * 1000000u)
#define CLOSE_DRAIN_NS (100u * 1000000u)

/*
 * A close with wake-up bytes unread makes the kernel reset the connection, and so does a
 * wake-up byte that arrives after the close; the reset throws away what this side's TCP
 * direction still holds unsent: the data a client sent before the switch, while a slow
 * server had not read it yet (test_net_basic lost the end of it that way, once in a few
 * hundred runs under load). Reading the wake-ups that are there is not enough: the peer
 * may send one more just before the close, or after it. So under the peer's token lock
 * this side says it refuses wake-ups (the peer checks under the same lock before sending
 * one) and reads the peer's count of those it sent; then it reads them all off TCP.
 *
 * The lock is held for the length of a send, but a holder that is preempted holds it for
 * as long as the scheduler keeps it off the CPU: on a crowded machine that is more than
 * 100 ms now and then (the short soak lost a connection that way in CI, when this wait
 * gave up at 100 ms and the peer's wake-up came after the close). The wait sleeps on the
 * lock's futex, so the holder gets the CPU, and lasts up to CLOSE_LOCK_NS; a peer that
 * holds its lock longer (hostile, or stopped) gets its refusal without the lock, and only
 * a wake-up it had already decided on can still reset its own connection. The wake-ups it
 * counted are in flight for microseconds; one it never sends costs CLOSE_DRAIN_NS.
 */
static void close_drain(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);
	uint64_t sent = 0, deadline;
	int locked = 0;

	if (!atomic_load(&c->peer_gone))
		locked = uls_shmlock_acquire_until(&s->peer->token_lock, &s->peer->token_owner,
						   uls_now_ns() + CLOSE_LOCK_NS);
	atomic_store(&s->me->tokens_refused, 1);
	if (!locked) {
		if (!atomic_load(&c->peer_gone))
			uls_warn("fd=%d: the peer held its wake-up lock through the close", fd);
		uls_conn_drain(c, fd);
		return;
	}
	sent = atomic_load(&s->peer->tokens_sent);
	uls_shmlock_release(&s->peer->token_lock, &s->peer->token_owner);
	deadline = uls_now_ns() + CLOSE_DRAIN_NS;
	for (;;) {
		uls_conn_drain(c, fd);
		if (atomic_load(&s->me->tokens_seen) >= sent || atomic_load(&c->peer_gone) ||
		    !uls_conn_reads_tokens(c) || uls_now_ns() >= deadline)
			break;
		struct pollfd p = {.fd = fd, .events = POLLIN};
		uls_libc.poll(&p, 1, 1);
	}
}

/*
 * A server of another user takes no offer of this one unless both trust each other
 * (ULSOCK_TRUST_UIDS): it looks at its own user's offer board and never opens the
 * segment. Only its socket's owner tells that apart from a server without ulsock, so the
 * client asks sock_diag, once per connection that falls back this way (and, with the
 * destination's connections learnt short, not at all after four in a row).
 */
void uls_conn_never_attached(struct uls_conn *c, int fd, const char *plain)
{
	struct uls_sockid id;
	char why[sizeof(c->reason)];

	if (uls_diag_lookup((struct sockaddr *)&c->peer_sa, (struct sockaddr *)&c->local_sa,
			    &id) != 0 || id.uid == uls_uid()) {
		uls_conn_set_kernel(c, fd, plain);
		return;
	}
	if (uls_config_uid_trusted(id.uid))
		snprintf(why, sizeof(why), "peer uid %u never attached (no ulsock, or it does not "
			 "trust this uid)", (unsigned)id.uid);
	else /* the server's words for the same connection */
		snprintf(why, sizeof(why), "peer uid %u is another user (see ULSOCK_TRUST_UIDS)",
			 (unsigned)id.uid);
	uls_conn_set_kernel(c, fd, why);
}

static void shm_closing(struct uls_conn *c, int fd)
{
	/* Wake-up bytes left unread make the kernel reset instead of close; but with other
	 * holders of the socket they may be another process's wake-up: leave them. */
	if (uls_conn_accelerated(c) && !uls_conn_maybe_shared(c))
		close_drain(c, fd);
	if (atomic_load(&c->path) == ULS_PATH_PENDING && c->role == ULS_CLIENT) {
		/* The server may have attached without this side having moved a byte since. */
		if (atomic_load(&shm_of(c)->peer->state) & ULS_SIDE_ATTACHED) {
			atomic_store(&c->path, ULS_PATH_SHM);
			uls_conn_log_path(c, fd);
		} else {
			uls_conn_never_attached(c, fd, "peer never attached (not running ulsock?)");
		}
	}
	/* A server of another user attached without taking the offer off this user's board. */
	if (c->role == ULS_CLIENT && atomic_load(&c->path) == ULS_PATH_SHM)
		offer_answered(shm_of(c), (struct sockaddr *)&c->peer_sa);
}

static int shm_forked(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);

	if (!s->counted || !s->seg.hdr)
		return 0;
	atomic_fetch_add(&s->me->refs, 1);
	return 1;
}

static int shm_alone(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);

	if (!s->counted || !s->seg.hdr || atomic_load(&s->me->refs) != 1 ||
	    atomic_load(&s->me->multi))
		return 0;
	/* The positions a solo call kept are from before the fork: the ring moved since. */
	s->tx_mine_ok = 0;
	s->rx_mine_ok = 0;
	return 1;
}

/* This process no longer holds the socket: one counted holder fewer (never below 0: the
 * peer can write the word). */
static void count_gone(struct uls_shm_conn *s)
{
	uint32_t n;

	if (!s->counted || !s->seg.hdr)
		return;
	s->counted = 0;
	n = atomic_load(&s->me->refs);
	while (n > 0 && !atomic_compare_exchange_weak(&s->me->refs, &n, n - 1))
		;
}

static int shm_close(struct uls_conn *c, int fd)
{
	/*
	 * Alone with the socket, this process tells the peer before its FIN can: a peer that
	 * sees the end of the stream first would take a reset for an end. Other processes
	 * may hold the socket (fork, SCM_RIGHTS): then the kernel is asked after the close.
	 */
	int alone = !uls_conn_maybe_shared(c);
	uint64_t cookie = alone ? 0 : uls_sock_cookie(fd);
	if (alone)
		release_shared(c);
	int rc = uls_libc.close(fd), err = errno;
	count_gone(shm_of(c));
	if (!alone && gone_everywhere(&c->local_sa, &c->peer_sa, cookie))
		release_shared(c);
	errno = err;
	return rc;
}

static void shm_destroy(struct uls_conn *c)
{
	uls_seg_retire(&shm_of(c)->seg);
}

static int shm_joined(struct uls_conn *c)
{
	/* A process that joins this side (exec, spawn, SCM_RIGHTS, pidfd_getfd) says so in
	 * the segment before its first call (uls_conn_join_side). */
	return atomic_load(&shm_of(c)->me->multi) != 0;
}

/* ---- the process ---- */

static void shm_process_init(void)
{
	uls_fence_init();
	uls_seg_sweep();
	/* A segment file shrunk under this process must break one connection, not kill the
	 * process (guard.h). */
	int err = uls_guard_install(uls_libc.sigaction);
	if (err < 0)
		uls_warn("no SIGBUS guard (%s): a truncated segment file kills the process",
			 strerror(-err));
}

/*
 * How many threads the process has now: the 20th field of /proc/self/stat, after the
 * command's parentheses. 0 when it cannot tell. (glibc's __libc_single_threaded stays
 * false in the child of a multi-threaded process's fork, which has one thread.)
 */
static long process_threads(void)
{
	char buf[512];

	if (uls_read_small_file("/proc/self/stat", buf, sizeof(buf)) <= 0)
		return 0;
	const char *p = strrchr(buf, ')');
	/* ") S ppid ..." : the state is field 3, num_threads field 20. */
	for (int field = 2; p && field < 20; field++)
		p = strchr(p + 1, ' ');
	return p ? strtol(p + 1, NULL, 10) : 0;
}

static void exit_conn(struct uls_conn *c, void *arg)
{
	int *alone = arg; /* the exiting thread is the process's only one; -1: not asked yet */
	struct uls_shm_conn *s;

	if (c->tp != &uls_shm_transport)
		return;
	s = shm_of(c);
	/*
	 * A client's socket that no other process holds (a fork child's is its parent's too):
	 * an offer its server never took goes back (as shm_settled), and the segment's name,
	 * which the client owns and would have removed at its close, goes (a server that
	 * attached keeps its mapping).
	 */
	if (c->role == ULS_CLIENT && s->seg.hdr && !atomic_load(&c->shared) &&
	    !atomic_load(&s->me->multi)) {
		offer_answered(s, (struct sockaddr *)&c->peer_sa);
		uls_seg_remove(&s->seg);
	}
	if (!s->counted)
		return;
	if (*alone < 0)
		*alone = process_threads() == 1;
	if (*alone)
		count_gone(s);
}

/*
 * The process ends without closing its sockets (exit, _exit): the kernel closes them
 * next, and nothing of this process runs on them any more. Its counts go first: a fork
 * child that exits without closing what it inherited (Redis's BGSAVE child: _exit) left
 * every one of its parent's connections counted twice, shared for good. Only where the
 * exiting thread is the only one (asked once, at the first counted connection): another
 * thread could still be inside a call on the connection until the process ends, which
 * the other holders must not take for gone.
 */
static void shm_process_exit(void)
{
	int alone = -1;

	uls_conn_each_try(exit_conn, &alone);
}

static void shm_atfork_child(void)
{
	uls_seg_atfork_child();
	uls_wakepipe_atfork_child();
}

static void shm_idle(void)
{
	uls_seg_reap();
}

static int shm_sigaction(int sig, const struct sigaction *act, struct sigaction *old, int *ret)
{
	/* SIGBUS stays with the segment guard, which keeps the program's action itself. */
	return sig == SIGBUS ? uls_guard_sigaction(act, old, ret) : -1;
}

const struct uls_transport_ops uls_shm_transport = {
	.name = "shm",
	.connect = shm_connect,
	.connect_failed = shm_connect_failed,
	.accept = shm_accept,
	.adopt = shm_adopt,
	.send = uls_shm_send,
	.recv = uls_shm_recv,
	.shutdown = uls_shm_shutdown,
	.kernel_parts = uls_shm_kernel_parts,
	.ready = uls_shm_ready,
	.arm = uls_shm_arm,
	.drain = uls_shm_drain,
	.tcp_end = uls_shm_tcp_end,
	.sleep_recv = uls_shm_sleep_recv,
	.gen = uls_shm_gen,
	.inq = uls_shm_inq,
	.outq = uls_shm_outq,
	.atmark = uls_shm_atmark,
	.revert = uls_shm_revert,
	.tx_to_kernel = uls_shm_tx_to_kernel,
	.async = uls_shm_async,
	.settled = shm_settled,
	.closing = shm_closing,
	.close = shm_close,
	.wake = uls_conn_wake_self,
	.destroy = shm_destroy,
	.joined = shm_joined,
	.forked = shm_forked,
	.alone = shm_alone,
	.tcp_info = uls_shm_tcp_info,
	.process_init = shm_process_init,
	.process_exit = shm_process_exit,
	.idle = shm_idle,
	.fd_shortage = uls_seg_spare_yield,
	.uid_changed = uls_seg_spare_drop,
	.atfork_child = shm_atfork_child,
	.exec_begin = uls_guard_exec_begin,
	.exec_failed = uls_guard_exec_failed,
	.sigaction = shm_sigaction,
};
