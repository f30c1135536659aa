/* SPDX-License-Identifier: MIT */
/*
 * Moving an accelerated connection back to plain kernel TCP in place, with the peer's
 * cooperation: docs/protocol.md, section 8. The leaving side asks and reverts its sending
 * direction; the peer, in any of its calls on the connection, reverts its own and sends
 * the ring bytes the leaving side had not read again on TCP.
 */
#include <errno.h>
#include <sys/ioctl.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "shm_int.h"

#include "../../core/log.h"
#include "../../os/cpu.h"
#include "../../os/libc.h"
#include "fence.h"
#include "shmlock.h"


/* TCP bytes this side has put on its direction: data before its switch, and wake-ups. */
static uint64_t tcp_sent(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);
	uint64_t n = atomic_load(&s->me->tokens_sent);

	return c->role == ULS_CLIENT ? n + atomic_load(&s->me->tcp_data) : n;
}

/* TCP bytes this side has consumed from the peer's direction. */
static uint64_t tcp_consumed(struct uls_conn *c)
{
	struct uls_shm_conn *s = shm_of(c);
	uint64_t n = atomic_load(&s->me->tokens_seen);

	return c->role == ULS_SERVER ? n + atomic_load(&s->me->tcp_data) : n;
}

#define REVERT_IO_MS 5000
/* How long a revert waits for the peer's own call before it acts for an idle peer. */
#define ASSIST_AFTER_NS 50000000u
/* How long a revert yields the processor, not napping, while it waits for the peer. */
#define YIELD_NS 200000u
/* How long one such act waits for this side's readers of wake-ups to finish. */
#define ASSIST_READERS_NS 1000000u

static int wait_fd(int fd, short events, uint64_t deadline)
{
	struct pollfd p = {.fd = fd, .events = events};
	uint64_t now = uls_now_ns();

	if (now >= deadline)
		return -ETIMEDOUT;
	int r = uls_libc.poll(&p, 1, (int)((deadline - now) / 1000000) + 1);
	return r < 0 && errno != EINTR ? -errno : 0;
}

static int send_all_tcp(int fd, const uint8_t *p, size_t len)
{
	uint64_t deadline = uls_now_ns() + REVERT_IO_MS * 1000000ull;

	while (len > 0) {
		ssize_t n = uls_libc.send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
		} else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			int r = wait_fd(fd, POLLOUT, deadline);
			if (r < 0)
				return r;
		} else {
			return n < 0 ? -errno : -EPIPE;
		}
	}
	return 0;
}

static int discard_tcp(int fd, uint64_t len, uint64_t *done, int nonblock)
{
	uint64_t deadline = uls_now_ns() + REVERT_IO_MS * 1000000ull;
	char buf[4096];

	while (len > 0) {
		ssize_t n = uls_libc.recv(fd, buf, len < sizeof(buf) ? len : sizeof(buf), MSG_DONTWAIT);
		if (n > 0) {
			len -= (uint64_t)n;
			*done += (uint64_t)n;
		} else if (n < 0 && errno == EAGAIN && nonblock) {
			return -EAGAIN;
		} else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			int r = wait_fd(fd, POLLIN, deadline);
			if (r < 0)
				return r;
		} else {
			return n < 0 ? -errno : -EPIPE;
		}
	}
	return 0;
}

static void maybe_all_kernel(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);
	if (atomic_load(&s->me->tx_reverted) && atomic_load(&s->me->rx_back))
		uls_conn_set_kernel(c, fd, "moved back to kernel TCP");
}

/*
 * Before this side's TCP bytes turn into data again, no call of the peer may be reading
 * them as wake-ups (io.c, uls_token_read_begin): it could take the first data bytes
 * for wake-ups. New reads back off once they see tokens_closed; reads already under way
 * (a sleeper blocked in recv) are woken with wake-ups that still count as such. A peer
 * that never lets its count fall (killed inside a read, or hostile) delays its own
 * connection's revert by REVERT_IO_MS, no more. Caller holds the token lock.
 */
static void close_tokens(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);
	uint64_t deadline = uls_now_ns() + REVERT_IO_MS * 1000000ull, next = 0;

	atomic_store(&s->me->tokens_closed, 1);
	/* A client that never switched sent nothing but data: none is read as a wake-up. */
	if (c->role == ULS_CLIENT && !atomic_load(&s->me->switched))
		return;
	while (atomic_load(&s->peer->token_readers) != 0) {
		uint64_t now = uls_now_ns();
		if (now >= deadline) {
			uls_warn("fd=%d: the peer kept reading wake-ups through a revert", fd);
			return;
		}
		/* A closing peer refuses wake-ups: its reads do not block (conn.c). */
		if (now >= next && !atomic_load(&s->peer->tokens_refused)) {
			uls_conn_send_token_locked(c, fd);
			next = now + 1000000u;
		}
		sched_yield();
	}
}

/*
 * Moves this side's sending direction back to TCP. The ring bytes before ring_end count
 * (the consumer reads them from the ring); those from ring_end to the tail are sent
 * again on TCP. From now on this side sends no wake-ups: its TCP bytes are data again.
 * Caller holds the send lock.
 */
static int tx_revert(struct uls_conn *c, int fd, uint64_t ring_end)
{
	struct uls_shm_conn *s = shm_of(c);
	uint64_t tail = atomic_load(&s->tx->sh->prod.tail);
	uint8_t buf[4096]; /* a thread with a small stack may be the one that moves back */

	if (uls_ring_dist(ring_end, tail) > s->tx->size) {
		uls_conn_broken(c, fd, "ring end out of range in a revert");
		return -EPROTO;
	}
	uls_shmlock_acquire(&s->me->token_lock, &s->me->token_owner);
	close_tokens(c, fd);
	atomic_store(&s->me->revert_ring_end, ring_end);
	atomic_store(&s->me->revert_tcp_pos, tcp_sent(c));
	/* The consumer reads the two fields only after it sees the flag. */
	atomic_store_explicit(&s->me->tx_reverted, 1, memory_order_seq_cst);
	uls_shmlock_release(&s->me->token_lock, &s->me->token_owner);
	uls_conn_wake_peer(c);
	for (uint64_t pos = ring_end; pos != tail;) {
		size_t n = tail - pos < sizeof(buf) ? (size_t)(tail - pos) : sizeof(buf);
		struct iovec iov = {.iov_base = buf, .iov_len = n};
		uls_ring_copy_out(s->tx, pos, &iov, 1, 0, n);
		int r = send_all_tcp(uls_conn_fd(c, fd), buf, n);
		if (r < 0) {
			uls_conn_broken(c, fd, "resending ring bytes on TCP failed");
			return r;
		}
		pos += n;
	}
	/* This side had shut down writing on the ring: its end of stream moves to TCP too,
	 * as the FIN the reader will wait for there. */
	if (atomic_load(&s->tx->sh->prod.eof))
		uls_libc.shutdown(uls_conn_fd(c, fd), SHUT_WR);
	maybe_all_kernel(c, fd);
	return 0;
}

/* The peer asked for this side's bytes on TCP. Caller holds the send lock. */
void uls_revert_serve_locked(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);
	if (!atomic_load(&s->peer->revert_req) || atomic_load(&s->me->tx_reverted))
		return;
	/* The peer stopped reading at its head: everything after it goes again on TCP. */
	tx_revert(c, fd, atomic_load(&s->tx->sh->cons.head));
}

void uls_revert_serve(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);
	if (!atomic_load(&s->peer->revert_req) || atomic_load(&s->me->tx_reverted))
		return;
	if (uls_conn_trylock(c, TXL)) {
		uls_revert_serve_locked(c, fd);
		uls_conn_unlock(c, TXL);
	}
}

/*
 * The peer sends on TCP again: once this side has read its ring up to the ring end, it
 * skips the peer's wake-up bytes and reads TCP. Caller holds the receive lock. Returns
 * 1 when the direction is back on TCP, 0 while ring bytes remain, or -errno.
 */
int uls_revert_rx_back(struct uls_conn *c, int fd, int nonblock)
{
	struct uls_shm_conn *s = shm_of(c);
	if (atomic_load(&s->me->rx_back))
		return 1;
	if (!atomic_load_explicit(&s->peer->tx_reverted, memory_order_acquire))
		return 0;
	/* A server moves back only after its attach (section 8): this one's TCP bytes are
	 * data, none of them its wake-ups to skip. */
	if (c->role == ULS_CLIENT && !uls_conn_peer_attached(c)) {
		uls_conn_broken(c, fd, "revert by a server that never attached");
		return -ECONNRESET;
	}
	/* A client's data from before its switch comes first on TCP: it is read as data
	 * (io.c, tcp_recv_before_switch) before anything there is skipped. */
	if (c->role == ULS_SERVER && atomic_load(&s->peer->switched) &&
	    atomic_load(&s->me->tcp_data) < atomic_load(&s->peer->switch_pos))
		return 0;
	uint64_t end = atomic_load(&s->peer->revert_ring_end);
	uint64_t head = atomic_load(&s->rx->sh->cons.head);
	if (head != end) {
		if (uls_ring_dist(head, end) > s->rx->size) {
			uls_conn_broken(c, fd, "ring end out of range in a revert");
			return -ECONNRESET;
		}
		return 0;
	}
	/* A client that never switched sent nothing but data on TCP. */
	if (c->role == ULS_SERVER && !atomic_load(&s->peer->switched)) {
		atomic_store(&s->me->rx_back, 1);
		maybe_all_kernel(c, fd);
		return 1;
	}
	uint64_t pos = atomic_load(&s->peer->revert_tcp_pos), have = tcp_consumed(c), got = 0;
	if (pos < have || pos - have > ((uint64_t)1 << 32)) {
		uls_conn_broken(c, fd, "TCP position out of range in a revert");
		return -ECONNRESET;
	}
	int r = discard_tcp(uls_conn_fd(c, fd), pos - have, &got, nonblock);
	atomic_fetch_add(&s->me->tokens_seen, got);
	if (r < 0)
		return r;
	atomic_store(&s->me->rx_back, 1);
	maybe_all_kernel(c, fd);
	return 1;
}

/*
 * Urgent data has no place on the ring: its mark, SIOCATMARK, POLLPRI and SIGURG are the
 * kernel's. So this side's sending direction goes back to TCP for good (the first half
 * of a revert, which needs nothing of the peer: it reads the ring up to the end recorded
 * here and TCP from then on), and the kernel sends the urgent byte in order behind the
 * bytes already on the ring. The other direction stays on the ring.
 */
int uls_shm_tx_to_kernel(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);
	int r = 0;

	if (!uls_conn_accelerated(c))
		return 0;
	if (!uls_conn_hold(c))
		return -EBADF;
	uls_conn_lock(c, TXL);
	if (!atomic_load(&s->me->tx_reverted)) {
		r = tx_revert(c, fd, atomic_load(&s->tx->sh->prod.tail));
		if (r == 0)
			uls_info("fd=%d: urgent data: its sending direction moved back to kernel TCP",
				 fd);
	}
	uls_conn_unlock(c, TXL);
	uls_conn_unhold(c);
	return r;
}

/*
 * The peer makes no call on the connection (it waits on something else, or for this
 * very process): this side moves the peer's sending direction to TCP for it, which
 * needs nothing of the peer's kernel socket when no byte the peer put on the ring is
 * unread here and the peer has not shut down writing. Every flag of the peer's
 * direction lives in the segment, so its next send finds itself on TCP. The peer's send
 * path is held off first: its lock (a solo call in progress, which would not take it,
 * is excluded the way uls_conn_join_side excludes one), then its token lock, as its
 * own revert takes them. Caller holds this side's receive lock. Returns 1 when done.
 */
static int assist_idle_peer(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);
	struct uls_side *p = s->peer;
	int done = 0;

	if (atomic_load(&s->rx->sh->prod.tail) != atomic_load(&s->rx->sh->cons.head) ||
	    atomic_load(&s->rx->sh->prod.eof))
		return 0;
	atomic_store(&p->multi, 1);
	uls_fence_global();
	if (atomic_load(&p->solo_busy[TXL]) ||
	    !uls_shmlock_try(&p->lock[TXL], &p->lock_owner[TXL]))
		return 0;
	if (uls_shmlock_try(&p->token_lock, &p->token_owner)) {
		uint64_t tail = atomic_load(&s->rx->sh->prod.tail);
		if (tail == atomic_load(&s->rx->sh->cons.head) && !atomic_load(&p->tx_reverted)) {
			/* From here the peer sends no wake-up; this side's readers of the ones
			 * before it back off (uls_token_read_begin) or finish. */
			atomic_store(&p->tokens_closed, 1);
			uint64_t until = uls_now_ns() + ASSIST_READERS_NS;
			while (atomic_load(&s->me->token_readers) && uls_now_ns() < until)
				sched_yield();
			if (atomic_load(&s->me->token_readers)) {
				/*
				 * A reader of this side is still inside a read of wake-ups (preempted
				 * there, or asleep in one): going on, it could take the peer's first
				 * data bytes for wake-ups. Not now, then: the flag goes back (the peer
				 * sends nothing while this side holds its token lock) and the revert
				 * tries again a millisecond later, within its own deadline. (Going on
				 * after 100 ms, as before, risked exactly that under load.)
				 */
				atomic_store(&p->tokens_closed, 0);
				uls_shmlock_release(&p->token_lock, &p->token_owner);
				uls_shmlock_release(&p->lock[TXL], &p->lock_owner[TXL]);
				return 0;
			}
			uint64_t tcp = atomic_load(&p->tokens_sent);
			if (c->role == ULS_SERVER)
				tcp += atomic_load(&p->tcp_data);
			atomic_store(&p->revert_ring_end, tail);
			atomic_store(&p->revert_tcp_pos, tcp);
			atomic_store_explicit(&p->tx_reverted, 1, memory_order_seq_cst);
			done = 1;
		}
		uls_shmlock_release(&p->token_lock, &p->token_owner);
	}
	uls_shmlock_release(&p->lock[TXL], &p->lock_owner[TXL]);
	if (done)
		uls_dbg("fd=%d: the idle peer's sending direction moved back to TCP for it", fd);
	return done;
}

int uls_shm_atmark(struct uls_conn *c, int fd, int *out)
{
	struct uls_shm_conn *s = shm_of(c);
	int r = 0;

	*out = 0;
	/* Urgent data travels on TCP only, behind the ring bytes before the peer's revert
	 * point and the wake-ups it sent before it: the mark is not reached until the ring
	 * is read up to there (and the wake-ups are skipped, which this does). */
	if (!atomic_load(&s->me->rx_back)) {
		if (!atomic_load_explicit(&s->peer->tx_reverted, memory_order_acquire))
			return 0;
		if (!uls_conn_hold(c))
			return -EBADF;
		uls_conn_lock(c, RXL);
		r = uls_revert_rx_back(c, fd, 0);
		uls_conn_unlock(c, RXL);
		uls_conn_unhold(c);
		if (r <= 0)
			return r;
	}
	return uls_libc.ioctl(uls_conn_fd(c, fd), SIOCATMARK, out) < 0 ? -errno : 0;
}

/*
 * Takes both directions' locks; with try, only if both are free at once: a receive that
 * owes a revert may run in a signal handler that interrupted this thread's own send.
 */
static int lock_both(struct uls_conn *c, int try)
{
	if (!try) {
		uls_conn_lock(c, RXL);
		uls_conn_lock(c, TXL);
		return 1;
	}
	if (!uls_conn_trylock(c, RXL))
		return 0;
	if (uls_conn_trylock(c, TXL))
		return 1;
	uls_conn_unlock(c, RXL);
	return 0;
}

static int revert(struct uls_conn *c, int fd, int timeout_ms, int try)
{
	struct uls_shm_conn *s = shm_of(c);
	uint64_t deadline = uls_now_ns() + (uint64_t)timeout_ms * 1000000u;
	int r = 0;

	if (!uls_conn_accelerated(c))
		return 0;
	if (!uls_conn_hold(c))
		return -EBADF;
	if (!lock_both(c, try)) {
		uls_conn_unhold(c);
		return -EAGAIN;
	}
	if (c->role == ULS_SERVER && atomic_load(&s->peer->switched) &&
	    atomic_load(&s->me->tcp_data) < atomic_load(&s->peer->switch_pos)) {
		/* Unread TCP data would sit in front of wake-up bytes in the kernel's queue. */
		r = -EBUSY;
		goto out;
	}
	if (c->role == ULS_CLIENT && uls_conn_peer_attached(c) && !atomic_load(&s->me->switched) &&
	    !(atomic_load(&s->me->state) & ULS_SIDE_TCP_SHUT))
		uls_conn_client_switch(c, fd);
	atomic_store_explicit(&s->me->revert_req, 1, memory_order_seq_cst);
	uls_conn_wake_peer(c);
	uls_conn_send_token(c, fd);
	if (!atomic_load(&s->me->tx_reverted))
		r = tx_revert(c, fd, atomic_load(&s->tx->sh->prod.tail));
	uls_conn_unlock(c, TXL);
	if (r < 0)
		goto out_rx;
	/* A server that has not attached yet sees the request and declines (server_attach). */
	atomic_thread_fence(memory_order_seq_cst);
	if (c->role == ULS_CLIENT && !uls_conn_peer_attached(c)) {
		atomic_store(&s->me->rx_back, 1);
		maybe_all_kernel(c, fd);
		goto out_rx;
	}
	/* The peer may be this very process (both ends of a connection in one program),
	 * and this thread the one that would serve it: then it is served here. */
	int pfd = -1;
	struct uls_conn *local = uls_conn_local_peer(c, &pfd);
	uint64_t assist_at = uls_now_ns() + ASSIST_AFTER_NS;
	/* A peer woken in a receive has mostly left its read of wake-ups by now (tx_revert
	 * waited for that, close_tokens) and answers soon: this thread yields for the first
	 * YIELD_NS rather than nap (one 20 us nap took 250 us here, timer slack and the
	 * scheduler), then naps from 20 us doubling to 1 ms (a fixed 1 ms nap made a move
	 * back cost 1.2 ms, uls-handoff). */
	uint64_t yield_until = uls_now_ns() + YIELD_NS;
	long nap_ns = 20000;
	while (!atomic_load_explicit(&s->peer->tx_reverted, memory_order_acquire)) {
		struct timespec ts = {0, nap_ns};
		uint64_t now = uls_now_ns();
		if (now >= deadline || atomic_load(&c->broken)) {
			r = -ETIMEDOUT;
			goto out_rx;
		}
		if (local && uls_conn_hold(local)) {
			uls_revert_serve(local, pfd);
			uls_conn_unhold(local);
		}
		/* A peer that makes no call has its direction moved for it, when it can. */
		if (now >= assist_at && assist_idle_peer(c, fd))
			break;
		if (now < yield_until) {
			sched_yield();
			continue;
		}
		nap_ns = nap_ns < 500000 ? nap_ns * 2 : 1000000;
		nanosleep(&ts, NULL);
	}
	r = uls_revert_rx_back(c, fd, 0);
	r = r == 1 ? 0 : (r < 0 ? r : -EPROTO);
out_rx:
	uls_conn_unlock(c, RXL);
	if (r == 0)
		uls_seg_remove(&s->seg);
	uls_conn_unhold(c);
	return r;
out:
	uls_conn_unlock(c, TXL);
	uls_conn_unlock(c, RXL);
	uls_conn_unhold(c);
	return r;
}

int uls_shm_revert(struct uls_conn *c, int fd, int timeout_ms)
{
	return revert(c, fd, timeout_ms, 0);
}

#define WHY_ASYNC "O_ASYNC (signal-driven I/O)"

void uls_shm_async(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);
	if (!uls_conn_accelerated(c))
		return;
	uls_info("fd=%d: %s: the connection moves back to kernel TCP", fd, WHY_ASYNC);
	int r = revert(c, fd, 2000, 0);
	if (r == -EBUSY) {
		/* The client's first bytes, unread, sit in front of the wake-ups on TCP. */
		atomic_store(&c->revert_owed, 1);
		atomic_fetch_or(&s->rx->sh->cons.want_data, ULS_WANT_TOKEN);
		uls_fence_heavy(&s->peer->light_fence);
		uls_dbg("fd=%d: it moves once the client's bytes from before the switch are read",
			fd);
	} else if (r < 0) {
		uls_err("fd=%d: %s, but it could not move back to kernel TCP: %s", fd, WHY_ASYNC,
			strerror(-r));
	}
}

void uls_conn_revert_owed(struct uls_conn *c, int fd)
{
	struct uls_shm_conn *s = shm_of(c);
	if (c->role == ULS_SERVER && atomic_load(&s->peer->switched) &&
	    atomic_load(&s->me->tcp_data) < atomic_load(&s->peer->switch_pos))
		return; /* still unread: not yet */
	if (!atomic_exchange(&c->revert_owed, 0))
		return;
	int r = revert(c, fd, 2000, 1);
	if (r == -EAGAIN || r == -EBUSY) {
		atomic_store(&c->revert_owed, 1); /* the next receive tries again */
		atomic_fetch_or(&s->rx->sh->cons.want_data, ULS_WANT_TOKEN);
	} else if (r < 0 && r != -EBADF) { /* EBADF: closed meanwhile */
		uls_err("fd=%d: %s, but it could not move back to kernel TCP: %s", fd, WHY_ASYNC,
			strerror(-r));
	}
}
