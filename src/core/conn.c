/* SPDX-License-Identifier: MIT */
/*
 * Connection lifecycle: set-up on either side and adoption (each asks the transports of
 * the table in turn: transport.h), path decisions, close, fork.
 */
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
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "fdtable.h"
#include "handshake.h"
#include "log.h"
#include "../os/cpu.h"
#include "../os/libc.h"
#include "../os/ownfd.h"

__thread struct uls_conn *uls_solo_call __attribute__((tls_model("initial-exec")));

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
	c->tp->destroy(c);
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
	else if (path == ULS_PATH_FABRIC)
		uls_info("fd=%d %s path=fabric provider=%s", fd, names, c->reason);
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
		/* A client offered the fast path that its peer never took (core/shortconn.h). */
		if (atomic_load(&c->path) == ULS_PATH_PENDING && c->role == ULS_CLIENT &&
		    c->tp != &uls_kernel_transport)
			c->short_refused = 1;
		left = c->logged; /* its path was logged: say that it changed, and why */
		snprintf(c->reason, sizeof(c->reason), "%s", reason);
		atomic_store(&c->path, ULS_PATH_KERNEL);
		/* The kernel decides from now on, with the program's low-water mark. */
		lowat = atomic_load(&c->rcvlowat);
		if (lowat > 1)
			uls_libc.setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat));
	}
	pthread_mutex_unlock(&c->mu);
	c->tp->settled(c);
	if (left && uls_cfg.log_level >= ULS_LOG_INFO) {
		char names[140];
		uls_info("fd=%d %s left the fast path: %s", fd,
			 uls_conn_names(c, names, sizeof(names)), reason);
	}
	uls_conn_log_path(c, fd);
}

/* Threads of this process on their way to an exec without ulsock; connections between
 * their transport's choice and their descriptor's entry (conn.h: births and execs). */
static _Atomic int exec_gate, births;

void uls_conn_birth_begin(void)
{
	atomic_fetch_add(&births, 1); /* before all_off reads the gate: conn.h */
}

void uls_conn_birth_end(void)
{
	atomic_fetch_sub(&births, 1);
}

int uls_conn_exec_gate_close(uint64_t wait_ns)
{
	uint64_t until = uls_now_ns() + wait_ns;

	/* Sequentially consistent, as the birth's count and its read of the gate: either the
	 * birth sees the gate closed, or this thread sees the birth counted. */
	atomic_fetch_add(&exec_gate, 1);
	while (atomic_load(&births) != 0) {
		if (uls_now_ns() >= until)
			return -EBUSY;
		struct timespec ts = {0, 50000};
		nanosleep(&ts, NULL);
	}
	return 0;
}

void uls_conn_exec_gate_open(void)
{
	atomic_fetch_sub(&exec_gate, 1);
}

/* Why no connection of this process may leave kernel TCP, or NULL. */
static const char *all_off(void)
{
	if (uls_cfg.disabled)
		return "disabled by ULSOCK_DISABLE";
	if (atomic_load(&exec_gate))
		return "another thread was about to exec a program without ulsock";
	return atomic_load(&uls_cfg.off_reason);
}

/*
 * Asks the transports of the table in turn to take c (transport.h): to connect fd to dst,
 * or, with dst NULL, the accepted fd. NULL when one took it, else why none did (in why):
 * the reason of the one that declined, or else of the first that was not the one.
 */
static const char *ask_transports(struct uls_conn *c, int fd, const struct sockaddr *dst,
				  const struct uls_conn_hints *hints, char *why, size_t wlen)
{
	const char *reason = "no fast transport in this build";
	char said[sizeof(c->reason)];

	for (const struct uls_transport_ops *const *t = uls_transports; *t; t++) {
		enum uls_tp_answer a = dst ? (*t)->connect(c, fd, dst, hints, said, sizeof(said))
					   : (*t)->accept(c, fd, said, sizeof(said));
		if (a == ULS_TP_TAKEN)
			return NULL;
		if (reason != why || a == ULS_TP_DECLINED) {
			snprintf(why, wlen, "%s", said);
			reason = why;
		}
		if (a == ULS_TP_DECLINED)
			break;
	}
	return reason;
}

struct uls_conn *uls_conn_connect_prepare(int fd, const struct sockaddr *dst, socklen_t len,
					  const struct uls_conn_hints *hints)
{
	struct uls_conn *c = uls_conn_alloc();
	const char *why;
	char buf[sizeof(c->reason)];

	if (!c)
		return NULL;
	c->role = ULS_CLIENT;
	memcpy(&c->peer_sa, dst, len < sizeof(c->peer_sa) ? len : sizeof(c->peer_sa));
	c->born_ns = uls_now_ns();
	why = all_off();
	if (!why && uls_short_skip(dst)) {
		why = ULS_SHORT_REASON;
		c->short_kept = 1;
	}
	if (!why) {
		int fl = uls_libc.fcntl(fd, F_GETFL);
		if (fl >= 0 && (fl & O_ASYNC)) /* uls_conn_async */
			why = "O_ASYNC is set: signal-driven I/O is kernel TCP's";
	}
	if (!why)
		why = ask_transports(c, fd, dst, hints, buf, sizeof(buf));
	if (why)
		snprintf(c->reason, sizeof(c->reason), "%s", why);
	return c;
}

struct uls_conn *uls_conn_connect_done(struct uls_conn *c, int fd, int err)
{
	char why[sizeof(c->reason)];

	if (err && err != EINPROGRESS) {
		if (c->tp != &uls_kernel_transport)
			c->tp->connect_failed(c);
		uls_conn_unhold(c);
		return NULL;
	}
	fill_names(c, fd);
	if (c->tp == &uls_kernel_transport) {
		memcpy(why, c->reason, sizeof(why));
		uls_conn_set_kernel(c, fd, why);
	} else if (!err && c->tp->connected) {
		c->tp->connected(c, fd);
	}
	return c;
}

struct uls_conn *uls_conn_accept(int fd, const struct sockaddr *peer, socklen_t len)
{
	struct uls_conn *c = uls_conn_alloc();
	const char *why;
	char buf[sizeof(c->reason)];

	if (!c)
		return NULL;
	c->role = ULS_SERVER;
	memcpy(&c->peer_sa, peer, len < sizeof(c->peer_sa) ? len : sizeof(c->peer_sa));
	fill_names(c, fd);
	why = all_off();
	if (!why)
		why = ask_transports(c, fd, NULL, NULL, buf, sizeof(buf));
	if (why)
		uls_conn_set_kernel(c, fd, why);
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
	struct uls_conn *c = uls_conn_alloc();

	if (!c)
		return NULL;
	fill_names(c, fd);
	if (uls_cfg.disabled) {
		c->role = ULS_SERVER;
		uls_conn_set_kernel(c, fd, "disabled by ULSOCK_DISABLE");
		return c;
	}
	for (const struct uls_transport_ops *const *t = uls_transports; *t; t++)
		if ((*t)->adopt(c, fd))
			return adopted(c, fd);
	c->role = ULS_SERVER;
	uls_conn_set_kernel(c, fd, "socket reached this process without ulsock state");
	return c;
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

/*
 * A client's connection ends in this process: was it short (core/shortconn.h)? One that
 * had a fast path, or was kept off it, says so by what it moved; one whose peer never
 * took the fast path it was offered counts as short (the offer cost a segment and bought
 * nothing); one that left the fast path later says nothing.
 */
static void note_length(struct uls_conn *c, int fd)
{
	uint32_t units;
	int path = atomic_load(&c->path);

	if (c->role != ULS_CLIENT || !uls_cfg.short_calls)
		return;
	if (c->short_refused) { /* the offer bought nothing, however long the connection */
		uls_short_note((struct sockaddr *)&c->peer_sa, 0, 0);
		return;
	}
	if (c->short_kept)
		units = uls_short_kernel_units(uls_conn_fd(c, fd));
	else if (path == ULS_PATH_SHM || path == ULS_PATH_FABRIC)
		units = uls_short_units(atomic_load_explicit(&c->units, memory_order_relaxed),
					atomic_load_explicit(&c->moved, memory_order_relaxed));
	else
		return;
	uls_short_note((struct sockaddr *)&c->peer_sa, units, uls_now_ns() - c->born_ns);
}

/* What a close does when no call of this process is inside any more. */
static void close_last(struct uls_conn *c, int fd, int do_close, int *rc, int *err)
{
	*rc = 0;
	*err = 0;
	note_length(c, fd);
	c->tp->closing(c, fd);
	atomic_store(&c->closed, 1);
	if (c->stat && uls_conn_accelerated(c) && atomic_load(&c->path) != ULS_PATH_PENDING &&
	    uls_cfg.log_level >= ULS_LOG_INFO) {
		char names[140];
		uls_info("fd=%d %s closed: sent %llu bytes, received %llu bytes in this process", fd,
			 uls_conn_names(c, names, sizeof(names)),
			 (unsigned long long)atomic_load(&c->stat->tx_bytes),
			 (unsigned long long)atomic_load(&c->stat->rx_bytes));
	}
	if (do_close) {
		*rc = c->tp->close(c, fd);
		*err = errno;
	}
	/* Threads still waiting on the connection in this process give up. */
	c->tp->wake(c);
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
	 * that call, which drops this hold when it returns (transport/shm/io.c, solo_end). */
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
	uls_short_atfork_child();
	void *parent_stats = uls_stat_atfork_child();

	/* Only this thread exists in the child: the list needs no lock, mutexes a reset; no
	 * other thread's birth or exec goes on here. */
	pthread_mutex_init(&list_mu, NULL);
	atomic_store(&births, 0);
	atomic_store(&exec_gate, 0);
	uls_transports_atfork_child();
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

void uls_conn_mark_shared_all(int how)
{
	pthread_mutex_lock(&list_mu);
	for (struct uls_conn *c = conn_list; c; c = c->next) {
		int was = 0;
		/* A fork the transport cannot count shares the socket for good; one it counts
		 * leaves a socket already shared for good as it is. */
		if (how == ULS_SHARED_FORK && c->tp->forked && c->tp->forked(c))
			atomic_compare_exchange_strong(&c->shared, &was, ULS_SHARED_FORK);
		else
			atomic_store(&c->shared, ULS_SHARED_STICKY);
	}
	pthread_mutex_unlock(&list_mu);
}

void uls_conn_each_try(void (*fn)(struct uls_conn *c, void *arg), void *arg)
{
	int tries = 0;

	while (pthread_mutex_trylock(&list_mu) != 0) {
		if (++tries == 64)
			return;
		sched_yield();
	}
	for (struct uls_conn *c = conn_list; c; c = c->next)
		fn(c, arg);
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

	if (c->tp == &uls_kernel_transport)
		return NULL;
	pthread_mutex_lock(&list_mu);
	for (struct uls_conn *p = conn_list; p && !found; p = p->next)
		if (p != c && p->tp == c->tp && p->tp_id == c->tp_id && p->role != c->role)
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

/*
 * The counted fork children and parents that held c's socket all closed it: c is this
 * process's alone again. Under list_mu, which a fork's marking holds, so that a fork
 * running meanwhile in another thread is either counted before the look or marks after
 * it. Only tried: a signal handler's close may run here while its thread holds list_mu.
 */
static void conn_try_alone(struct uls_conn *c)
{
	if (pthread_mutex_trylock(&list_mu) != 0)
		return;
	int was = ULS_SHARED_FORK, alone = 0;
	if (atomic_load(&c->shared) == ULS_SHARED_FORK && c->tp->alone && c->tp->alone(c) &&
	    atomic_compare_exchange_strong(&c->shared, &was, 0)) {
		atomic_store(&c->nonblock_stale, 1);
		alone = 1;
	}
	pthread_mutex_unlock(&list_mu);
	if (alone && uls_cfg.log_level >= ULS_LOG_DEBUG) {
		char names[140];
		uls_dbg("%s: the socket is this process's alone again (the other holders since its "
			"fork closed it)", uls_conn_names(c, names, sizeof(names)));
	}
}

int uls_conn_maybe_shared(struct uls_conn *c)
{
	if (atomic_load_explicit(&c->shared, memory_order_relaxed) == ULS_SHARED_FORK)
		conn_try_alone(c);
	return atomic_load(&c->shared) || c->tp->joined(c);
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
