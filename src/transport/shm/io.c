/* SPDX-License-Identifier: MIT */
/*
 * The data path of an accelerated connection: send and receive on the rings, the TCP
 * bytes before the client's switch, wake-up bytes, waiting, shutdown and readiness.
 *
 * Wake-ups follow one rule on both rings (a Dekker pair): the side that wants to sleep
 * stores its want_* flag, issues a full fence and checks the ring again; the side that
 * moves the ring publishes its position, issues a full fence and reads the flag. Either the
 * sleeper sees the new position or the mover sees the flag and sends one byte on TCP, which
 * makes the kernel socket readable for the sleeper's recv, poll or epoll.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "shm_int.h"

#include "../../core/bell.h"
#include "../../core/config.h"
#include "../../core/log.h"
#include "../../core/spin.h"
#include "../../os/cpu.h"
#include "../../os/futex.h"
#include "../../os/libc.h"
#include "fence.h"
#include "guard.h"
#include "shmlock.h"
#include "wakepipe.h"

/* The few steps every send and receive takes: inlined into each call, whatever the callers. */
#define ULS_HOT inline __attribute__((always_inline))

void uls_conn_lock(struct uls_conn *c, int which)
{
	struct uls_shm_conn *s = shm_of(c);
	uls_shmlock_acquire(&s->me->lock[which], &s->me->lock_owner[which]);
}

void uls_conn_unlock(struct uls_conn *c, int which)
{
	struct uls_shm_conn *s = shm_of(c);
	uls_shmlock_release(&s->me->lock[which], &s->me->lock_owner[which]);
}

/*
 * The single-threaded fast path. In a process with one thread (glibc's
 * __libc_single_threaded, which the first thread creation clears for good) and with a
 * socket that no other process holds (c->shared), nothing but a signal handler of this
 * thread can run on the connection during a send or receive, and a handler runs to its
 * end before the call goes on. Such a call takes neither its direction's lock nor a hold
 * on the conn: each is a locked instruction, and a locked instruction waits until the
 * call's ring stores have left the store buffer (the lock's release alone was half the
 * time of a 64-byte send). A handler that closes the socket meanwhile takes the hold on
 * the call's behalf (uls_conn_close); one that sends or receives on the same socket gets
 * EINTR, since the call it interrupted is half way through the ring.
 *
 * Another process can come to hold the socket without this one forking (a posix_spawn or
 * system child that inherits it, exec, SCM_RIGHTS received elsewhere). Such a process
 * announces itself before its first call (uls_conn_join_side): it sets the side's `multi`
 * and then runs membarrier, while a solo call stores its pid in `solo_busy` and then reads
 * `multi` with a compiler barrier only; so either the call sees `multi` and takes the lock,
 * or the newcomer sees `solo_busy` and waits for the call to end. A solo call clears
 * `solo_busy` while it sleeps and looks again when it wakes. Without membarrier there is
 * no solo path.
 */
static __thread int solo_dir __attribute__((tls_model("initial-exec")));
/* The solo call found `multi` set when it woke: it holds the real lock from then on. */
static __thread int solo_locked __attribute__((tls_model("initial-exec")));
/* The solo call's own direction is claimed in solo_busy (it is not while the call sleeps). */
static __thread int solo_held __attribute__((tls_model("initial-exec")));

/* Is this thread in a solo call on c's direction dir (without the real lock)? */
static inline int solo_now(struct uls_conn *c, int dir)
{
	return uls_solo_call == c && solo_dir == dir && !solo_locked;
}

/* Announces a solo call on direction dir; 0 when another process joined the side. */
static ULS_HOT int solo_claim(struct uls_conn *c, int dir)
{
	struct uls_shm_conn *s = shm_of(c);
	atomic_store_explicit(&s->me->solo_busy[dir], (uint32_t)uls_pid(), memory_order_relaxed);
	atomic_signal_fence(memory_order_seq_cst);
	if (!atomic_load_explicit(&s->me->multi, memory_order_relaxed))
		return 1;
	atomic_store_explicit(&s->me->solo_busy[dir], 0, memory_order_release);
	return 0;
}

static ULS_HOT void solo_unclaim(struct uls_conn *c, int dir)
{
	struct uls_shm_conn *s = shm_of(c);
	/* Release: a newcomer that sees 0 sees the ring as this call left it. */
	atomic_store_explicit(&s->me->solo_busy[dir], 0, memory_order_release);
}

void uls_conn_join_side(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);
	uint32_t self = (uint32_t)uls_pid();

	if (!s->seg.hdr)
		return;
	atomic_store(&s->me->multi, 1);
	if (!uls_fence_global())
		return; /* then no process of this side runs solo: none could register */
	for (int dir = 0; dir < 2; dir++) {
		for (;;) {
			uint32_t pid = atomic_load_explicit(&s->me->solo_busy[dir],
							    memory_order_acquire);
			if (!pid || pid == self || (kill((pid_t)pid, 0) < 0 && errno == ESRCH))
				break;
			struct timespec ts = {0, 100000};
			nanosleep(&ts, NULL);
		}
	}
}

#define SINGLE_THREADED() ULS_SINGLE_THREADED()

/*
 * 1: the call (direction dir) runs solo, end it with solo_end; 0: it holds and locks;
 * or -errno. A signal handler's call on the other direction of the interrupted call's
 * connection takes the locked path, and the interrupted call counts as holding its
 * direction's lock (uls_conn_trylock).
 */
static ULS_HOT int solo_begin(struct uls_conn *c, int dir)
{
	struct uls_shm_conn *s = shm_of(c);
	if (!SINGLE_THREADED() || atomic_load_explicit(&c->shared, memory_order_relaxed) ||
	    !s->seg.hdr || !atomic_load_explicit(&uls_fence_registered, memory_order_relaxed))
		return 0;
	if (uls_solo_call) /* inside a signal handler */
		return uls_solo_call == c && solo_dir == dir ? -EINTR : 0;
	if (atomic_load_explicit(&c->closed, memory_order_relaxed))
		return -EBADF;
	if (!solo_claim(c, dir))
		return 0;
	solo_dir = dir;
	solo_locked = 0;
	solo_held = 1;
	uls_solo_call = c;
	atomic_signal_fence(memory_order_seq_cst);
	return 1;
}

int uls_conn_trylock(struct uls_conn *c, int which)
{
	struct uls_shm_conn *s = shm_of(c);
	if (uls_solo_call == c && solo_dir == which && !solo_locked)
		return 0;
	return uls_shmlock_try(&s->me->lock[which], &s->me->lock_owner[which]);
}

static ULS_HOT void solo_end(struct uls_conn *c)
{
	if (!solo_locked && solo_held)
		solo_unclaim(c, solo_dir);
	solo_held = 0;
	atomic_signal_fence(memory_order_seq_cst);
	uls_solo_call = NULL;
	atomic_signal_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&c->solo_hold, memory_order_relaxed)) {
		atomic_store_explicit(&c->solo_hold, 0, memory_order_relaxed);
		uls_conn_unhold(c);
	}
}

/* The call's own direction: solo (claimed in solo_busy) or locked. */
static ULS_HOT void dir_lock(struct uls_conn *c, int which)
{
	if (uls_solo_call == c && !solo_locked) {
		if (which == solo_dir && solo_held)
			return; /* claimed by solo_begin */
		if (solo_claim(c, which)) {
			solo_held |= which == solo_dir;
			return;
		}
		solo_locked = 1; /* another process joined while this call slept */
	}
	uls_conn_lock(c, which);
}

static ULS_HOT void dir_unlock(struct uls_conn *c, int which)
{
	if (uls_solo_call == c && !solo_locked) {
		if (which == solo_dir)
			solo_held = 0;
		solo_unclaim(c, which);
	} else
		uls_conn_unlock(c, which);
}

int uls_conn_peer_attached(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);
	/* Acquire: pairs with the server's seq_cst store of ATTACHED. */
	return atomic_load_explicit(&s->peer->state, memory_order_acquire) & ULS_SIDE_ATTACHED;
}

static int peer_declined(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);
	return atomic_load_explicit(&s->peer->state, memory_order_acquire) & ULS_SIDE_DECLINED;
}

/* Is every byte still to come from the peer's TCP direction a wake-up byte? */
static int rx_token_zone(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);
	if (c->role == ULS_CLIENT)
		return uls_conn_peer_attached(c);
	if (!atomic_load_explicit(&s->peer->switched, memory_order_acquire))
		return 0;
	return atomic_load(&s->me->tcp_data) >= atomic_load(&s->peer->switch_pos);
}

int uls_conn_reads_tokens(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);
	/* A reverting peer's bytes are data from tokens_closed on (uls_token_read_begin). */
	return rx_token_zone(c) && !atomic_load(&s->me->rx_back) && !atomic_load(&c->shut_rd) &&
	       !atomic_load(&s->peer->tokens_closed) && !atomic_load(&s->peer->tx_reverted);
}

/* May this side put wake-up bytes on its TCP direction? */
static int can_signal(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);
	return c->role == ULS_SERVER || atomic_load_explicit(&s->me->switched, memory_order_acquire);
}

int uls_conn_send_token_locked(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);
	char b = 0;

	/*
	 * Nagle holds back a small segment only while earlier bytes are unacknowledged. An
	 * attached server puts nothing but wake-ups on TCP (its data there starts with a
	 * revert, after its last wake-up), and a client that sent no data before its switch
	 * put nothing there either, so the first wake-up of either goes out at once: a short
	 * connection saves the two system calls of TCP_NODELAY. Later ones need it.
	 */
	if (atomic_load_explicit(&s->me->tokens_sent, memory_order_relaxed) ||
	    (c->role == ULS_CLIENT && atomic_load(&s->me->tcp_data)))
		uls_conn_nodelay(c, fd);
	if (uls_libc.send(uls_conn_fd(c, fd), &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1)
		return 0;
	atomic_fetch_add_explicit(&s->me->tokens_sent, 1, memory_order_relaxed);
	return 1;
}

/*
 * Wake-ups are sent under the side's token lock, which a revert takes too: a wake-up
 * byte is either counted in the revert's TCP position or never sent (revert.c).
 */
void uls_conn_send_token(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);
	if (!can_signal(c))
		return;
	uls_shmlock_acquire(&s->me->token_lock, &s->me->token_owner);
	if (!atomic_load_explicit(&s->me->tokens_closed, memory_order_relaxed) &&
	    !atomic_load_explicit(&s->peer->tokens_refused, memory_order_relaxed))
		uls_conn_send_token_locked(c, fd);
	uls_shmlock_release(&s->me->token_lock, &s->me->token_owner);
}

/*
 * A Dekker pair with the reverting peer (revert.c, close_tokens): this side announces
 * the read and then looks at the peer's flags; the peer sets tokens_closed and then waits
 * for token_readers to reach zero before it sends data on TCP. Either the reader backs
 * off, or the peer waits for the read to finish: no data byte is read as a wake-up.
 */
int uls_token_read_begin(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);
	atomic_fetch_add(&s->me->token_readers, 1);
	if (atomic_load(&s->peer->tokens_closed) || atomic_load(&s->peer->tx_reverted)) {
		atomic_fetch_sub(&s->me->token_readers, 1);
		return 0;
	}
	return 1;
}

void uls_token_read_end(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);
	atomic_fetch_sub(&s->me->token_readers, 1);
}

/*
 * This thread consumed wake-up bytes of c: other threads of the process sleeping on c
 * may have armed for them (bell.h), and followers of a leader re-check (wait.h).
 */
static void tokens_taken(struct uls_conn *c)
{
	if (!SINGLE_THREADED())
		uls_bells_ring_others(&c->bells);
	uls_waitq_kick(&c->wq);
}

/*
 * Before a thread of a multi-threaded process arms a wake-up of c and sleeps in the
 * kernel: its bell joins c, so that a thread consuming the byte meant for it rings it.
 * Returns the bell (the wait then sets uls_bell_current), or -1: none needed, or none to
 * be had (*bounded is then set: the sleep must not last).
 */
static int bell_join(struct uls_conn *c, int *bounded)
{
	*bounded = 0;
	if (SINGLE_THREADED())
		return -1;
	int bell = uls_bell_thread();
	if (bell < 0) {
		*bounded = 1;
		return -1;
	}
	uls_bell_begin(bell);
	if (!uls_bells_add(&c->bells, bell))
		*bounded = 1;
	return bell;
}

/*
 * uls_wait with this thread's bell (bell_join) in the kernel wait set: the drains of the
 * wait do not ring it, and a sleeper without a registration looks again every 10 ms.
 */
static int wait_rung(struct uls_conn *c, int fd, uint64_t deadline, int drain, int max_ms,
		     int bell, int bounded)
{
	if (bounded && (max_ms < 0 || max_ms > 10))
		max_ms = 10;
	uls_bell_current = bell;
	int r = uls_wait(c, fd, deadline, drain, max_ms);
	uls_bell_current = -1;
	return r;
}

/*
 * The peer's user, for the pipes this side may write (wakepipe.h): a server knows its
 * client's by the segment file's owner; a client cannot know its server's (-1).
 */
static long long peer_uid(struct uls_conn *c)
{
	return c->role == ULS_SERVER ? (long long)shm_of(c)->seg.uid : -1;
}

/*
 * After moving a ring: wakes the sleepers that *want names (ULS_WANT_*), through the pipe
 * wp names where one asked for that and it can be written, else with a byte on TCP;
 * 1 if any slept.
 */
static int wake_wanted(struct uls_conn *c, int fd, _Atomic uint32_t *want,
		       struct uls_wake_pipe *wp)
{
	if (!atomic_load_explicit(want, memory_order_relaxed))
		return 0;
	uint32_t w = atomic_exchange(want, 0);
	if (w & ULS_WANT_FUTEX)
		uls_futex_wake(want, INT_MAX);
	int piped = (w & ULS_WANT_PIPE) &&
		    uls_wakepipe_write(atomic_load_explicit(&wp->who, memory_order_relaxed),
				       atomic_load_explicit(&wp->ino, memory_order_relaxed),
				       peer_uid(c));
	if ((w & ULS_WANT_TOKEN) || ((w & ULS_WANT_PIPE) && !piped))
		uls_conn_send_token(c, fd);
	return 1;
}

/* Producer: after publishing tail, wake a consumer that announced it sleeps. */
static void wake_consumer(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);
	uls_fence_light(&s->me->light_fence);
	int asleep = wake_wanted(c, fd, &s->tx->sh->cons.want_data, &s->tx->sh->cons.data_pipe);
	uls_fence_adapt(&s->me->light_fence, &s->fence_streak[TXL], asleep);
}

/* Consumer: after publishing head, wake a producer that waits for space. */
static void wake_producer(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);
	uls_fence_light(&s->me->light_fence);
	int asleep = wake_wanted(c, fd, &s->rx->sh->prod.want_space, &s->rx->sh->prod.space_pipe);
	uls_fence_adapt(&s->me->light_fence, &s->fence_streak[RXL], asleep);
}

static void futex_kick(_Atomic uint32_t *want)
{
	if (atomic_fetch_and(want, ~ULS_WANT_FUTEX) & ULS_WANT_FUTEX)
		uls_futex_wake(want, INT_MAX);
}

/*
 * Something other than a ring position changed (an end of stream, a close, a revert
 * request): the peer's threads sleeping on a futex must look. Call after the store that
 * says what changed; a sleeper sets its bit and then looks, so one of the two sees the
 * other. Wake-ups by TCP byte are left to the caller (a FIN wakes those by itself).
 */
void uls_conn_wake_peer(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);
	if (!s->seg.hdr)
		return;
	futex_kick(&s->tx->sh->cons.want_data);
	futex_kick(&s->rx->sh->prod.want_space);
}

/* The same for this process's own threads (a local close, shutdown, or the peer's end). */
void uls_conn_wake_self(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);
	if (!s->seg.hdr)
		return;
	futex_kick(&s->rx->sh->cons.want_data);
	futex_kick(&s->tx->sh->prod.want_space);
}

static void note_peer_end(struct uls_conn *c, int err)
{
	if (err && !atomic_load(&c->peer_err))
		atomic_store(&c->peer_err, err);
	atomic_store(&c->peer_gone, 1);
	uls_conn_wake_self(c);
}

/*
 * The kernel reports the end of the peer's TCP stream (POLLRDHUP, POLLHUP or POLLERR)
 * where this side may not read it: a server whose client has not switched (or whose
 * pre-switch bytes are unread) leaves them to the program, they are data. The end still
 * tells of the client's socket: a client that did not shut its TCP direction down itself
 * (ULS_SIDE_TCP_SHUT) has closed it or died, and a send waiting for room on the ring,
 * which that client will never make, must learn it. (A blocking send looks itself,
 * wait_tx; this serves poll and epoll, core/poll.c, and non-blocking sends.)
 */
void uls_shm_tcp_end(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);

	(void)fd;
	if (c->role == ULS_SERVER && s->seg.hdr && !atomic_load(&c->shut_rd) &&
	    !atomic_load(&c->peer_gone) && !(atomic_load(&s->peer->state) & ULS_SIDE_TCP_SHUT))
		note_peer_end(c, 0);
}

void uls_shm_drain(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);
	char buf[256];
	ssize_t n;

	/* After our own SHUT_RD the kernel reports EOF on the stream: nothing to learn. */
	if (!s->seg.hdr || !rx_token_zone(c) || atomic_load(&c->shut_rd))
		return;
	uls_revert_serve(c, fd);
	/* Past the peer's revert point its TCP bytes are data: rx_back counts exactly. A
	 * poller learns of them here (the kernel says readable, the ring may be empty). */
	if (!atomic_load(&s->me->rx_back) && atomic_load(&s->peer->tx_reverted) &&
	    uls_conn_trylock(c, RXL)) {
		uls_revert_rx_back(c, fd, 1);
		uls_conn_unlock(c, RXL);
	}
	if (atomic_load(&s->me->rx_back) || !uls_token_read_begin(c))
		return;
	int took = 0;
	for (;;) {
		n = uls_libc.recv(uls_conn_fd(c, fd), buf, sizeof(buf), MSG_DONTWAIT);
		if (n > 0) {
			atomic_fetch_add_explicit(&s->me->tokens_seen, (uint64_t)n,
						  memory_order_relaxed);
			took = 1;
			if (n == (ssize_t)sizeof(buf))
				continue;
			break;
		}
		if (n == 0)
			note_peer_end(c, 0);
		else if (errno != EAGAIN && errno != EINTR)
			note_peer_end(c, errno == ECONNRESET ? 0 : errno);
		if (n == 0 || errno != EAGAIN)
			uls_waitq_kick(&c->wq);
		break;
	}
	uls_token_read_end(c);
	/* Those bytes may have been meant for another waiting thread. */
	if (took)
		tokens_taken(c);
}

int uls_shm_sleep_recv(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);
	char buf[256];
	ssize_t n;

	if (!s->seg.hdr || !rx_token_zone(c) || atomic_load(&c->shut_rd) ||
	    atomic_load(&c->nonblock) || atomic_load(&s->peer->revert_req) ||
	    atomic_load(&s->me->rx_back) || !uls_token_read_begin(c))
		return 0;
	/* The kernel applies SA_RESTART itself: an EINTR here would end the program's call. */
	n = uls_libc.recv(uls_conn_fd(c, fd), buf, sizeof(buf), 0);
	int err = errno;
	if (n > 0)
		atomic_fetch_add_explicit(&s->me->tokens_seen, (uint64_t)n, memory_order_relaxed);
	uls_token_read_end(c);
	errno = err;
	if (n > 0) {
		tokens_taken(c);
		return 1;
	}
	if (n == 0) {
		if (!atomic_load(&c->shut_rd))
			note_peer_end(c, 0);
		return 1;
	}
	if (errno == EINTR)
		return -EINTR;
	if (errno == EBADF)
		return -EBADF;
	if (errno == EAGAIN || errno == EWOULDBLOCK)
		return 0;
	note_peer_end(c, errno == ECONNRESET ? 0 : errno);
	return 1;
}

/* The client moves its sending direction onto the ring. Caller holds the send lock. */
void uls_conn_client_switch(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);
	atomic_store_explicit(&s->me->switch_pos, atomic_load(&s->me->tcp_data),
			      memory_order_relaxed);
	/* Release: the server reads switch_pos only after it sees switched. */
	atomic_store_explicit(&s->me->switched, 1, memory_order_seq_cst);
	atomic_store(&c->path, ULS_PATH_SHM);
	uls_conn_log_path(c, fd);
}

void uls_conn_broken(struct uls_conn *c, int fd, const char *what)
{
	char names[140];

	if (!atomic_exchange(&c->broken, 1))
		uls_warn("fd=%d %s: peer broke the ring protocol (%s); connection reset", fd,
			 uls_conn_names(c, names, sizeof(names)), what);
}

/*
 * Was the segment file shrunk under this process (src/transport/shm/guard.h)? Then its
 * mapping holds private zero pages now, and the connection is over: what a call read
 * from it meanwhile is not data. One relaxed load when nothing was ever cut.
 */
static inline int cut_off(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);
	if (__builtin_expect(!s->seg.hdr || !uls_guard_cut_at(s->seg.hdr), 1))
		return 0;
	uls_conn_broken(c, fd, "its segment file was truncated");
	return 1;
}

static size_t iov_total(const struct iovec *iov, int iovcnt)
{
	size_t t = 0;
	for (int i = 0; i < iovcnt; i++)
		t += iov[i].iov_len;
	return t;
}

static uint64_t deadline_of(uint64_t timeo_ns)
{
	return timeo_ns ? uls_now_ns() + timeo_ns : 0;
}

/*
 * How often a long spin, or a program polling with non-blocking calls, looks at the TCP
 * socket: a peer that exited without closing (or was killed) ends the connection only
 * there, with its FIN or RST.
 */
#define TCP_CHECK_NS 1000000u

/*
 * Looks at the TCP socket, at most every TCP_CHECK_NS: when the peer's end is gone (FIN or
 * RST), the wake-ups before it are drained and the end noted. Only then: draining reads
 * bytes, and a peer moving back to TCP (revert.c) may just have started to send data
 * there, which must be left for the reader that counts the wake-ups exactly.
 */
static void check_tcp_sometimes(struct uls_conn *c, int fd, uint64_t now)
{
	struct uls_shm_conn *s = shm_of(c);
	uint64_t last = atomic_load_explicit(&s->tcp_checked, memory_order_relaxed);

	if (now - last < TCP_CHECK_NS)
		return;
	atomic_store_explicit(&s->tcp_checked, now, memory_order_relaxed);
	struct pollfd p = {.fd = uls_conn_fd(c, fd), .events = POLLRDHUP};
	if (uls_libc.poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
		if (rx_token_zone(c))
			uls_shm_drain(c, fd);
		else
			uls_shm_tcp_end(c, fd);
	}
}

/*
 * Spins on ready() within the profile's budget (spin.h); returns 1 when ready, 0 when the
 * caller must sleep: the budget ran out, the cores are oversubscribed, or the deadline
 * (0: none) passed. An unlimited spin still notices the end of the TCP stream.
 */
static int spin_until(struct uls_conn *c, int fd, uint64_t deadline,
		      int (*ready)(struct uls_conn *))
{
	struct uls_spin s;

	if (ready(c))
		return 1;
	uls_spin_start(&s);
	uint64_t next = s.start + TCP_CHECK_NS;
	while (uls_spin_more(&s)) {
		if (ready(c))
			return 1;
		if (s.last < next)
			continue;
		if (deadline && s.last >= deadline)
			return 0;
		check_tcp_sometimes(c, fd, s.last);
		next = s.last + TCP_CHECK_NS;
	}
	return 0;
}

/* How many bytes a waiting receive of this thread needs on the ring: more than one only
 * for a peek that starts past the bytes there (SO_PEEK_OFF). */
static __thread int64_t rx_need __attribute__((tls_model("initial-exec"))) = 1;

static int rx_ready(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);
	uint64_t head = atomic_load_explicit(&s->rx->sh->cons.head, memory_order_relaxed);
	int64_t avail = uls_ring_readable(s->rx, head);

	return avail < 0 || avail >= rx_need || atomic_load(&s->rx->sh->prod.eof) ||
	       atomic_load(&c->peer_gone) || atomic_load(&c->broken);
}

/*
 * POLLIN for poll and epoll: SO_RCVLOWAT bytes, or the end of the stream, or an error.
 * The kernel grows its receive buffer to hold the mark; the ring cannot grow, so a mark
 * above what a blocking sender fills it to (all but one piece) counts as that.
 */
static int rx_poll_ready(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);
	uint64_t head = atomic_load_explicit(&s->rx->sh->cons.head, memory_order_relaxed);
	int64_t avail = uls_ring_readable(s->rx, head);
	int64_t lowat = atomic_load_explicit(&c->rcvlowat, memory_order_relaxed);
	int64_t full = (int64_t)(s->rx->size - uls_send_piece(s->rx->size));

	if (lowat > full)
		lowat = full;
	if (avail != 0 && (avail < 0 || avail >= (lowat > 1 ? lowat : 1)))
		return 1;
	return atomic_load(&s->rx->sh->prod.eof) || atomic_load(&c->peer_gone) ||
	       atomic_load(&c->broken);
}

static int peer_stopped_reading(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);
	return atomic_load(&s->tx->sh->cons.closed) ||
	       (atomic_load(&s->peer->state) & ULS_SIDE_CLOSED);
}

/* How many free bytes a waiting send of this thread needs on the ring (ring_send). */
static __thread int64_t tx_need __attribute__((tls_model("initial-exec"))) = 1;

static int tx_room(struct uls_conn *c, int64_t need)
{
	struct uls_shm_conn *s = shm_of(c);
	uint64_t tail = atomic_load_explicit(&s->tx->sh->prod.tail, memory_order_relaxed);
	int64_t room = uls_ring_writable(s->tx, tail);

	return room < 0 || room >= need || peer_stopped_reading(c) ||
	       atomic_load(&c->peer_gone) || atomic_load(&c->broken);
}

static int tx_ready(struct uls_conn *c)
{
	return tx_room(c, tx_need);
}

/*
 * A waiting call's safety net: with other processes sharing the socket (fork), a
 * wake-up byte may be consumed by one of them, so their sleeps are bounded.
 */
static int max_sleep_ms(struct uls_conn *c)
{
	return atomic_load(&c->shared) ? 50 : -1;
}

/*
 * How long a call blocked in the data path sleeps on a futex before it sleeps on the TCP
 * socket instead. Only TCP tells of a peer that died without a close (its FIN or RST),
 * so the window bounds how late a sleeper learns of it.
 */
#define FUTEX_WINDOW_NS 20000000u
/* The sleep of one futex wait while the peer's light fences cannot be trusted (fence.h). */
#define FUTEX_BOUNDED_NS 10000000u

/* Does a blocked receive (rx) or send have to look at something besides its ring? */
static int needs_look(struct uls_conn *c, int rx)
{
	struct uls_shm_conn *s = shm_of(c);
	if (atomic_load(rx ? &c->shut_rd : &c->shut_wr) || atomic_load(&c->closed))
		return 1;
	/* The peer moved its sending direction back to TCP: the receiver follows it there. */
	if (rx && atomic_load(&s->peer->tx_reverted) && !atomic_load(&s->me->rx_back))
		return 1;
	return atomic_load(&s->peer->revert_req) && !atomic_load(&s->me->tx_reverted);
}

/*
 * A call blocked in recv or send sleeps on its ring's flag word (a futex in the shared
 * segment) rather than on the TCP socket: the peer then wakes it with one futex system
 * call, where a wake-up byte costs a send and a recv through the TCP stack. poll and
 * epoll still sleep on TCP. After FUTEX_WINDOW_NS without news the caller moves to the
 * TCP sleep, which a peer's death ends. Returns 0 (look again), 1 (the window is over),
 * -EINTR or -EAGAIN (deadline).
 */
static int futex_sleep(struct uls_conn *c, _Atomic uint32_t *want, uint64_t deadline, int rx,
		       int (*ready)(struct uls_conn *))
{
	struct uls_shm_conn *s = shm_of(c);
	uint64_t until = uls_now_ns() + FUTEX_WINDOW_NS;

	if (deadline && deadline < until)
		until = deadline;
	for (;;) {
		/* A locked instruction: the full fence between the flag and the re-check. */
		uint32_t v = atomic_fetch_or(want, ULS_WANT_FUTEX) | ULS_WANT_FUTEX;
		int trusted = uls_fence_heavy(&s->peer->light_fence);
		if (ready(c) || needs_look(c, rx))
			return 0;
		uint64_t now = uls_now_ns();
		if (now >= until)
			return deadline && now >= deadline ? -EAGAIN : 1;
		uint64_t ns = until - now;
		if (!trusted && ns > FUTEX_BOUNDED_NS)
			ns = FUTEX_BOUNDED_NS;
		struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
		uls_seg_reap();
		uls_signal_clear();
		/* Returns at once when the word no longer holds v: the peer moved meanwhile. */
		if (uls_futex_wait(want, v, &ts) < 0 && errno == EINTR &&
		    (deadline || uls_signals_interrupt()))
			return -EINTR;
	}
}

/* Sleeps until the receive ring may have changed. Returns 0, -EINTR or -EAGAIN. */
static int wait_rx(struct uls_conn *c, int fd, uint64_t deadline)
{
	struct uls_shm_conn *s = shm_of(c);
	if (spin_until(c, fd, deadline, rx_ready))
		return 0;
	int r = futex_sleep(c, &s->rx->sh->cons.want_data, deadline, 1, rx_ready);
	if (r != 1)
		return r;
	int bounded, bell = bell_join(c, &bounded);
	atomic_fetch_or(&s->rx->sh->cons.want_data, ULS_WANT_TOKEN);
	int bound = uls_fence_heavy(&s->peer->light_fence) ? max_sleep_ms(c) : 10;
	if (rx_ready(c))
		return 0;
	return wait_rung(c, fd, deadline, 1, bound, bell, bounded);
}

/*
 * Sleeps until the send ring may have `need` free bytes. Returns 0, -EINTR or -EAGAIN
 * (timeout).
 */
static int wait_tx_room(struct uls_conn *c, int fd, uint64_t deadline, int *backoff_ms)
{
	struct uls_shm_conn *s = shm_of(c);
	if (spin_until(c, fd, deadline, tx_ready))
		return 0;
	int r = futex_sleep(c, &s->tx->sh->prod.want_space, deadline, 0, tx_ready);
	if (r != 1)
		return r;
	int bounded, bell = bell_join(c, &bounded);
	atomic_fetch_or(&s->tx->sh->prod.want_space, ULS_WANT_TOKEN);
	int bound = uls_fence_heavy(&s->peer->light_fence) ? max_sleep_ms(c) : 10;
	if (tx_ready(c))
		return 0;
	if (!rx_token_zone(c) || atomic_load(&c->shut_rd)) {
		/* Unread TCP data (or our own SHUT_RD) keeps the socket readable: wake-ups
		 * cannot be seen, so poll the ring with a growing sleep instead. */
		*backoff_ms = *backoff_ms ? (*backoff_ms >= 16 ? 16 : *backoff_ms * 2) : 1;
		if (deadline && uls_now_ns() >= deadline)
			return -EAGAIN;
		/* POLLRDHUP alone still tells when the peer's socket is gone. */
		struct pollfd p = {.fd = uls_conn_fd(c, fd), .events = POLLRDHUP};
		uls_signal_clear();
		r = uls_libc.poll(&p, 1, *backoff_ms);
		if (r < 0)
			return errno == EINTR && (deadline || uls_signals_interrupt()) ? -EINTR : 0;
		if (r > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) &&
		    !atomic_load(&c->shut_rd) &&
		    !(atomic_load(&s->peer->state) & ULS_SIDE_TCP_SHUT))
			note_peer_end(c, 0);
		return 0;
	}
	return wait_rung(c, fd, deadline, 1, bound, bell, bounded);
}

static int wait_tx(struct uls_conn *c, int fd, uint64_t deadline, int *backoff_ms,
		   int64_t need)
{
	tx_need = need;
	int r = wait_tx_room(c, fd, deadline, backoff_ms);
	tx_need = 1;
	return r;
}

/*
 * Would this call wait? O_NONBLOCK belongs to the open file, which every process holding
 * the socket shares: one of them may have changed it since this process last set it.
 * So for a shared socket the kernel's flag decides, asked only where the call would
 * otherwise wait or give up (never on a call that moves bytes).
 */
static int nonblock_now(struct uls_conn *c, int fd, int flags, int nonblock)
{
	if ((flags & MSG_DONTWAIT) || (!atomic_load_explicit(&c->shared, memory_order_relaxed) &&
					!atomic_load_explicit(&c->nonblock_stale, memory_order_relaxed)))
		return nonblock;
	int fl = uls_libc.fcntl(uls_conn_fd(c, fd), F_GETFL);
	if (fl < 0)
		return nonblock;
	atomic_store(&c->nonblock_stale, 0);
	atomic_store(&c->nonblock, (fl & O_NONBLOCK) != 0);
	return (fl & O_NONBLOCK) != 0;
}

/*
 * Counts bytes for `ulsock stat`. The caller holds the direction's lock, which every
 * thread of this process that counts there takes too, so a plain add cannot lose one.
 */
static void stat_add(_Atomic uint64_t *counter, ssize_t n)
{
	if (!counter || n <= 0)
		return;
	atomic_store_explicit(counter,
			      atomic_load_explicit(counter, memory_order_relaxed) + (uint64_t)n,
			      memory_order_relaxed);
}

static ssize_t send_epipe(struct uls_conn *c, int flags)
{
	if (!(flags & MSG_NOSIGNAL))
		raise(SIGPIPE);
	return -EPIPE;
}

/*
 * A reset reported once, by the first call that meets it (the kernel's sk_err): the one
 * the kernel socket may hold too (the peer's close sent it) is taken with it, so that
 * SO_ERROR and the next calls see it gone, as on kernel TCP.
 */
static ssize_t reset_reported(struct uls_conn *c, int fd)
{
	int err = 0;
	socklen_t len = sizeof(err);

	uls_libc.getsockopt(uls_conn_fd(c, fd), SOL_SOCKET, SO_ERROR, &err, &len);
	return -ECONNRESET;
}

/* The peer reset the connection and no call here has reported it: this one does. */
static int reset_unreported(struct uls_conn *c)
{
	return (atomic_load(&shm_of(c)->peer->state) & ULS_SIDE_RESET) &&
	       !atomic_exchange(&c->reset_seen, 1);
}

/*
 * The peer that stopped reading also sent its FIN on TCP (shutdown(SHUT_RDWR) shuts its
 * kernel socket down both ways; a ring SHUT_WR sends none): Linux answers data that comes
 * to a socket shut both ways with a reset. The kernel's state of this socket says whether
 * the FIN came (POLLRDHUP would also report this side's own SHUT_RD).
 */
static int peer_shut_both(struct uls_conn *c, int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	if (uls_libc.getsockopt(uls_conn_fd(c, fd), IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
		return 0;
	return ti.tcpi_state == TCP_CLOSE_WAIT || ti.tcpi_state == TCP_LAST_ACK ||
	       ti.tcpi_state == TCP_CLOSING;
}

/*
 * A send to a peer that stopped reading. One that only shut down reading still takes
 * (and drops) the bytes. One that reset the connection (SO_LINGER {1, 0}, or a close with
 * bytes unread, conn.c) gets ECONNRESET once, as the kernel reports a reset once, and
 * EPIPE from then on. Once the peer's socket is closed (or its stream ended) the bytes go
 * to the kernel: kernel TCP takes the first send after the peer's close and fails a later
 * one only when the peer's reset has come back, and on this socket the kernel now does
 * exactly that (nobody reads the TCP direction any more; the peer's kernel resets it).
 */
static ssize_t send_to_gone_peer(struct uls_conn *c, int fd, const struct iovec *iov,
				 int iovcnt, size_t total, int flags)
{
	struct uls_shm_conn *s = shm_of(c);
	uint32_t peer_state = atomic_load(&s->peer->state);

	if (peer_state & ULS_SIDE_RESET) {
		if (!atomic_exchange(&c->reset_seen, 1))
			return reset_reported(c, fd);
		return send_epipe(c, flags);
	}
	/* A peer that shut down both ways closed its ring, and its FIN may have been read
	 * here already as the end of the wake-up stream (peer_gone): it still resets. */
	if (!(peer_state & ULS_SIDE_CLOSED) &&
	    (!atomic_load(&c->peer_gone) || atomic_load(&s->tx->sh->cons.closed))) {
		/*
		 * A peer shut both ways sends its FIN before it ends its ring (uls_shm_shutdown),
		 * and a program here that saw that end answers with this send. The FIN may not
		 * have reached this socket yet (the kernel can leave a loopback packet to its
		 * softirq thread on a busy machine): wait for it, once per connection.
		 */
		int shut = peer_shut_both(c, fd);
		if (!shut && atomic_load(&s->rx->sh->prod.eof) &&
		    !atomic_exchange(&s->fin_awaited, 1)) {
			struct pollfd p = {.fd = uls_conn_fd(c, fd), .events = POLLRDHUP};
			uls_libc.poll(&p, 1, 100);
			shut = peer_shut_both(c, fd);
		}
		if (!shut)
			return (ssize_t)total;
		/* Its kernel resets on these bytes: it reports that once (shut_rd_end), and
		 * this side, whose reset is coming, is at its end (EPIPE, as the kernel). */
		atomic_fetch_or(&s->me->state, ULS_SIDE_RESET);
		note_peer_end(c, EPIPE);
	}
	/* The peer says it closed just before its kernel sends the FIN: bytes sent before
	 * the FIN came would find its socket still open and make it reset, not close. The
	 * program saw the end of the stream only once the FIN had come on kernel TCP. */
	if (!atomic_load(&c->peer_gone)) {
		struct pollfd p = {.fd = uls_conn_fd(c, fd), .events = POLLRDHUP};
		uls_libc.poll(&p, 1, 100);
	}
	struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
	ssize_t n = uls_libc.sendmsg(uls_conn_fd(c, fd), &m, flags);

	return n < 0 ? -errno : n;
}

/* Fills tmp with the part of iov that starts `skip` bytes in; returns the count. */
static int iov_window(const struct iovec *iov, int iovcnt, size_t skip, struct iovec *tmp,
		      int max)
{
	int k = 0;

	for (int i = 0; i < iovcnt && k < max; i++) {
		if (skip >= iov[i].iov_len) {
			skip -= iov[i].iov_len;
			continue;
		}
		tmp[k].iov_base = (char *)iov[i].iov_base + skip;
		tmp[k].iov_len = iov[i].iov_len - skip;
		skip = 0;
		k++;
	}
	return k;
}

/*
 * How much room a blocking send waits for before it puts out the next piece of its
 * message: the rest, or uls_send_piece of the ring (core/transport.h says why). A
 * non-blocking send takes what room there is, as TCP may.
 */
static int64_t send_piece(const struct uls_shm_conn *s, size_t rest)
{
	uint64_t piece = uls_send_piece(s->tx->size);

	return (int64_t)(rest < piece ? rest : piece);
}

static ssize_t ring_send(struct uls_conn *c, int fd, const struct iovec *iov, int iovcnt,
			 size_t total, int flags)
{
	struct uls_shm_conn *s = shm_of(c);
	int nonblock = (flags & MSG_DONTWAIT) || atomic_load(&c->nonblock), backoff = 0;
	uint64_t deadline = deadline_of(c->sndtimeo_ns);
	size_t done = 0;

	for (;;) {
		if (atomic_load(&c->broken))
			return done ? (ssize_t)done : -ECONNRESET;
		/* shutdown(SHUT_WR) from another thread ends a blocked send, as in TCP. */
		if (atomic_load(&c->shut_wr))
			return done ? (ssize_t)done : send_epipe(c, flags);
		if (peer_stopped_reading(c) || atomic_load(&c->peer_gone)) {
			if (done)
				return (ssize_t)done;
			return send_to_gone_peer(c, fd, iov, iovcnt, total, flags);
		}
		if (!solo_now(c, TXL))
			s->tx_mine_ok = 0;
		uint64_t tail = s->tx_mine_ok ? s->tx_tail_mine
					      : atomic_load_explicit(&s->tx->sh->prod.tail,
								     memory_order_relaxed);
		int64_t space = uls_ring_space_cached(s->tx, tail, &s->tx_head_seen, total - done);
		if (space < 0) {
			/* A cut mapping reads zeros, against the position this process keeps. */
			if (!cut_off(c, fd))
				uls_conn_broken(c, fd, "consumer position out of range");
			continue;
		}
		int64_t need = 1;
		if ((uint64_t)space < total - done) {
			/* Too little room for the next piece: a blocking send waits for more. */
			int64_t piece = send_piece(s, total - done);
			if (space < piece && !nonblock && !nonblock_now(c, fd, flags, nonblock))
				need = piece;
		}
		if (space >= need) {
			size_t n = total - done < (uint64_t)space ? total - done : (size_t)space;
			uls_ring_copy_in(s->tx, tail, iov, iovcnt, done, n);
			/* Release: the consumer sees the bytes before it sees the new tail. */
			atomic_store_explicit(&s->tx->sh->prod.tail, tail + n, memory_order_release);
			/* Free space past the next send's line: the consumer read it a lap ago. */
			if ((uint64_t)space - n >= ULS_RING_PREFETCH + ULS_CACHELINE)
				uls_ring_prefetch_write(s->tx, tail + n + ULS_RING_PREFETCH);
			s->tx_tail_mine = tail + n;
			s->tx_mine_ok = (uint8_t)solo_now(c, TXL);
			if (atomic_load_explicit(&s->rx_stream, memory_order_relaxed))
				atomic_store_explicit(&s->rx_stream, 0, memory_order_relaxed);
			done += n;
			wake_consumer(c, fd);
			if (done == total)
				return (ssize_t)done;
			continue;
		}
		atomic_fetch_add(&s->tx_full, 1);
		if (cut_off(c, fd))
			continue;
		if (atomic_load(&s->peer->revert_req)) {
			/* The reader stopped for good: the rest of this send goes on TCP. */
			uls_revert_serve_locked(c, fd);
			struct iovec tmp[64];
			struct msghdr m = {.msg_iov = tmp};
			m.msg_iovlen = (size_t)iov_window(iov, iovcnt, done, tmp, 64);
			ssize_t n = uls_libc.sendmsg(uls_conn_fd(c, fd), &m, flags);
			if (n < 0)
				return done ? (ssize_t)done : -errno;
			return (ssize_t)(done + (size_t)n);
		}
		if (nonblock_now(c, fd, flags, nonblock)) {
			if (!done)
				check_tcp_sometimes(c, fd, uls_now_ns());
			if (!done && atomic_load(&c->peer_gone))
				continue;
			return done ? (ssize_t)done : -EAGAIN;
		}
		if (atomic_load(&c->closed))
			return done ? (ssize_t)done : -EBADF;
		dir_unlock(c, TXL);
		int r = wait_tx(c, fd, deadline, &backoff, need);
		dir_lock(c, TXL);
		if (r < 0)
			return done ? (ssize_t)done : r;
	}
}

static ssize_t conn_send(struct uls_conn *c, int fd, const struct iovec *iov, int iovcnt,
			 int flags)
{
	struct uls_shm_conn *s = shm_of(c);
	size_t total = iov_total(iov, iovcnt);
	ssize_t n;

	if (atomic_load(&c->shut_wr))
		return send_epipe(c, flags);
	/* The peer broke the protocol: ECONNRESET from now on, on TCP as on the ring. */
	if (atomic_load(&c->broken))
		return -ECONNRESET;
	dir_lock(c, TXL);
	if (atomic_load(&s->peer->revert_req))
		uls_revert_serve_locked(c, fd);
	if (atomic_load(&s->me->tx_reverted)) {
		/* Back on TCP: the bytes follow the resent ring bytes there. */
		struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
		n = uls_libc.sendmsg(uls_conn_fd(c, fd), &m, flags);
		n = n < 0 ? -errno : n;
		dir_unlock(c, TXL);
		return n;
	}
	if (c->role == ULS_CLIENT && !atomic_load(&s->me->switched)) {
		if (!uls_conn_peer_attached(c)) {
			/* Not proven yet: the bytes go on TCP, where the server will read them. */
			struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
			n = uls_libc.sendmsg(uls_conn_fd(c, fd), &m, flags);
			if (n > 0)
				atomic_fetch_add(&s->me->tcp_data, (uint64_t)n);
			n = n < 0 ? -errno : n;
			stat_add(c->stat ? &c->stat->tx_bytes : NULL, n);
			dir_unlock(c, TXL);
			if (peer_declined(c))
				uls_conn_set_kernel(c, fd, "peer declined");
			return n;
		}
		uls_conn_client_switch(c, fd);
	}
	n = total ? ring_send(c, fd, iov, iovcnt, total, flags) : 0;
	stat_add(c->stat ? &c->stat->tx_bytes : NULL, n);
	dir_unlock(c, TXL);
	return n;
}

/* Copies iovecs into tmp, truncated to limit bytes; returns the new count. */
static int iov_truncate(const struct iovec *iov, int iovcnt, size_t limit, struct iovec *tmp,
			int max)
{
	int k = 0;

	for (int i = 0; i < iovcnt && k < max && limit > 0; i++) {
		tmp[k] = iov[i];
		if (tmp[k].iov_len > limit)
			tmp[k].iov_len = limit;
		limit -= tmp[k].iov_len;
		k++;
	}
	return k;
}

/*
 * Receives TCP data before the ring took over. Returns bytes, 0 at EOF, -errno, or
 * -EALREADY when the caller must continue on the ring.
 */
static ssize_t tcp_recv_before_switch(struct uls_conn *c, int fd, struct msghdr *msg, int flags,
				      size_t total, int nonblock, uint64_t deadline)
{
	struct uls_shm_conn *s = shm_of(c);
	struct iovec tmp[64];
	struct msghdr m = *msg;
	uint64_t have = atomic_load(&s->me->tcp_data);
	int switched = atomic_load_explicit(&s->peer->switched, memory_order_acquire);
	uint64_t pos = atomic_load(&s->peer->switch_pos);
	size_t limit = total;
	ssize_t n;

	if (switched) {
		if (pos < have) {
			uls_conn_broken(c, fd, "switch position behind data already read");
			return -ECONNRESET;
		}
		if (pos == have)
			return -EALREADY;
		if (pos - have < limit)
			limit = (size_t)(pos - have);
	}
	/* Until the switch is seen, what follows the data may be wake-ups (read as such). */
	int tokens = !switched, bell = -1, bounded = 0, kflags = flags & ~MSG_WAITALL;
	if (tokens && !uls_token_read_begin(c)) {
		/*
		 * The client moves back to TCP. One that switched did so before it said so:
		 * the next pass reads up to its switch position, exactly. One that never
		 * switched never will (protocol.md, section 8): its TCP bytes are all data.
		 * Going round again instead would spin for as long as it stays so (a client
		 * killed in its revert, or lying), even in a non-blocking call.
		 */
		if (atomic_load_explicit(&s->peer->switched, memory_order_acquire))
			return -EALREADY;
		tokens = 0;
	}
	if (!switched && !nonblock) {
		/* Another thread may consume the wake-up meant for this one (bell.h): then
		 * this reader must not sleep where it cannot be rung, in a blocking recvmsg. */
		bell = bell_join(c, &bounded);
		if (bell >= 0 || bounded)
			kflags |= MSG_DONTWAIT;
		/* A client switching now sees the flag and wakes this reader, or this side
		 * sees the switch: never both miss (the blocking recvmsg below would wait for
		 * TCP data that went to the ring). */
		atomic_fetch_or(&s->rx->sh->cons.want_data, ULS_WANT_TOKEN);
		uls_fence_heavy(&s->peer->light_fence);
		if (atomic_load_explicit(&s->peer->switched, memory_order_acquire)) {
			if (tokens)
				uls_token_read_end(c);
			return -EALREADY;
		}
	}
	m.msg_iov = tmp;
	m.msg_iovlen = (size_t)iov_truncate(msg->msg_iov, (int)msg->msg_iovlen, limit, tmp, 64);
	/* MSG_WAITALL is ulsock's to apply: the kernel would wait for wake-up bytes too. */
	n = uls_libc.recvmsg(uls_conn_fd(c, fd), &m, kflags);
	if (n < 0 && errno == EAGAIN && (kflags & MSG_DONTWAIT) && !(flags & MSG_DONTWAIT) &&
	    !nonblock) {
		if (tokens)
			uls_token_read_end(c);
		int r = wait_rung(c, fd, deadline, 0, max_sleep_ms(c), bell, bounded);
		return r < 0 ? r : -EALREADY;
	}
	if (n <= 0) {
		int err = errno;
		if (tokens)
			uls_token_read_end(c);
		errno = err;
		/* The end of the client's TCP stream: it closed, unless it only shut down. */
		if (n == 0 && !(atomic_load(&s->peer->state) & ULS_SIDE_TCP_SHUT))
			note_peer_end(c, 0);
		return n < 0 ? -errno : 0;
	}
	msg->msg_flags = m.msg_flags;
	if (atomic_load_explicit(&s->peer->switched, memory_order_acquire)) {
		/* The switch happened during the call: what lies past it are wake-ups. */
		uint64_t data = atomic_load(&s->peer->switch_pos) - have;
		if ((uint64_t)n > data) {
			if (!(flags & MSG_PEEK)) {
				atomic_fetch_add(&s->me->tokens_seen, (uint64_t)n - data);
				tokens_taken(c);
			}
			n = (ssize_t)data;
		}
	}
	if (!(flags & MSG_PEEK))
		atomic_fetch_add(&s->me->tcp_data, (uint64_t)n);
	if (tokens)
		uls_token_read_end(c);
	return n > 0 ? n : -EALREADY;
}

/* Client before the server attached: TCP carries data, unless the server attaches. */
static ssize_t tcp_recv_pending(struct uls_conn *c, int fd, struct msghdr *msg, int flags,
				int nonblock, uint64_t deadline)
{
	struct uls_shm_conn *s = shm_of(c);
	char sink[256];
	ssize_t n;

	for (;;) {
		/* The flag costs the server a wake-up byte: not when it attached already. */
		if (uls_conn_peer_attached(c))
			return -EALREADY;
		int bounded = 0, bell = nonblock ? -1 : bell_join(c, &bounded);
		/* A server that attaches later must wake this reader through the ring. */
		atomic_fetch_or(&s->rx->sh->cons.want_data, ULS_WANT_TOKEN);
		uls_fence_heavy(&s->peer->light_fence);
		if (uls_conn_peer_attached(c))
			return -EALREADY;
		/* A server attaching now may send wake-ups, and then revert. */
		if (!uls_token_read_begin(c)) {
			/*
			 * Only one that attached first: its attach precedes its revert, so seeing
			 * the revert shows the attach too. Without it the server wrote what no
			 * honest one writes, and going round again would spin for as long as it
			 * stays so, even in a non-blocking call.
			 */
			if (uls_conn_peer_attached(c))
				return -EALREADY;
			uls_conn_broken(c, fd, "wake-ups closed by a server that never attached");
			return -ECONNRESET;
		}
		n = uls_libc.recvmsg(uls_conn_fd(c, fd), msg,
				     (flags & ~MSG_WAITALL) | MSG_DONTWAIT);
		if (n >= 0 || errno != EAGAIN || nonblock)
			break;
		uls_token_read_end(c);
		/* Sleep without consuming: what arrives may be data or a wake-up byte. */
		int r = wait_rung(c, fd, deadline, 0, max_sleep_ms(c), bell, bounded);
		if (r < 0)
			return r;
	}
	if (n < 0) {
		n = -errno;
		uls_token_read_end(c);
		return n;
	}
	if (!uls_conn_peer_attached(c)) {
		uls_token_read_end(c);
		/* A ulsock server attaches before it sends anything: this peer never will. */
		if (peer_declined(c) && n > 0)
			uls_conn_set_kernel(c, fd, "peer declined");
		else if (!peer_declined(c))
			uls_conn_never_attached(c, fd, "peer is not running ulsock");
		return n;
	}
	if (n == 0) {
		note_peer_end(c, 0);
	} else {
		if (flags & MSG_PEEK)
			n = uls_libc.recv(uls_conn_fd(c, fd), sink,
					  (size_t)n < sizeof(sink) ? (size_t)n : sizeof(sink), MSG_DONTWAIT);
		if (n > 0) {
			atomic_fetch_add(&s->me->tokens_seen, (uint64_t)n);
			tokens_taken(c);
		}
	}
	uls_token_read_end(c);
	return -EALREADY;
}

/*
 * Receive pacing. A receiver that keeps up with a one-way stream empties the ring on every
 * call and looks at the producer's tail again at once. Each look takes the tail's line
 * from the producer, whose next publication must fetch it back before its later stores
 * can drain: with 64-byte sends the line crossed between the cores once per message and
 * held the sender to about 15 M messages/s. A blocking receive that follows one which
 * emptied the ring, with no send from this process in between, therefore looks no sooner
 * than ULSOCK_RX_PACE_NS after the previous paced look, and the producer publishes a
 * batch into a line it keeps. A message that comes later than that after the last look is
 * seen at once: only a stream faster than one message per interval is batched, and a
 * request/response exchange (a send between two receives) never waits.
 */
__thread int uls_peek_raw __attribute__((tls_model("initial-exec")));

static void rx_pace(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);
	uint64_t now = uls_now_ns();
	uint64_t until = atomic_load_explicit(&s->rx_looked_ns, memory_order_relaxed) +
			 uls_cfg.rx_pace_ns;

	while (now < until) {
		uls_cpu_relax();
		now = uls_now_ns();
	}
	atomic_store_explicit(&s->rx_looked_ns, now, memory_order_relaxed);
}

/* Receives what the ring holds, waiting for something unless non-blocking. */
static ssize_t ring_recv(struct uls_conn *c, int fd, struct msghdr *msg, int flags,
			 size_t total, int nonblock, uint64_t deadline)
{
	struct uls_shm_conn *s = shm_of(c);
	if (!nonblock && uls_cfg.rx_pace_ns &&
	    atomic_load_explicit(&s->rx_stream, memory_order_relaxed))
		rx_pace(c);
	for (;;) {
		if (!solo_now(c, RXL))
			s->rx_mine_ok = 0;
		uint64_t head = s->rx_mine_ok ? s->rx_head_mine
					      : atomic_load_explicit(&s->rx->sh->cons.head,
								     memory_order_relaxed);
		int64_t avail = uls_ring_readable(s->rx, head);
		if (avail < 0) {
			if (!cut_off(c, fd))
				uls_conn_broken(c, fd, "producer position out of range");
			return -ECONNRESET;
		}
		/* SO_PEEK_OFF: a peek starts that far in and moves it (kernel semantics). */
		int peek_off = (flags & MSG_PEEK) && !uls_peek_raw ? atomic_load(&c->peek_off) : -1;
		uint64_t skip = peek_off > 0 ? (uint64_t)peek_off : 0;
		if (avail > (int64_t)skip) {
			size_t n = total < (uint64_t)avail - skip ? total : (size_t)(avail - (int64_t)skip);
			/* MSG_TRUNC on a stream: the bytes are consumed, not copied. */
			if (!(flags & MSG_TRUNC))
				uls_ring_copy_out(s->rx, head + skip, msg->msg_iov, (int)msg->msg_iovlen,
						  0, n);
			if (flags & MSG_PEEK) {
				if (peek_off >= 0)
					atomic_store(&c->peek_off, peek_off + (int)n);
				return (ssize_t)n;
			}
			/* Consumed bytes come off the peek offset (the kernel's sk_peek_offset_bwd). */
			int po = atomic_load(&c->peek_off);
			if (po > 0)
				atomic_store(&c->peek_off, (size_t)po > n ? po - (int)n : 0);
			/* Release: the producer may reuse the space once it sees the new head. */
			atomic_store_explicit(&s->rx->sh->cons.head, head + n, memory_order_release);
			s->rx_head_mine = head + n;
			s->rx_mine_ok = (uint8_t)solo_now(c, RXL);
			uint8_t stream = (uint64_t)avail == n;
			if (stream != atomic_load_explicit(&s->rx_stream, memory_order_relaxed))
				atomic_store_explicit(&s->rx_stream, stream, memory_order_relaxed);
			wake_producer(c, fd);
			return (ssize_t)n;
		}
		if (atomic_load(&c->broken) || cut_off(c, fd))
			return -ECONNRESET;
		int back = uls_revert_rx_back(c, fd, nonblock_now(c, fd, flags, nonblock));
		if (back != 0)
			return back < 0 ? back : -EALREADY;
		if (reset_unreported(c))
			return reset_reported(c, fd);
		if (atomic_load(&s->rx->sh->prod.eof) || atomic_load(&c->peer_gone)) {
			/*
			 * The peer published its last bytes before it set eof or closed TCP:
			 * look at the ring once more before reporting the end of the stream.
			 */
			if (uls_ring_readable(s->rx, head) > (int64_t)skip)
				continue;
			int e = atomic_load(&s->rx->sh->prod.eof) ? 0 : atomic_load(&c->peer_err);
			return e ? -e : 0;
		}
		if (atomic_load(&c->shut_rd))
			return 0;
		if (atomic_load(&c->closed))
			return -EBADF;
		if (nonblock_now(c, fd, flags, nonblock)) {
			/* A program polling this way never sleeps on the socket: look at TCP
			 * now and then, or a peer gone without a close would never be seen. */
			uint64_t seen = atomic_load(&s->tcp_checked);
			check_tcp_sometimes(c, fd, uls_now_ns());
			if (seen != atomic_load(&s->tcp_checked) &&
			    (atomic_load(&c->peer_gone) ||
			     uls_ring_readable(s->rx, head) > (int64_t)skip))
				continue;
			return -EAGAIN;
		}
		/* The peer may wait for this side to move its sending direction back to TCP
		 * (revert.c): serve that before sleeping, since its wake-up may have been
		 * consumed already and a sleeper with the request pending would not see it. */
		if (atomic_load(&s->peer->revert_req) && !atomic_load(&s->me->tx_reverted)) {
			uls_revert_serve(c, fd);
			if (atomic_load(&s->me->tx_reverted))
				continue;
		}
		dir_unlock(c, RXL);
		rx_need = (int64_t)skip + 1;
		int r = wait_rx(c, fd, deadline);
		rx_need = 1;
		dir_lock(c, RXL);
		if (r < 0)
			return r;
	}
}


/* A blocking receive returns once it has this much: the kernel's sock_rcvlowat. */
static size_t recv_target(struct uls_conn *c, int flags, size_t total)
{
	int lowat = atomic_load_explicit(&c->rcvlowat, memory_order_relaxed);

	if (flags & MSG_WAITALL)
		return total;
	if (lowat <= 1)
		return 1;
	return (size_t)lowat < total ? (size_t)lowat : total;
}

/*
 * A receive after shutdown(SHUT_RD): the end of the stream, unless the peer's data came
 * after a SHUT_RDWR: the kernel answered it with a reset, and a receive reports
 * ECONNRESET once, as on plain TCP (SO_ERROR takes the error, as the kernel's receive
 * does). On the rings the peer says so (ULS_SIDE_RESET): the kernel socket carries
 * wake-ups there too, whose reset is no error of the stream's.
 */
static ssize_t shut_rd_end(struct uls_conn *c, int fd)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (!(uls_shm_kernel_parts(c) & ULS_KERNEL_RX)) {
		/* The peer's data came after our SHUT_RDWR (send_to_gone_peer). */
		return reset_unreported(c) ? reset_reported(c, fd) : 0;
	}
	if (uls_libc.getsockopt(uls_conn_fd(c, fd), SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		return 0;
	return err ? -err : 0;
}

/*
 * After SHUT_RD Linux still delivers what is queued and what comes later; only a receive
 * that finds nothing returns 0 at once instead of waiting. Served so where the bytes are
 * the stream's: on the ring, on TCP after a move back, and a client's TCP data from a
 * server without ulsock. A server before its client's switch (TCP carries the switch
 * there) and a receiver whose peer is moving back answer shut_rd_end.
 */
static int shut_rd_reads(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);
	char b;

	if (!s->seg.hdr)
		return 0;
	/* TCP data: what the kernel holds (its reads would take our own SHUT_RD's end of
	 * the stream for the peer's). */
	if (atomic_load(&s->me->rx_back) || (c->role == ULS_CLIENT && !uls_conn_peer_attached(c)))
		return uls_libc.recv(uls_conn_fd(c, fd), &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
	/* The ring, unless the client has not switched yet or the peer is moving back. */
	return !(c->role == ULS_SERVER && !rx_token_zone(c)) &&
	       !atomic_load(&s->peer->tx_reverted);
}

/*
 * One receive: TCP data before the ring took over, then the ring. MSG_WAITALL goes on
 * across both until the buffer is full, the stream ends, or an error or signal stops it.
 */
static ssize_t conn_recv(struct uls_conn *c, int fd, struct msghdr *msg, int flags)
{
	struct uls_shm_conn *s = shm_of(c);
	size_t total = iov_total(msg->msg_iov, (int)msg->msg_iovlen), done = 0;
	int nonblock = (flags & MSG_DONTWAIT) || atomic_load(&c->nonblock);
	size_t target = recv_target(c, flags, total);
	/* SO_RCVTIMEO bounds the whole call, however many waits it takes. */
	uint64_t deadline = deadline_of(c->rcvtimeo_ns);
	struct iovec tmp[64];
	ssize_t n;

	msg->msg_flags = 0;
	if (atomic_load(&c->shut_rd)) {
		if (!shut_rd_reads(c, fd))
			return shut_rd_end(c, fd);
		nonblock = 1;
	}
	if (total == 0)
		return 0;
	/* A broken connection delivers nothing more, not even bytes already on the ring. */
	if (atomic_load(&c->broken))
		return -ECONNRESET;
	dir_lock(c, RXL);
	for (;;) {
		struct msghdr m = *msg;
		if (done) {
			m.msg_iov = tmp;
			m.msg_iovlen = (size_t)iov_window(msg->msg_iov, (int)msg->msg_iovlen, done, tmp,
							  64);
		}
		uls_revert_serve(c, fd);
		/* The peer moved its sending direction back to TCP: follow it once the ring
		 * bytes before its revert point are read (at once if it never switched). */
		if (!atomic_load(&s->me->rx_back) && atomic_load(&s->peer->tx_reverted)) {
			int back = uls_revert_rx_back(c, fd, nonblock);
			if (back < 0) {
				n = back;
				break;
			}
		}
		if (atomic_load(&s->me->rx_back)) {
			n = uls_libc.recvmsg(uls_conn_fd(c, fd), &m, flags);
			n = n < 0 ? -errno : n;
		} else if (c->role == ULS_CLIENT && !uls_conn_peer_attached(c)) {
			n = tcp_recv_pending(c, fd, &m, flags, nonblock, deadline);
		} else if (c->role == ULS_SERVER && !rx_token_zone(c)) {
			n = tcp_recv_before_switch(c, fd, &m, flags, total - done, nonblock,
						   deadline);
		} else {
			if (c->role == ULS_CLIENT && atomic_load(&c->path) == ULS_PATH_PENDING) {
				/* The server attached: its bytes come on the ring from now on. */
				atomic_store(&c->path, ULS_PATH_SHM);
				uls_conn_log_path(c, fd);
			}
			if (c->role == ULS_CLIENT && !atomic_load(&s->me->switched) &&
			    uls_conn_trylock(c, TXL)) {
				/* Switch now, so this side can send wake-ups for the ring. */
				if (!atomic_load(&s->me->switched) &&
				    !(atomic_load(&s->me->state) & ULS_SIDE_TCP_SHUT))
					uls_conn_client_switch(c, fd);
				uls_conn_unlock(c, TXL);
			}
			n = ring_recv(c, fd, &m, flags, total - done, nonblock, deadline);
		}
		if (n == -EALREADY)
			continue;
		if (n > 0) {
			done += (size_t)n;
			if (done < target && !(flags & MSG_PEEK) && (!nonblock || (flags & MSG_WAITALL)))
				continue;
		}
		break;
	}
	if (done)
		n = (ssize_t)done;
	if (!(flags & MSG_PEEK))
		stat_add(c->stat ? &c->stat->rx_bytes : NULL, n);
	dir_unlock(c, RXL);
	return n;
}

/*
 * A send that published bytes before the cut returns their count, as TCP returns the
 * count of bytes it took before a reset: the peer may have read them, and a program told
 * they failed would send them again. The connection is broken now: the next call fails.
 */
static ssize_t send_result(struct uls_conn *c, int fd, ssize_t n)
{
	return cut_off(c, fd) && n <= 0 ? -ECONNRESET : n;
}

/* Calls in progress hold the conn against a concurrent close() in another thread. */
ssize_t uls_shm_send(struct uls_conn *c, int fd, const struct iovec *iov, int iovcnt,
		      int flags)
{
	ssize_t n;
	int solo = solo_begin(c, TXL);

	if (solo < 0)
		return solo;
	if (solo) {
		n = conn_send(c, fd, iov, iovcnt, flags);
		solo_end(c);
		return send_result(c, fd, n);
	}
	if (!uls_conn_hold(c))
		return -EBADF;
	n = send_result(c, fd, conn_send(c, fd, iov, iovcnt, flags));
	uls_conn_unhold(c);
	return n;
}

ssize_t uls_shm_recv(struct uls_conn *c, int fd, struct msghdr *msg, int flags)
{
	ssize_t n;
	int solo = solo_begin(c, RXL);

	if (solo < 0)
		return solo;
	if (solo) {
		n = conn_recv(c, fd, msg, flags);
		solo_end(c);
		if (__builtin_expect(atomic_load_explicit(&c->revert_owed, memory_order_relaxed), 0))
			uls_conn_revert_owed(c, fd);
		return cut_off(c, fd) ? -ECONNRESET : n;
	}
	if (!uls_conn_hold(c))
		return -EBADF;
	n = conn_recv(c, fd, msg, flags);
	if (cut_off(c, fd))
		n = -ECONNRESET;
	else if (atomic_load_explicit(&c->revert_owed, memory_order_relaxed))
		uls_conn_revert_owed(c, fd);
	uls_conn_unhold(c);
	return n;
}

/* This side reads the ring no more: the peer's sends go to send_to_gone_peer. */
static void rx_ring_close(struct uls_conn *c, int fd)
{
	atomic_store(&shm_of(c)->rx->sh->cons.closed, 1);
	wake_producer(c, fd);
}

/* A client's SHUT_WR ends its stream on the ring once it switched: it switches now if its
 * server attached and the stream did not end on TCP already. (send lock held) */
static void client_switch_for_end(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);

	if (c->role == ULS_CLIENT && !atomic_load(&s->me->switched) && uls_conn_peer_attached(c) &&
	    !(atomic_load(&s->me->state) & ULS_SIDE_TCP_SHUT))
		uls_conn_client_switch(c, fd);
}

int uls_shm_shutdown(struct uls_conn *c, int fd, int how)
{
	struct uls_shm_conn *s = shm_of(c);
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return -EINVAL;
	/*
	 * Shut both ways on the rings (SHUT_RDWR, or the second half): the socket is shut for
	 * reading, and its kernel socket both ways, before the peer can see the ring's end.
	 * So plain TCP's FIN comes, with the socket already shut for reading: a peer that
	 * answers the end with data finds it so, and its kernel resets (send_to_gone_peer).
	 * The FIN wakes the peer's sleepers as a wake-up would.
	 */
	int both = how == SHUT_RDWR || (how == SHUT_RD && atomic_load(&c->shut_wr)) ||
		   (how == SHUT_WR && atomic_load(&c->shut_rd));
	/*
	 * Early, too, where a direction is still on TCP (a server before its client's switch,
	 * a side moving back): the peer must not see the ring's end before the ring is
	 * closed, or it answers the end on the ring and this side reads its bytes. A client
	 * whose server attached switches first (its switch goes on TCP, before the FIN); one
	 * that cannot ends its stream with that FIN, on TCP.
	 */
	if (both && c->role == ULS_CLIENT && !atomic_load(&s->me->switched)) {
		uls_conn_lock(c, TXL);
		client_switch_for_end(c, fd);
		uls_conn_unlock(c, TXL);
	}
	int on_rings = uls_shm_kernel_parts(c) == 0, early = both;
	if (early) {
		atomic_store(&c->shut_rd, 1);
		rx_ring_close(c, fd);
		uls_libc.shutdown(uls_conn_fd(c, fd), SHUT_RDWR);
	}
	if (how != SHUT_RD) {
		uls_conn_lock(c, TXL);
		if (!early)
			client_switch_for_end(c, fd);
		int on_tcp = atomic_load(&s->me->tx_reverted);
		if (!on_tcp && c->role == ULS_CLIENT && !atomic_load(&s->me->switched)) {
			on_tcp = 1;
			atomic_fetch_or(&s->me->state, ULS_SIDE_TCP_SHUT);
		}
		if (on_tcp) {
			/* Still (or again: urgent data, a revert) on TCP: the peer reads the end
			 * of the stream there (early: the SHUT_RDWR above sent it). */
			int r = early ? 0 : uls_libc.shutdown(uls_conn_fd(c, fd), SHUT_WR);
			uls_conn_unlock(c, TXL);
			if (r < 0)
				return -errno;
		} else {
			atomic_store(&s->tx->sh->prod.eof, 1);
			uls_conn_unlock(c, TXL);
			atomic_thread_fence(memory_order_seq_cst);
			uls_conn_wake_peer(c);
			if (!early)
				uls_conn_send_token(c, fd);
		}
		atomic_store(&c->shut_wr, 1);
	}
	/*
	 * SHUT_RD alone on the rings leaves the ring open: Linux still queues what the peer
	 * sends and delivers it (conn_recv), and a peer that fills the buffer waits. (Shut
	 * both ways on the rings was done above, early.)
	 */
	if (how != SHUT_WR && !early) {
		atomic_store(&c->shut_rd, 1);
		if (!on_rings)
			rx_ring_close(c, fd);
	}
	/*
	 * The kernel's shutdown wakes this process's threads blocked on the socket, as it
	 * would with plain TCP (SHUT_RDWR also sends the peer its FIN: we are done both ways).
	 */
	if (how != SHUT_WR && !early)
		uls_libc.shutdown(uls_conn_fd(c, fd), how);
	uls_conn_wake_self(c);
	uls_waitq_kick(&c->wq);
	return 0;
}

int uls_shm_kernel_parts(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);
	if (atomic_load(&c->path) == ULS_PATH_KERNEL || !s->seg.hdr)
		return ULS_KERNEL_RX | ULS_KERNEL_TX;
	if (atomic_load(&s->me->rx_back) || atomic_load(&s->me->tx_reverted))
		return (atomic_load(&s->me->rx_back) ? ULS_KERNEL_RX : 0) |
		       (atomic_load(&s->me->tx_reverted) ? ULS_KERNEL_TX : 0);
	/*
	 * Once both directions run on the rings, only this side's own revert or fallback
	 * (checked above) ends it: the peer's attach and switch are for good. Caching that
	 * keeps poll and epoll, which ask for every socket in the set on every pass, off the
	 * peer's cache lines.
	 */
	if (atomic_load_explicit(&s->on_rings, memory_order_relaxed))
		return 0;
	int parts;
	if (c->role == ULS_CLIENT)
		parts = uls_conn_peer_attached(c) ? 0 : ULS_KERNEL_RX | ULS_KERNEL_TX;
	else
		parts = rx_token_zone(c) ? 0 : ULS_KERNEL_RX;
	if (!parts)
		atomic_store_explicit(&s->on_rings, 1, memory_order_relaxed);
	return parts;
}

int uls_shm_ready(struct uls_conn *c, int events)
{
	struct uls_shm_conn *s = shm_of(c);
	int parts = uls_shm_kernel_parts(c), r = 0;

	if (!(parts & ULS_KERNEL_RX)) {
		if (rx_poll_ready(c))
			r |= POLLIN;
		if (atomic_load(&s->rx->sh->prod.eof) || atomic_load(&c->peer_gone))
			r |= POLLIN | POLLRDHUP;
		if (atomic_load(&c->peer_err) || atomic_load(&c->broken))
			r |= POLLERR | POLLHUP;
	}
	if (atomic_load(&c->shut_rd))
		r |= POLLIN | POLLRDHUP;
	if (!(parts & ULS_KERNEL_TX) && tx_room(c, 1))
		r |= POLLOUT;
	if (atomic_load(&c->shut_wr) && (r & POLLRDHUP))
		r |= POLLHUP;
	/* Zero-copy completions wait on the error queue (sockinfo.c). */
	if (atomic_load_explicit(&c->zc_pending, memory_order_relaxed))
		r |= POLLERR;
	/* A reset is an error until a call reported it (as the kernel's sk_err), a hang-up
	 * for good. */
	if (atomic_load(&s->peer->state) & ULS_SIDE_RESET)
		r |= atomic_load(&c->reset_seen) ? POLLHUP : POLLERR | POLLHUP;
	/* Last: the reads above may be what found the segment cut. A reset, as in TCP. */
	if (cut_off(c, c->stat ? c->stat->fd : -1))
		r = POLLIN | POLLOUT | POLLRDHUP | POLLERR | POLLHUP;
	return r & (events | POLLERR | POLLHUP);
}

/* A wait that is arming in this thread: a signal handler's wait inside it names no pipe. */
static __thread int arming __attribute__((tls_model("initial-exec")));

/*
 * What a sleeper in poll, select or epoll_wait asks of the peer's next move: a byte into
 * its bell's pipe (wakepipe.h) where it is the only sleeper of this side on the
 * connection, else a byte on TCP, which every sleeper has in its wait set. The pipe named
 * in the line stays while its want bit is set: another wait that arms meanwhile (another
 * thread's, with its bell registered first: bell.h; a signal handler's) asks for TCP.
 */
static void arm_want(struct uls_conn *c, _Atomic uint32_t *want, struct uls_wake_pipe *wp,
		     int bell)
{
	uint64_t who, ino;
	uint32_t bit = ULS_WANT_TOKEN;

	if (bell >= 0 && !arming++ && uls_bell_pipe(bell, &who, &ino) &&
	    !uls_conn_maybe_shared(c) &&
	    (ULS_SINGLE_THREADED() || !uls_bells_others(&c->bells, bell))) {
		if (!(atomic_load(want) & ULS_WANT_PIPE)) {
			atomic_store_explicit(&wp->who, who, memory_order_relaxed);
			atomic_store_explicit(&wp->ino, ino, memory_order_relaxed);
			bit = ULS_WANT_PIPE;
		} else if (atomic_load_explicit(&wp->who, memory_order_relaxed) == who &&
			   atomic_load_explicit(&wp->ino, memory_order_relaxed) == ino) {
			bit = ULS_WANT_PIPE;
		}
	}
	/* Seq_cst, as the fence after it: the waker that exchanges the word sees the pipe. */
	atomic_fetch_or(want, bit);
	if (bell >= 0)
		arming--;
}

void uls_shm_arm(struct uls_conn *c, int events, int bell)
{
	struct uls_shm_conn *s = shm_of(c);
	int parts = uls_shm_kernel_parts(c);

	/*
	 * Also while the kernel decides readability (TCP data before the switch): the peer's
	 * first ring write must then send a wake-up, or a sleeper waiting for TCP data would
	 * never learn that the data moved to the ring.
	 */
	if ((events & POLLIN) && s->seg.hdr)
		arm_want(c, &s->rx->sh->cons.want_data, &s->rx->sh->cons.data_pipe, bell);
	if ((events & POLLOUT) && !(parts & ULS_KERNEL_TX))
		arm_want(c, &s->tx->sh->prod.want_space, &s->tx->sh->prod.space_pipe, bell);
	if (s->seg.hdr)
		uls_fence_heavy(&s->peer->light_fence);
	else
		atomic_thread_fence(memory_order_seq_cst);
}

uint64_t uls_shm_gen(struct uls_conn *c, int events)
{
	struct uls_shm_conn *s = shm_of(c);
	uint64_t g = 0;

	if (!s->seg.hdr)
		return 0;
	/* New bytes, or the end of the stream however it is learned, is one edge each. */
	if (events & POLLIN)
		g += atomic_load(&s->rx->sh->prod.tail) * 2 +
		     (atomic_load(&s->rx->sh->prod.eof) || atomic_load(&c->peer_gone));
	/* Like TCP, a writable edge follows only a send that found no room. */
	if (events & POLLOUT)
		g += atomic_load(&s->tx_full) << 40;
	return g;
}

int uls_shm_inq(struct uls_conn *c, int fd, int *out)
{
	struct uls_shm_conn *s = shm_of(c);
	int parts = uls_shm_kernel_parts(c);

	if (parts & ULS_KERNEL_RX) {
		int k = 0;
		if (uls_libc.ioctl(uls_conn_fd(c, fd), FIONREAD, &k) < 0)
			return -errno;
		if (c->role == ULS_SERVER && atomic_load(&s->peer->switched)) {
			uint64_t left = atomic_load(&s->peer->switch_pos) - atomic_load(&s->me->tcp_data);
			if ((uint64_t)k > left)
				k = (int)left;
		}
		*out = k;
		return 0;
	}
	int64_t a = uls_ring_readable(s->rx, atomic_load(&s->rx->sh->cons.head));
	*out = a < 0 ? 0 : (int)a;
	return 0;
}

int uls_shm_outq(struct uls_conn *c, int fd, int *out)
{
	/*
	 * Bytes in the ring are already in the receiver's buffer, as data acknowledged by a
	 * loopback peer is: nothing is left in flight.
	 */
	(void)c;
	*out = 0;
	return 0;
}
