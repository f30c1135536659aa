/* SPDX-License-Identifier: MIT */
/* Connection lifecycle: set-up on either side, adoption, path decisions, close, fork. */
#include "conn.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "conn_io.h"
#include "../os/cpu.h"
#include "fdtable.h"
#include "handshake.h"
#include "log.h"
#include "../os/ownfd.h"
#include "../transport/shm/shmlock.h"
#include "../os/libc.h"

static pthread_mutex_t list_mu = PTHREAD_MUTEX_INITIALIZER;
static struct uls_conn *conn_list;

struct uls_conn *uls_conn_alloc(void)
{
	struct uls_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	pthread_mutex_init(&c->mu, NULL);
	uls_waitq_init(&c->wq);
	c->refs = 1;
	c->life = 1;
	c->kept_fd = -1;
	c->peek_off = -1;
	c->tp = &uls_kernel_transport;
	c->stat = uls_stat_slot();
	pthread_mutex_lock(&list_mu);
	c->next = conn_list;
	conn_list = c;
	pthread_mutex_unlock(&list_mu);
	return c;
}

static void conn_unlist(struct uls_conn *c)
{
	pthread_mutex_lock(&list_mu);
	for (struct uls_conn **p = &conn_list; *p; p = &(*p)->next) {
		if (*p == c) {
			*p = c->next;
			break;
		}
	}
	pthread_mutex_unlock(&list_mu);
}

/*
 * Freed conns wait a while before their memory goes back to malloc: a thread that read
 * the pointer just before a concurrent close() may still try uls_conn_hold on it.
 */
#define RETIRED_MAX 64
static struct uls_conn *retired[RETIRED_MAX];
static int nretired;

static void conn_free_later(struct uls_conn *c)
{
	struct uls_conn *old = NULL;

	pthread_mutex_lock(&list_mu);
	if (nretired == RETIRED_MAX) {
		old = retired[0];
		memmove(retired, retired + 1, (RETIRED_MAX - 1) * sizeof(*retired));
		nretired--;
	}
	retired[nretired++] = c;
	pthread_mutex_unlock(&list_mu);
	if (old) {
		uls_waitq_fini(&old->wq);
		pthread_mutex_destroy(&old->mu);
		free(old);
	}
}

/* Accepts NULL and half-built conns. */
static void conn_destroy(struct uls_conn *c)
{
	if (!c)
		return;
	conn_unlist(c);
	uls_stat_release(c->stat);
	c->stat = NULL;
	uls_seg_retire(&c->seg);
	conn_free_later(c);
}

int uls_conn_hold(struct uls_conn *c)
{
	int v = atomic_load(&c->life);

	while (v > 0)
		if (atomic_compare_exchange_weak(&c->life, &v, v + 1))
			return 1;
	return 0;
}

static void close_last(struct uls_conn *c, int fd, int do_close, int *rc, int *err);

void uls_conn_unhold(struct uls_conn *c)
{
	if (atomic_fetch_sub(&c->life, 1) != 1)
		return;
	if (atomic_load(&c->kept)) {
		/* The last call a close overtook ended: the close happens now (kept_for_calls).
		 * The number leaves the library's own before it is closed, so that a file the
		 * program opens on it next is the program's. */
		int rc, err, fd = c->kept_fd;
		atomic_store(&c->kept, 0);
		uls_own_fd_forget(&c->kept_fd);
		close_last(c, fd, 1, &rc, &err);
	}
	conn_destroy(c);
}

void uls_conn_get(struct uls_conn *c)
{
	pthread_mutex_lock(&c->mu);
	c->refs++;
	pthread_mutex_unlock(&c->mu);
}

static void bind_role(struct uls_conn *c, int role)
{
	c->role = role;
	c->me = &c->seg.hdr->side[role];
	c->peer = &c->seg.hdr->side[!role];
	c->tx = &c->seg.ring[role == ULS_CLIENT ? ULS_C2S : ULS_S2C];
	c->rx = &c->seg.ring[role == ULS_CLIENT ? ULS_S2C : ULS_C2S];
	c->tp = &uls_shm_transport;
	atomic_store_explicit(&c->me->pid, (uint32_t)uls_pid(), memory_order_relaxed);
}

/* Addresses are kept binary; they are formatted only for the log and `ulsock stat`. */
static void fill_names(struct uls_conn *c, int fd)
{
	socklen_t len = sizeof(c->local_sa);

	if (getsockname(fd, (struct sockaddr *)&c->local_sa, &len) < 0)
		c->local_sa.ss_family = 0;
	len = sizeof(c->peer_sa);
	if (c->peer_sa.ss_family == 0 &&
	    getpeername(fd, (struct sockaddr *)&c->peer_sa, &len) < 0)
		c->peer_sa.ss_family = 0;
	if (c->stat) {
		c->stat->fd = fd;
		c->stat->role = (uint32_t)c->role;
		memcpy(c->stat->local, &c->local_sa, sizeof(c->stat->local));
		memcpy(c->stat->peer, &c->peer_sa, sizeof(c->stat->peer));
	}
}

const char *uls_conn_names(struct uls_conn *c, char *buf, size_t len)
{
	char l[64], p[64];

	uls_addr_str((struct sockaddr *)&c->local_sa, l, sizeof(l));
	uls_addr_str((struct sockaddr *)&c->peer_sa, p, sizeof(p));
	snprintf(buf, len, "%s -> %s", l, p);
	return buf;
}

void uls_conn_log_path(struct uls_conn *c, int fd)
{
	int path = atomic_load(&c->path);

	pthread_mutex_lock(&c->mu);
	if (c->logged || path == ULS_PATH_PENDING) {
		pthread_mutex_unlock(&c->mu);
		return;
	}
	c->logged = 1;
	pthread_mutex_unlock(&c->mu);
	if (c->stat) {
		memcpy(c->stat->reason, c->reason, sizeof(c->stat->reason));
		atomic_store(&c->stat->path, (uint32_t)path);
	}
	if (uls_cfg.log_level < ULS_LOG_INFO)
		return;
	char names[140];
	uls_conn_names(c, names, sizeof(names));
	if (path == ULS_PATH_SHM)
		uls_info("fd=%d %s path=shm", fd, names);
	else
		uls_info("fd=%d %s path=kernel reason=%s", fd, names, c->reason);
}

void uls_conn_nodelay(struct uls_conn *c, int fd)
{
	int one = 1, cur = 0;
	socklen_t len = sizeof(cur);

	if (atomic_load_explicit(&c->nodelay_forced, memory_order_acquire))
		return;
	pthread_mutex_lock(&c->mu);
	if (!atomic_load(&c->nodelay_forced)) {
		if (uls_libc.getsockopt(uls_conn_fd(c, fd), IPPROTO_TCP, TCP_NODELAY, &cur, &len) == 0)
			atomic_store(&c->app_nodelay, cur);
		uls_libc.setsockopt(uls_conn_fd(c, fd), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		atomic_store_explicit(&c->nodelay_forced, 1, memory_order_release);
	}
	pthread_mutex_unlock(&c->mu);
}

int uls_conn_set_app_nodelay(struct uls_conn *c, int fd, int on)
{
	int r = 0;

	pthread_mutex_lock(&c->mu);
	if (!atomic_load(&c->nodelay_forced))
		r = uls_libc.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
	if (r == 0)
		atomic_store(&c->app_nodelay, on != 0);
	pthread_mutex_unlock(&c->mu);
	return r;
}

int uls_conn_set_rcvlowat(struct uls_conn *c, int fd, int val)
{
	int eff = 1;
	socklen_t len = sizeof(eff);

	if (uls_libc.setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &val, sizeof(val)) < 0)
		return -1;
	if (uls_libc.getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &eff, &len) < 0)
		eff = val > 0 ? val : 1;
	uls_conn_adopt_rcvlowat(c, fd, eff);
	return 0;
}

void uls_conn_adopt_rcvlowat(struct uls_conn *c, int fd, int val)
{
	int one = 1;

	pthread_mutex_lock(&c->mu);
	atomic_store(&c->rcvlowat, val);
	if (atomic_load(&c->path) != ULS_PATH_KERNEL && val != 1)
		uls_libc.setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one));
	pthread_mutex_unlock(&c->mu);
}

void uls_conn_set_kernel(struct uls_conn *c, int fd, const char *reason)
{
	int lowat, left = 0;

	pthread_mutex_lock(&c->mu);
	if (atomic_load(&c->path) != ULS_PATH_KERNEL) {
		left = c->logged; /* its path was logged: say that it changed, and why */
		snprintf(c->reason, sizeof(c->reason), "%s", reason);
		atomic_store(&c->path, ULS_PATH_KERNEL);
		/* The kernel decides from now on, with the program's low-water mark. */
		lowat = atomic_load(&c->rcvlowat);
		if (lowat > 1)
			uls_libc.setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat));
	}
	pthread_mutex_unlock(&c->mu);
	/* A client whose peer will never attach has no use for its segment's name. */
	if (c->role == ULS_CLIENT && c->seg.hdr)
		uls_seg_remove(&c->seg);
	if (left && uls_cfg.log_level >= ULS_LOG_INFO) {
		char names[140];
		uls_info("fd=%d %s left the fast path: %s", fd,
			 uls_conn_names(c, names, sizeof(names)), reason);
	}
	uls_conn_log_path(c, fd);
}

struct uls_conn *uls_conn_connect_prepare(int fd, const struct sockaddr *dst, uint64_t c2s,
					  uint64_t s2c, char *reason, size_t rlen)
{
	struct uls_conn *c;
	struct stat st;
	int err;

	if (uls_cfg.disabled) {
		snprintf(reason, rlen, "disabled by ULSOCK_DISABLE");
		return NULL;
	}
	if (atomic_load(&uls_cfg.off_reason)) {
		snprintf(reason, rlen, "%s", atomic_load(&uls_cfg.off_reason));
		return NULL;
	}
	if (!uls_addr_is_local(dst)) {
		snprintf(reason, rlen, "peer address is not on this host");
		return NULL;
	}
	if (fstat(fd, &st) < 0) {
		snprintf(reason, rlen, "fstat failed: %s", strerror(errno));
		return NULL;
	}
	int fl = uls_libc.fcntl(fd, F_GETFL);
	if (fl >= 0 && (fl & O_ASYNC)) { /* uls_conn_async */
		snprintf(reason, rlen, "O_ASYNC is set: signal-driven I/O is kernel TCP's");
		return NULL;
	}
	c = uls_conn_alloc();
	if (!c) {
		snprintf(reason, rlen, "out of memory");
		return NULL;
	}
	err = uls_seg_create(&c->seg, st.st_ino, uls_sock_cookie(fd), c2s, s2c);
	if (err < 0) {
		snprintf(reason, rlen, "cannot create segment: %s", strerror(-err));
		uls_conn_unhold(c);
		return NULL;
	}
	bind_role(c, ULS_CLIENT);
	atomic_store(&c->me->cookie, c->seg.hdr->id.client_cookie);
	memcpy(&c->peer_sa, dst, dst->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
							   : sizeof(struct sockaddr_in));
	c->path = ULS_PATH_PENDING;
	return c;
}

void uls_conn_connect_done(struct uls_conn *c, int fd, int err)
{
	if (err && err != EINPROGRESS) {
		uls_seg_remove(&c->seg);
		uls_conn_unhold(c);
		return;
	}
	fill_names(c, fd);
}

/* Decides the path of an accepted socket; returns NULL on success, or the reason. */
static const char *server_attach(struct uls_conn *c, int fd, char *why, size_t wlen)
{
	const struct sockaddr *self = (struct sockaddr *)&c->local_sa;
	const struct sockaddr *peer = (struct sockaddr *)&c->peer_sa;
	struct uls_sockid id;
	int err;

	if (uls_cfg.disabled)
		return "disabled by ULSOCK_DISABLE";
	if (atomic_load(&uls_cfg.off_reason))
		return atomic_load(&uls_cfg.off_reason);
	if (!peer->sa_family || !uls_addr_is_local(peer))
		return "peer address is not on this host";
	err = uls_diag_lookup(peer, self, &id);
	if (err == -ENOENT)
		return "peer socket not in this network namespace";
	if (err < 0) {
		snprintf(why, wlen, "sock_diag lookup failed: %s", strerror(-err));
		return why;
	}
	if (!uls_config_uid_trusted(id.uid)) {
		snprintf(why, wlen, "peer uid %u is another user (see ULSOCK_TRUST_UIDS)",
			 (unsigned)id.uid);
		return why;
	}
	err = uls_seg_open_as(&c->seg, id.uid, id.ino, id.cookie);
	if (err == -ENOENT)
		return "peer does not run ulsock";
	if (err < 0) {
		snprintf(why, wlen, "peer segment rejected: %s", strerror(-err));
		return why;
	}
	bind_role(c, ULS_SERVER);
	atomic_store(&c->me->cookie, uls_sock_cookie(fd));
	/* Release: a client that sees ATTACHED sees the cookie, and every later ring write. */
	atomic_fetch_or_explicit(&c->me->state, ULS_SIDE_ATTACHED, memory_order_seq_cst);
	/* Both sides store, fence, then read: a client going back to TCP sees ATTACHED, or
	 * this side sees its request and stays off the ring. */
	if (atomic_load_explicit(&c->peer->tx_reverted, memory_order_seq_cst)) {
		atomic_fetch_or(&c->me->state, ULS_SIDE_DECLINED);
		return "peer moved back to kernel TCP before the accept";
	}
	atomic_store(&c->path, ULS_PATH_SHM);
	return NULL;
}

struct uls_conn *uls_conn_accept(int fd, const struct sockaddr *peer, socklen_t len)
{
	struct uls_conn *c = uls_conn_alloc();
	const char *reason;
	char why[96];

	if (!c)
		return NULL;
	c->role = ULS_SERVER;
	memcpy(&c->peer_sa, peer, len < sizeof(c->peer_sa) ? len : sizeof(c->peer_sa));
	fill_names(c, fd);
	reason = server_attach(c, fd, why, sizeof(why));
	if (reason)
		uls_conn_set_kernel(c, fd, reason);
	else
		uls_conn_log_path(c, fd);
	return c;
}

static uint64_t timeo_of(int fd, int name)
{
	struct timeval tv = {0, 0};
	socklen_t len = sizeof(tv);

	if (uls_libc.getsockopt(fd, SOL_SOCKET, name, &tv, &len) < 0)
		return 0;
	return (uint64_t)tv.tv_sec * 1000000000u + (uint64_t)tv.tv_usec * 1000u;
}

/*
 * A connection found again (exec, SCM_RIGHTS, pidfd_getfd) takes over the socket's
 * options the earlier holder set, which the kernel keeps: the timeouts bound ulsock's
 * waits. In a process that may no longer use rings it goes back to TCP.
 */
static struct uls_conn *adopted(struct uls_conn *c, int fd)
{
	const char *why = atomic_load(&uls_cfg.off_reason);

	c->rcvtimeo_ns = timeo_of(fd, SO_RCVTIMEO);
	c->sndtimeo_ns = timeo_of(fd, SO_SNDTIMEO);

	if (why) {
		int r = uls_conn_revert(c, fd, 2000);
		if (r < 0)
			uls_err("fd=%d: %s, but the connection could not move back to kernel TCP: %s",
				fd, why, strerror(-r));
	}
	return c;
}

struct uls_conn *uls_conn_adopt(int fd)
{
	struct uls_conn *c;
	struct uls_sockid id;
	struct stat st;
	uint64_t cookie = uls_sock_cookie(fd);

	if (fstat(fd, &st) < 0)
		return NULL;
	c = uls_conn_alloc();
	if (!c)
		return NULL;
	fill_names(c, fd);
	if (uls_cfg.disabled) {
		c->role = ULS_SERVER;
		uls_conn_set_kernel(c, fd, "disabled by ULSOCK_DISABLE");
		return c;
	}
	/* Our own socket's inode names the segment if we are the client. */
	if (uls_seg_open(&c->seg, st.st_ino, cookie) == 0) {
		bind_role(c, ULS_CLIENT);
		c->path = (atomic_load(&c->peer->state) & ULS_SIDE_ATTACHED) ? ULS_PATH_SHM
									      : ULS_PATH_PENDING;
		atomic_store(&c->shared, 1);
		uls_conn_join_side(c);
		uls_dbg("fd=%d adopted as client", fd);
		return adopted(c, fd);
	}
	if (uls_diag_lookup((struct sockaddr *)&c->peer_sa, (struct sockaddr *)&c->local_sa,
			    &id) == 0 &&
	    uls_seg_open_as(&c->seg, id.uid, id.ino, id.cookie) == 0) {
		struct uls_side *srv = &c->seg.hdr->side[ULS_SERVER];
		if ((atomic_load(&srv->state) & ULS_SIDE_ATTACHED) &&
		    atomic_load(&srv->cookie) == cookie) {
			bind_role(c, ULS_SERVER);
			c->path = ULS_PATH_SHM;
			atomic_store(&c->shared, 1);
			uls_conn_join_side(c);
			uls_dbg("fd=%d adopted as server", fd);
			return adopted(c, fd);
		}
		uls_seg_unmap(&c->seg);
	}
	c->role = ULS_SERVER;
	uls_conn_set_kernel(c, fd, "socket reached this process without ulsock state");
	return c;
}

/* Is the socket self -> other closed in every process? The kernel knows. */
static int socket_gone(const struct sockaddr_storage *self, const struct sockaddr_storage *other)
{
	struct uls_sockid id;
	int err = uls_diag_lookup((const struct sockaddr *)self, (const struct sockaddr *)other, &id);

	return err == -ENOENT || (err == 0 && id.ino == 0);
}

/*
 * Is the peer's last attached process still there? Then it removes the name itself when
 * it closes, and the kernel need not be asked (a sock_diag round trip per close). A pid
 * reused meanwhile only leaves the name to the sweep.
 */
static int peer_pid_alive(struct uls_conn *c)
{
	pid_t pid = (pid_t)atomic_load(&c->peer->pid);

	return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

/*
 * The last holder of our socket closed it: tell the peer, and remove the segment's name
 * when nobody can need it any more.
 */
static void conn_release_shared(struct uls_conn *c)
{
	uint32_t peer_state;
	/* Kernel TCP resets a connection closed with bytes unread, as SO_LINGER {1, 0} does. */
	int64_t unread = uls_ring_readable(c->rx, atomic_load(&c->rx->sh->cons.head));
	int reset = atomic_load(&c->linger_reset) || unread != 0;

	atomic_store(&c->tx->sh->prod.eof, 1);
	atomic_store(&c->rx->sh->cons.closed, 1);
	atomic_fetch_or_explicit(&c->me->state, ULS_SIDE_CLOSED | (reset ? ULS_SIDE_RESET : 0),
				 memory_order_seq_cst);
	peer_state = atomic_load_explicit(&c->peer->state, memory_order_seq_cst);
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
	    (!peer_pid_alive(c) && socket_gone(&c->peer_sa, &c->local_sa)))
		uls_seg_remove(&c->seg);
}

/* How long a close waits for the peer's token lock and for wake-ups in flight. */
#define CLOSE_DRAIN_NS (100u * 1000000u)

/*
 * A close with wake-up bytes unread makes the kernel reset the connection, and the reset
 * throws away what this side's TCP direction still holds unsent: the data a client sent
 * before the switch, while a slow server had not read it yet (test_net_basic lost the
 * end of it that way, once in a few hundred runs under load). Reading the wake-ups that
 * are there is not enough: the peer may send one more just before the close. So under
 * the peer's token lock this side says it refuses wake-ups (the peer checks under the same
 * lock before sending one) and reads the peer's count of those it sent; then it reads
 * them all off TCP. They are in flight for microseconds; a peer that holds its lock or
 * never sends what it counted (hostile, or gone) costs at most CLOSE_DRAIN_NS.
 */
static void close_drain(struct uls_conn *c, int fd)
{
	uint64_t deadline = uls_now_ns() + CLOSE_DRAIN_NS, sent = 0;
	int refused;

	while (!(refused = uls_shmlock_try(&c->peer->token_lock, &c->peer->token_owner)) &&
	       uls_now_ns() < deadline)
		sched_yield();
	if (refused) {
		atomic_store(&c->me->tokens_refused, 1);
		sent = atomic_load(&c->peer->tokens_sent);
		uls_shmlock_release(&c->peer->token_lock, &c->peer->token_owner);
	}
	for (;;) {
		uls_conn_drain(c, fd);
		if (!refused || atomic_load(&c->me->tokens_seen) >= sent ||
		    atomic_load(&c->peer_gone) || !uls_conn_reads_tokens(c) ||
		    uls_now_ns() >= deadline)
			break;
		struct pollfd p = {.fd = fd, .events = POLLIN};
		uls_libc.poll(&p, 1, 1);
	}
}

/*
 * The program closed the last descriptor of c while calls of other threads are inside
 * (a recv blocked on it, a poll that names it). The kernel keeps the file open for such
 * calls until they return, with the connection alive: a blocked recv still gets the data
 * that comes. So the socket moves to a private descriptor, the program's number is
 * closed at once, and the rest of the close waits for the last of those calls
 * (uls_conn_unhold). Returns 1 when kept.
 */
static int kept_for_calls(struct uls_conn *c, int fd)
{
	if (atomic_load(&c->life) <= 1 || atomic_load(&c->kept))
		return 0;
	int k = uls_libc.fcntl(fd, F_DUPFD_CLOEXEC, ULS_OWN_FD_MIN);
	if (k < 0)
		return 0;
	uls_own_fd_take(k, &c->kept_fd);
	/* Release: a call that sees the flag uses the descriptor, never the old number. */
	atomic_store_explicit(&c->kept, 1, memory_order_release);
	return 1;
}

/* What a close does when no call of this process is inside any more. */
static void close_last(struct uls_conn *c, int fd, int do_close, int *rc, int *err)
{
	*rc = 0;
	*err = 0;
	/* Wake-up bytes left unread make the kernel reset instead of close; but with other
	 * holders of the socket they may be another process's wake-up: leave them. */
	if (uls_conn_accelerated(c) && !uls_conn_maybe_shared(c))
		close_drain(c, fd);
	if (atomic_load(&c->path) == ULS_PATH_PENDING && c->role == ULS_CLIENT) {
		/* The server may have attached without this side having moved a byte since. */
		if (atomic_load(&c->peer->state) & ULS_SIDE_ATTACHED) {
			atomic_store(&c->path, ULS_PATH_SHM);
			uls_conn_log_path(c, fd);
		} else {
			uls_conn_set_kernel(c, fd, "peer never attached (not running ulsock?)");
		}
	}
	atomic_store(&c->closed, 1);
	if (c->stat && atomic_load(&c->path) == ULS_PATH_SHM && uls_cfg.log_level >= ULS_LOG_INFO) {
		char names[140];
		uls_info("fd=%d %s closed: sent %llu bytes, received %llu bytes in this process", fd,
			 uls_conn_names(c, names, sizeof(names)),
			 (unsigned long long)atomic_load(&c->stat->tx_bytes),
			 (unsigned long long)atomic_load(&c->stat->rx_bytes));
	}
	if (do_close) {
		/*
		 * Alone with the socket, this process tells the peer before its FIN can: a
		 * peer that sees the end of the stream first would take a reset for an end.
		 * Other processes may hold the socket (fork, SCM_RIGHTS): then the kernel is
		 * asked after the close.
		 */
		int alone = c->seg.hdr && !uls_conn_maybe_shared(c);
		if (alone)
			conn_release_shared(c);
		*rc = uls_libc.close(fd);
		*err = errno;
		if (c->seg.hdr && !alone && socket_gone(&c->local_sa, &c->peer_sa))
			conn_release_shared(c);
	}
	/* Threads still waiting on the connection in this process give up. */
	uls_conn_wake_self(c);
	uls_waitq_kick(&c->wq);
}

int uls_conn_close(struct uls_conn *c, int fd, int do_close)
{
	int last, rc = 0, err = 0;

	pthread_mutex_lock(&c->mu);
	last = --c->refs == 0;
	pthread_mutex_unlock(&c->mu);
	if (!last)
		return do_close ? uls_libc.close(fd) : 0;
	/* A signal handler closes the socket of the call it interrupted: keep the conn for
	 * that call, which drops this hold when it returns (conn_io.c, solo_end). */
	if (uls_solo_call == c && !atomic_load(&c->solo_hold)) {
		atomic_fetch_add(&c->life, 1);
		atomic_store(&c->solo_hold, 1);
	}
	if (kept_for_calls(c, fd)) {
		if (do_close) {
			rc = uls_libc.close(fd);
			err = errno;
		}
	} else {
		close_last(c, fd, do_close, &rc, &err);
	}
	uls_conn_unhold(c);
	errno = err;
	return rc;
}

void uls_conn_atfork_child(void)
{
	void *parent_stats = uls_stat_atfork_child();

	/* Only this thread exists in the child: the list needs no lock, mutexes a reset. */
	pthread_mutex_init(&list_mu, NULL);
	uls_seg_atfork_child();
	for (struct uls_conn *c = conn_list; c; c = c->next) {
		struct ulsock_stat_rec *old = c->stat;
		pthread_mutex_init(&c->mu, NULL);
		uls_waitq_init(&c->wq);
		uls_bells_reset(&c->bells);
		c->stat = uls_stat_slot();
		if (c->stat && old) {
			memcpy((char *)c->stat + sizeof(old->used), (char *)old + sizeof(old->used),
			       sizeof(*old) - sizeof(old->used));
		}
	}
	uls_stat_unmap(parent_stats);
}

void uls_conn_mark_shared_all(void)
{
	pthread_mutex_lock(&list_mu);
	for (struct uls_conn *c = conn_list; c; c = c->next)
		atomic_store(&c->shared, 1);
	pthread_mutex_unlock(&list_mu);
}

void uls_conn_note_socket(struct uls_conn *c, int fd)
{
	struct stat st;

	if (!atomic_load(&c->sock_ino) && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode))
		atomic_store(&c->sock_ino, (uint64_t)st.st_ino);
}

struct uls_conn *uls_conn_by_socket(uint64_t ino)
{
	struct uls_conn *found = NULL;

	pthread_mutex_lock(&list_mu);
	for (struct uls_conn *c = conn_list; c && !found; c = c->next)
		if (atomic_load(&c->sock_ino) == ino)
			found = c;
	pthread_mutex_unlock(&list_mu);
	return found;
}

struct uls_conn *uls_conn_local_peer(struct uls_conn *c, int *fd)
{
	struct uls_conn *found = NULL;

	if (!c->seg.hdr)
		return NULL;
	pthread_mutex_lock(&list_mu);
	for (struct uls_conn *p = conn_list; p && !found; p = p->next)
		if (p != c && p->seg.hdr && p->seg.ino == c->seg.ino && p->role != c->role)
			found = p;
	pthread_mutex_unlock(&list_mu);
	if (!found)
		return NULL;
	int max = uls_fd_max();
	for (int i = 0; i < max; i++)
		if (uls_fd_conn(i) == found) {
			*fd = i;
			return found;
		}
	return NULL;
}

int uls_conn_maybe_shared(struct uls_conn *c)
{
	/* A process that joins this side (exec, spawn, SCM_RIGHTS, pidfd_getfd) says so in
	 * the segment before its first call (uls_conn_join_side). */
	return atomic_load(&c->shared) || (c->seg.hdr && atomic_load(&c->me->multi));
}

int uls_conn_any_accelerated(void)
{
	int any = 0;

	pthread_mutex_lock(&list_mu);
	for (struct uls_conn *c = conn_list; c && !any; c = c->next)
		any = uls_conn_accelerated(c);
	pthread_mutex_unlock(&list_mu);
	return any;
}
