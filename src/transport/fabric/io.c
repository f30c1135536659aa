/* SPDX-License-Identifier: MIT */
/*
 * The fabric transport's data path, readiness and close (docs/protocol.md 9.6 to 9.8), and
 * its table of operations.
 *
 * Each direction carries its first bytes on TCP and the rest on the fabric from the
 * position its sender switched at: a receiver reads TCP up to the peer's SWITCH position,
 * then the connection's receive buffer, into which progress copies DATA as it arrives.
 * Sends copy into a slot and post it within the window the peer granted; nothing is
 * queued for later. A waiter sleeps in the kernel on the TCP socket and the endpoint's
 * wait descriptor, after fi_trywait said that no completion is left unread.
 */
#include "fabric_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "../../core/bell.h"
#include "../../core/config.h"
#include "../../core/fdtable.h"
#include "../../core/log.h"
#include "../../core/spin.h"
#include "../../os/cpu.h"
#include "../../os/libc.h"

#define END_DRAIN_NS 20000000ull
#define FAB_MOVED (-EXDEV) /* send_fabric: nothing sent, the connection moved back */ /* a FIN the kernel's overtook (9.8) */
#define FAB_YIELD (-100000) /* nothing done: the locks let go for a mover (f->movers) */
#define CLOSE_WAIT_MS 100
#define FLUSH_NS 1000000ull /* progress for posted sends before a wait elsewhere */

static inline int on_tcp(struct uls_conn *c)
{
	return atomic_load(&c->path) == ULS_PATH_KERNEL;
}

/* The peer's direction continues on the fabric from here (until the end of its fabric
 * stream, after a revert). */
static inline int rx_on_fabric(struct fab_conn *f)
{
	return f->peer_sw && __atomic_load_n(&f->rx_tcp, __ATOMIC_RELAXED) >= f->peer_sw_pos &&
	       !f->rev && !(f->peer_rev && f->peer_sw_pos + f->rx_out >= f->peer_fab_end);
}

static size_t iov_total(const struct iovec *iov, size_t n)
{
	size_t t = 0;

	for (size_t i = 0; i < n; i++)
		t += iov[i].iov_len;
	return t;
}

/* Fills tmp (up to 64 entries) with the part of iov from skip, at most limit bytes. */
static int iov_window(const struct iovec *iov, size_t n, size_t skip, size_t limit,
		      struct iovec *tmp)
{
	int k = 0;

	for (size_t i = 0; i < n && k < 64 && limit; i++) {
		size_t l = iov[i].iov_len;
		if (skip >= l) {
			skip -= l;
			continue;
		}
		size_t take = l - skip < limit ? l - skip : limit;
		tmp[k++] = (struct iovec){(char *)iov[i].iov_base + skip, take};
		limit -= take;
		skip = 0;
	}
	return k;
}

static uint64_t deadline_of(uint64_t timeo_ns)
{
	return timeo_ns ? uls_now_ns() + timeo_ns : 0;
}

static void stat_add(_Atomic uint64_t *counter, size_t n)
{
	if (counter && n)
		atomic_fetch_add_explicit(counter, n, memory_order_relaxed);
}

/*
 * Reads up to max wake-up bytes (9.7) off fd, without waiting (fab.mu held); returns how
 * many. They answer this side's SLEEPs, one each, and carry nothing.
 */
static uint64_t take_wakes(struct fab_conn *f, int fd, uint64_t max)
{
	char b[64];
	uint64_t took = 0;

	while (took < max) {
		size_t want = max - took < sizeof(b) ? (size_t)(max - took) : sizeof(b);
		ssize_t n = uls_libc.recv(fd, b, want, MSG_DONTWAIT);
		if (n <= 0)
			break;
		took += (uint64_t)n;
	}
	f->rx_wake += took;
	return took;
}

/* The wake-up bytes the peer sent before its REVERT and this side has not read: its TCP
 * data goes on after them (9.10; fab.mu held). */
static uint64_t wakes_due(const struct fab_conn *f)
{
	if (!f->peer_rev || !f->peer_sw || f->peer_sw_pos == UINT64_MAX)
		return 0;
	return f->peer_tcp_pos - f->peer_sw_pos - f->rx_wake;
}

int fab_wakes_skipped(struct fab_conn *f, int fd)
{
	uint64_t due = wakes_due(f);

	if (due)
		due -= take_wakes(f, fd, due);
	return due == 0;
}

/* The TCP socket reported an end or bytes while this side reads the fabric. */
static void note_tcp(struct fab_conn *f, int fd)
{
	char b;

	pthread_mutex_lock(&fab.mu);
	/* After the peer's switch, TCP brings only the answers to this side's SLEEPs. */
	if (rx_on_fabric(f) && !f->peer_rev && f->sleeps > f->rx_wake)
		take_wakes(f, fd, f->sleeps - f->rx_wake);
	ssize_t n = uls_libc.recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	int err = n < 0 ? errno : 0;

	/* After this side's SHUT_RD the kernel reports that end: not the peer's. */
	if (((n == 0 && !atomic_load(&f->c->shut_rd)) || (n < 0 && err != EAGAIN && err != EINTR)) &&
	    !f->tcp_end) {
		f->tcp_end = 1;
		uls_dbg("fabric: fd=%d TCP ended (%s) with %llu fabric bytes received, %s", fd,
			n == 0 ? "EOF" : strerror(err), (unsigned long long)f->rx_in,
			f->fin ? "the FIN too" : "no FIN yet");
	}
	if (err == ETIMEDOUT && !f->err) /* keepalive: the peer's host is gone (9.7) */
		f->err = ETIMEDOUT;
	else if (n > 0 && rx_on_fabric(f) && !f->peer_rev)
		fab_violation(f, "TCP bytes after the switch");
	fab_news(f);
	pthread_mutex_unlock(&fab.mu);
}

/*
 * Before a sleep without a wait descriptor (9.7): a SLEEP to the peer, which answers with
 * one byte on TCP once what this side waits for (want: data, space) is on its way, so
 * that the sleep on the TCP socket ends then. Only after the peer's SWITCH (before it, a
 * byte would be data), one SLEEP unanswered at a time, never while moving back (fab.mu
 * held). 1 when a SLEEP is out: TCP's POLLIN ends the sleep.
 */
static int sleep_ask(struct fab_conn *f, uint32_t want)
{
	if (!f->need_wake || f->hs != HS_DONE || !f->peer_sw || f->peer_sw_pos == UINT64_MAX ||
	    f->rev || f->peer_rev || f->tx_stop || f->err || f->fin || f->tcp_end || !want ||
	    __atomic_load_n(&f->rx_tcp, __ATOMIC_RELAXED) < f->peer_sw_pos)
		return 0;
	if (f->sleeps > f->rx_wake)
		return 1;
	if (fab_send_sleep(f, want, f->sleeps + 1) < 0)
		return 0;
	f->sleeps++;
	return 1;
}

/*
 * Liveness (9.7): a call that has waited 1 s on a connection gets keepalive on its TCP
 * socket, 1 s idle, 1 s apart, 3 probes, until it returns. The peer's kernel answers
 * them whether or not its program reads, so only an unreachable peer fails them, with
 * ETIMEDOUT about 4 s on; the program's own settings come back when the call ends.
 */
#define LIVENESS_NS 1000000000ull

struct keepalive {
	int on, idle, intvl, cnt;
};

static void liveness_on(int fd, struct keepalive *saved)
{
	static const int opts[4][2] = {{SOL_SOCKET, SO_KEEPALIVE}, {IPPROTO_TCP, TCP_KEEPIDLE},
				       {IPPROTO_TCP, TCP_KEEPINTVL}, {IPPROTO_TCP, TCP_KEEPCNT}};
	int *old[4] = {&saved->on, &saved->idle, &saved->intvl, &saved->cnt}, val[4] = {1, 1, 1, 3};

	for (int i = 0; i < 4; i++) {
		socklen_t len = sizeof(int);
		if (uls_libc.getsockopt(fd, opts[i][0], opts[i][1], old[i], &len) < 0)
			*old[i] = -1;
		uls_libc.setsockopt(fd, opts[i][0], opts[i][1], &val[i], sizeof(int));
	}
}

static void liveness_off(int fd, const struct keepalive *saved)
{
	static const int opts[4][2] = {{SOL_SOCKET, SO_KEEPALIVE}, {IPPROTO_TCP, TCP_KEEPIDLE},
				       {IPPROTO_TCP, TCP_KEEPINTVL}, {IPPROTO_TCP, TCP_KEEPCNT}};
	const int *old[4] = {&saved->on, &saved->idle, &saved->intvl, &saved->cnt};

	for (int i = 3; i >= 0; i--)
		if (*old[i] >= 0)
			uls_libc.setsockopt(fd, opts[i][0], opts[i][1], old[i], sizeof(int));
}

/*
 * One call's waits: the connection's gen when the caller last looked (under fab.mu: an
 * arrival after it ends the wait at once), the spin before the first sleep, when the
 * waits began, and the program's keepalive while the call's is on.
 */
struct call_wait {
	uint64_t gen, tx_done;
	int spun;
	struct uls_spin spin;
	uint64_t since;
	int ka;
	int busy;  /* waits in a row that the provider refused to let sleep */
	int slice; /* ms of the last sleep without a wait descriptor */
	struct keepalive saved;
};

static void call_wait_end(struct call_wait *w, int fd)
{
	if (w->ka)
		liveness_off(fd, &w->saved);
}

/*
 * Sleeps until something may have changed for f: the TCP socket (its data before the
 * peer's switch, or its end) or a completion. 0, -EAGAIN at the deadline, -EINTR.
 */
enum { WAIT_TX, WAIT_RX, WAIT_TX_TCP }; /* what a wait is for: fabric sends, receives, TCP
					 * sends before the switch */

/* Has what the wait w is for (rx) come since it began: an arrival for f, or a completed
 * send when it waits to send? (fab.mu held) */
static int wait_news(const struct fab_conn *f, int rx, const struct call_wait *w)
{
	return atomic_load(&f->gen) != w->gen || (rx == WAIT_TX && fab.tx_done != w->tx_done);
}

static int fab_wait(struct fab_conn *f, int fd, int rx, uint64_t deadline, struct call_wait *w)
{
	struct pollfd p[2];
	int n = 0, ms = -1, may;

	/* The profile's spin first, reading completions, while it is the fabric we wait for
	 * (TCP bytes before a switch come only by the kernel's readiness). */
	if (!w->spun && (rx == WAIT_TX || rx_on_fabric(f))) {
		w->spun = 1;
		uls_spin_start(&w->spin);
		while (uls_spin_more(&w->spin)) {
			pthread_mutex_lock(&fab.mu);
			fab_progress_at(w->spin.last);
			int moved = wait_news(f, rx, w);
			pthread_mutex_unlock(&fab.mu);
			if (moved) {
				w->slice = 0;
				return 0;
			}
		}
	}
	/* The handshake goes on during a call's waits too: the client's directory exchange
	 * and its deadlines advance only in fab_step, and a recv waiting for the peer's
	 * answer on TCP would otherwise hold them back until it returns. So does a move
	 * back the peer asked for: what it had not read goes again on TCP now (peer_left),
	 * not at this side's next send, which a recv waiting for the answer never makes. */
	if ((fab_handshaking(f) || f->peer_rev) && uls_fd_conn(f->fd) == f->c)
		fab_step(f, f->fd);
	/* The liveness clock runs whatever the provider says below: a provider that never
	 * lets the call sleep (sends it cannot flush to a host that is gone) must not keep
	 * the keepalive off, or the call would spin for ever. */
	uint64_t now = uls_now_ns();
	if (!w->since) {
		w->since = now;
	} else if (!w->ka && now - w->since >= LIVENESS_NS) {
		liveness_on(fd, &w->saved);
		w->ka = 1;
	}
	pthread_mutex_lock(&fab.mu);
	fab_progress();
	int open = fab.state > 0 && fab.pid == uls_pid();
	int nowake = open && fab.ep.wait_fd < 0; /* no wait descriptor: sleeps in slices */
	may = open && fab_trywait(); /* 0 where nowake, after its repost all the same */
	/* Without a wait descriptor, the peer's wake-up byte ends the sleep (9.7): a
	 * receive waits for data, a send for window or a send slot (which the provider may
	 * free only once the peer took the message); completions are read once more after
	 * the SLEEP. */
	uint32_t want = rx == WAIT_RX ? (rx_on_fabric(f) ? ULS_FAB_WANT_DATA : 0)
		      : rx == WAIT_TX && f->tx_sw ? ULS_FAB_WANT_SPACE
						  : 0;
	int asked = 0;
	if (nowake && !wait_news(f, rx, w) && (asked = sleep_ask(f, want)))
		fab_progress();
	/* Progress here, in the trywait or after the SLEEP may have brought what the caller
	 * waits for. */
	if (wait_news(f, rx, w)) {
		pthread_mutex_unlock(&fab.mu);
		w->slice = 0;
		return 0;
	}
	if (may)
		p[n++] = (struct pollfd){.fd = fab.ep.wait_fd, .events = POLLIN};
	int tcp_events = (rx == WAIT_RX && !rx_on_fabric(f)) || asked ? POLLIN | POLLRDHUP
								     : POLLRDHUP;
	if (rx == WAIT_TX_TCP)
		tcp_events = POLLOUT;
	if (!f->tcp_end || rx == WAIT_TX_TCP)
		p[n++] = (struct pollfd){.fd = fd, .events = (short)tcp_events};
	pthread_mutex_unlock(&fab.mu);
	/* Completions to read: the caller looks again, at once a few times, then after
	 * 1 ms naps (the provider may refuse the sleep for work of its own it cannot do). */
	if (!may && !nowake && open && ++w->busy < 64)
		return 0;
	if (may)
		w->busy = 0;
	/* A handshake in flight cannot wake anyone (it is looked at more rarely as it ages);
	 * another thread may read our completion. */
	if (!may || !ULS_SINGLE_THREADED() || f->tcp_end)
		ms = 1;
	else if (fab_handshaking(f))
		ms = (int)fab_hs_nap_ms(f, now);
	/* Without a wait descriptor nothing on the fabric wakes a sleeper (protocol.md 9.13):
	 * it looks again after 1, 2, 4 .. 64 ms, from 1 again after news. */
	if (nowake) {
		w->slice = (int)fab_next_slice((uint32_t)w->slice);
		ms = w->slice;
	}
	if (deadline) {
		if (now >= deadline)
			return -EAGAIN;
		int left = (int)((deadline - now + 999999) / 1000000);
		ms = ms < 0 || left < ms ? left : ms;
	}
	if (!w->ka && (ms < 0 || ms > 1000))
		ms = 1000; /* to look at the clock for the liveness check */
	int r = uls_libc.poll(p, (nfds_t)n, ms);
	if (r < 0)
		return errno == EINTR ? -EINTR : 0;
	if (!f->tcp_end && n && rx != WAIT_TX_TCP &&
	    (p[n - 1].revents & (POLLRDHUP | POLLHUP | POLLERR | (asked ? POLLIN : 0))) &&
	    (rx == WAIT_TX || rx_on_fabric(f)))
		note_tcp(f, fd);
	if (asked && (p[n - 1].revents & POLLIN))
		w->slice = 0; /* a wake-up: the slices start again from 1 ms */
	return 0;
}

/* ------------------------------------------------------------------ receive */

/* Up to n bytes of the receive buffer from fabric position pos into msg at skip, as many
 * as 64 of its pieces take: the count (fab.mu held). */
static size_t ring_out(struct fab_conn *f, struct msghdr *msg, size_t skip, size_t n,
		       uint64_t pos, int flags)
{
	struct iovec tmp[64];
	int k = iov_window(msg->msg_iov, msg->msg_iovlen, skip, n, tmp);
	uint64_t from = pos;

	for (int i = 0; i < k; i++) {
		for (size_t o = 0; o < tmp[i].iov_len;) {
			uint32_t at = (uint32_t)(pos & (f->rx_window - 1));
			size_t run = f->rx_window - at;
			if (run > tmp[i].iov_len - o)
				run = tmp[i].iov_len - o;
			if (!(flags & MSG_TRUNC))
				memcpy((char *)tmp[i].iov_base + o, f->rxbuf + at, run);
			o += run;
			pos += run;
		}
	}
	return (size_t)(pos - from);
}

/*
 * Bytes of the stream into msg from done on (fab.mu held): from the receive buffer, and
 * the peer's offers read straight into the program's buffer (9.6). A peek leaves the
 * bytes where they are and a discard has no buffer to read into: the offers are copied
 * into the receive buffer first.
 */
static size_t copy_out(struct fab_conn *f, struct msghdr *msg, size_t done, size_t total,
		       int flags)
{
	size_t want = total - done, copied = 0;
	uint64_t pos = f->rx_out;

	if (f->off_n && (flags & (MSG_PEEK | MSG_TRUNC)))
		fab_offer_pull_all(f);
	while (copied < want && pos < f->rx_in && !f->err) {
		if (fab_offer_at(f, pos)) {
			struct iovec tmp[1] = {{NULL, 0}};
			iov_window(msg->msg_iov, msg->msg_iovlen, done + copied, want - copied, tmp);
			if (fab_offer_into(f, tmp[0].iov_base, tmp[0].iov_len) < 0)
				break;
			copied += (size_t)(f->rx_out - pos); /* 0 when it went to the buffer */
			pos = f->rx_out;
			continue;
		}
		uint64_t end = fab_offer_next(f);
		size_t n = end - pos < want - copied ? (size_t)(end - pos) : want - copied;
		size_t got = ring_out(f, msg, done + copied, n, pos, flags);
		copied += got;
		pos += got;
		if (!(flags & MSG_PEEK))
			f->rx_out = pos;
		if (got < n)
			break; /* the program's pieces beyond 64: the next pass */
	}
	/* Half the window owed: returned at once (9.6). Where both write, half of what DATA
	 * may keep unreturned, which the sender's last short piece may wait for (9.14). */
	uint32_t half = (f->writes ? FAB_DATA_WINDOW : f->rx_window) / 2;
	/* ...and at once when a lend was consumed: its send waits (9.6, LEND). */
	if (!(flags & MSG_PEEK) &&
	    (f->rx_out - f->rx_ret >= half || (f->lend_due > f->rx_ret && f->rx_out >= f->lend_due)))
		fab_send_credit(f);
	return copied;
}

/*
 * The fabric part of a receive, one pass (fab.mu held): bytes copied (> 0), 0 at the end
 * of the stream, -EAGAIN for nothing yet, or -errno.
 */
static ssize_t fabric_pass(struct fab_conn *f, struct msghdr *msg, size_t done, size_t total,
			   int flags)
{
	/* Bytes already here go without another read of the queue (TCP's recv too returns
	 * what it holds, not what is on its way). Not while offers are pending (9.6): an
	 * offer read from the sender's memory before what the queue holds about it (a move
	 * back under way) failed and reset the connection (test_move_back_with_offers[async],
	 * 3 runs in 8). */
	if (f->rx_in == f->rx_out || f->off_n)
		fab_progress();
	if (f->rx_in > f->rx_out) {
		size_t n = copy_out(f, msg, done, total, flags);
		if (n || !f->err) /* nothing: an offer could not be read */
			return (ssize_t)n;
	}
	if (f->fin)
		return 0;
	if (f->err)
		return -f->err;
	if (f->tcp_end) {
		/* The peer's socket ended without a FIN on the fabric: wait a little for one
		 * the kernel's overtook, then it died (9.8). */
		uint64_t now = uls_now_ns();
		if (!f->end_deadline)
			f->end_deadline = now + END_DRAIN_NS;
		if (now >= f->end_deadline) {
			uls_dbg("fabric: no FIN %llu ms after TCP ended, %llu fabric bytes received: "
				"the peer died", (unsigned long long)(END_DRAIN_NS / 1000000),
				(unsigned long long)f->rx_in);
			f->err = ECONNRESET;
			return -ECONNRESET;
		}
	}
	return -EAGAIN;
}

/* TCP's end (or an error) has come on fd, after whatever is still queued before it;
 * waits up to ms for news. */
static int tcp_ended(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};

	return uls_libc.poll(&p, 1, ms) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* The TCP part: what is before the peer's switch position; as the kernel's recv. */
static ssize_t tcp_pass(struct uls_conn *c, struct fab_conn *f, int fd, struct msghdr *msg,
			size_t done, size_t total, int flags)
{
	size_t limit = total - done;
	struct iovec tmp[64];

	if (f->peer_rev && f->peer_sw && f->peer_sw_pos != UINT64_MAX &&
	    __atomic_load_n(&f->rx_tcp, __ATOMIC_RELAXED) >= f->peer_sw_pos) {
		pthread_mutex_lock(&fab.mu);
		int clear = fab_wakes_skipped(f, uls_conn_fd(c, fd));
		pthread_mutex_unlock(&fab.mu);
		if (!clear) {
			/* The peer's data follows wake-up bytes still on their way. */
			if (!tcp_ended(uls_conn_fd(c, fd), 0))
				return -EAGAIN;
			/* TCP ended before the wake-ups the peer's REVERT counted: a peer that
			 * lied, its connection reset (no wait on a readable end for ever). What
			 * came before the end is read first. */
			pthread_mutex_lock(&fab.mu);
			clear = fab_wakes_skipped(f, uls_conn_fd(c, fd));
			if (!clear)
				fab_violation(f, "revert: wake-ups missing at the end of TCP");
			pthread_mutex_unlock(&fab.mu);
			if (!clear)
				return -ECONNRESET;
		}
	}
	/* Until the peer's SWITCH is here nothing bounds the read, and nothing needs to:
	 * past its switch position the peer's TCP carries bytes only after this side asked
	 * for them, by a SLEEP (which waits for the SWITCH) or by answering its REVERT (its
	 * data then), and any thread's progress may answer. So a read without the bound is
	 * made under fab.mu, which the answer needs: a REVERT taken between the look at
	 * peer_sw and the read would let it take the peer's later data as the bytes before
	 * its switch. */
	int blind = !f->peer_sw;
	if (blind)
		pthread_mutex_lock(&fab.mu);
	/* The bytes before the switch end here even when the peer has left since (its REVERT
	 * came): its fabric bytes come next, and its TCP data only after them. */
	if (f->peer_sw && f->rx_tcp < f->peer_sw_pos && f->peer_sw_pos - f->rx_tcp < limit)
		limit = (size_t)(f->peer_sw_pos - f->rx_tcp);
	struct msghdr m = *msg;
	m.msg_iov = tmp;
	m.msg_iovlen = (size_t)iov_window(msg->msg_iov, msg->msg_iovlen, done, limit, tmp);
	ssize_t n = uls_libc.recvmsg(uls_conn_fd(c, fd), &m, (flags & ~MSG_WAITALL) | MSG_DONTWAIT);
	int err = errno;
	if (n > 0 && !(flags & MSG_PEEK))
		__atomic_store_n(&f->rx_tcp, f->rx_tcp + (uint64_t)n, __ATOMIC_RELAXED);
	if (blind)
		pthread_mutex_unlock(&fab.mu);
	if (n < 0)
		return -err;
	msg->msg_flags = m.msg_flags;
	return n;
}

/* TCP ended before the peer's switch was seen: a SWITCH may still be on its way. */
static int switch_may_come(struct fab_conn *f)
{
	return f->hs == HS_DONE || f->hs == HS_SRV_ACCEPTED || f->hs == HS_CLI_ACCEPTED;
}

static ssize_t recv_waits(struct uls_conn *c, struct fab_conn *f, int fd, struct msghdr *msg,
			  int flags, struct call_wait *w);

static ssize_t recv_locked(struct uls_conn *c, struct fab_conn *f, int fd, struct msghdr *msg,
			   int flags)
{
	struct call_wait w = {0};
	ssize_t n = recv_waits(c, f, fd, msg, flags, &w);

	call_wait_end(&w, uls_conn_fd(c, fd));
	return n;
}

static ssize_t recv_waits(struct uls_conn *c, struct fab_conn *f, int fd, struct msghdr *msg,
			  int flags, struct call_wait *w)
{
	size_t total = iov_total(msg->msg_iov, msg->msg_iovlen), done = 0;
	/* A blocking receive returns once it has SO_RCVLOWAT bytes, as the kernel's does. */
	int lowat = atomic_load_explicit(&c->rcvlowat, memory_order_relaxed);
	size_t target = (flags & MSG_WAITALL) && !(flags & MSG_PEEK) ? total
			: lowat > 1 && (size_t)lowat < total	       ? (size_t)lowat
			: lowat > 1				       ? total
								       : 1;
	int nonblock = (flags & MSG_DONTWAIT) || atomic_load(&c->nonblock);
	uint64_t deadline = deadline_of(c->rcvtimeo_ns), tcp_end_at = 0;
	ssize_t n;

	if (total == 0)
		return 0;
	for (;;) {
		if (!rx_on_fabric(f)) {
			n = tcp_pass(c, f, fd, msg, done, total, flags);
			if (n > 0) {
				done += (size_t)n;
				if (done >= target || (flags & MSG_PEEK))
					break;
				continue;
			}
			if (n == 0) {
				/* The end of TCP: final unless a SWITCH at this position comes. */
				pthread_mutex_lock(&fab.mu);
				fab_progress();
				w->gen = atomic_load(&f->gen);
				int wait = !f->peer_sw && switch_may_come(f) && !f->err;
				/* Cut short: TCP ended before the peer's switch position. After the
				 * peer moved back and its fabric stream was read, TCP's end is the
				 * end (an exec's close of a connection it moved back first). */
				int bad = f->peer_sw && f->peer_sw_pos != UINT64_MAX &&
					  __atomic_load_n(&f->rx_tcp, __ATOMIC_RELAXED) < f->peer_sw_pos;
				pthread_mutex_unlock(&fab.mu);
				if (rx_on_fabric(f))
					continue;
				if (bad)
					return done ? (ssize_t)done : -ECONNRESET;
				if (wait) {
					uint64_t now = uls_now_ns();
					if (!tcp_end_at)
						tcp_end_at = now + END_DRAIN_NS;
					if (now < tcp_end_at) {
						fab_wait(f, fd, WAIT_TX, tcp_end_at, w);
						continue;
					}
				}
				break;
			}
			if (n != -EAGAIN)
				return done ? (ssize_t)done : n;
			pthread_mutex_lock(&fab.mu);
			fab_progress();
			w->gen = atomic_load(&f->gen);
			pthread_mutex_unlock(&fab.mu);
			if (rx_on_fabric(f))
				continue;
		} else {
			pthread_mutex_lock(&fab.mu);
			n = fabric_pass(f, msg, done, total, flags);
			w->gen = atomic_load(&f->gen);
			pthread_mutex_unlock(&fab.mu);
			if (n > 0) {
				done += (size_t)n;
				if (done >= target || (flags & MSG_PEEK))
					break;
				continue;
			}
			if (n == 0)
				break;
			if (n != -EAGAIN) {
				if (done)
					break;
				/* A reset is reported once, then the stream reads as ended. */
				if (n == -ECONNRESET && atomic_exchange(&c->reset_seen, 1))
					return 0;
				return n;
			}
			/* After SHUT_RD a read that finds nothing returns 0 at once, as Linux's. */
			if (atomic_load(&c->shut_rd))
				return (ssize_t)done;
		}
		if (done && !(flags & MSG_WAITALL) && done >= target)
			break;
		if (nonblock)
			return done ? (ssize_t)done : -EAGAIN;
		if (!done && atomic_load(&f->movers))
			return FAB_YIELD;
		int r = fab_wait(f, fd, WAIT_RX, deadline, w);
		if (r < 0)
			return done ? (ssize_t)done : r;
	}
	return (ssize_t)done;
}

/* A call let go of the connection's locks for a thread that moves it back (a fork or an
 * exec elsewhere, revert_all): it goes on once that is done, on TCP if it moved. */
static void movers_wait(struct fab_conn *f)
{
	while (atomic_load(&f->movers))
		uls_libc.poll(NULL, 0, 1);
}

static ssize_t recv_once(struct uls_conn *c, struct fab_conn *f, int fd, struct msghdr *msg,
			 int flags);

static ssize_t fab_recv(struct uls_conn *c, int fd, struct msghdr *msg, int flags)
{
	struct fab_conn *f = fab_of(c);
	ssize_t n;

	while ((n = recv_once(c, f, fd, msg, flags)) == FAB_YIELD)
		movers_wait(f);
	return n;
}

static ssize_t recv_once(struct uls_conn *c, struct fab_conn *f, int fd, struct msghdr *msg,
			 int flags)
{
	fab_step(f, fd);
	if (on_tcp(c) || (flags & MSG_ERRQUEUE))
		return uls_kernel_transport.recv(c, fd, msg, flags);
	if (flags & MSG_OOB) /* urgent data never travels on the fabric */
		return rx_on_fabric(f) ? -EINVAL : uls_kernel_transport.recv(c, fd, msg, flags);
	if (f->orphan && (f->peer_sw || f->hs == HS_DONE))
		return -ECONNRESET;
	pthread_mutex_lock(&f->rx_mu);
	ssize_t n = recv_locked(c, f, fd, msg, flags);
	pthread_mutex_unlock(&f->rx_mu);
	if (n > 0 && !(flags & MSG_PEEK))
		stat_add(c->stat ? &c->stat->rx_bytes : NULL, (size_t)n);
	/* The call's waits may have brought the handshake's last message: it ends now, not
	 * at the program's next call, which may never come (it exits). */
	if (__builtin_expect(!f->announced, 0))
		fab_step(f, fd);
	return n;
}

/* ------------------------------------------------------------------ send */

/*
 * After the peer left (9.10): the bytes of this side's fabric stream it had not read go
 * again, on TCP, before any new one (tx_mu held). 0 when all went, or -errno (-EAGAIN: a
 * non-blocking socket's buffer is full; the next send goes on).
 */
ssize_t fab_resend(struct fab_conn *f, int fd, int nonblock)
{
	uint64_t end = f->tx_sw_pos + f->tx_fab;

	while (f->resend_pending && f->resend_from < end) {
		size_t at = (size_t)((f->resend_from - f->tx_sw_pos) % f->peer_window);
		size_t n = f->peer_window - at;
		if (n > end - f->resend_from)
			n = (size_t)(end - f->resend_from);
		ssize_t r = uls_libc.send(fd, f->txbuf + at, n, MSG_NOSIGNAL | (nonblock ? MSG_DONTWAIT : 0));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		f->resend_from += (uint64_t)r;
	}
	f->resend_pending = 0;
	fab_fin_to_tcp(f, fd);
	return 0;
}

/*
 * After a move back (9.10): a FIN this side sent on the fabric ends its TCP stream too,
 * after every byte that goes again there, or the peer, now reading TCP, would never see
 * its end (tx_mu held, or both locks of a side that leaves).
 */
void fab_fin_to_tcp(struct fab_conn *f, int fd)
{
	if (f->fin_sent && !f->fin_tcp && uls_libc.shutdown(fd, SHUT_WR) == 0)
		f->fin_tcp = 1;
}

static ssize_t send_epipe(int flags)
{
	if (!(flags & MSG_NOSIGNAL))
		raise(SIGPIPE);
	return -EPIPE;
}

/* Fabric sends from the switch on (tx_mu held). */
static ssize_t send_waits(struct uls_conn *c, struct fab_conn *f, int fd,
			  const struct iovec *iov, int iovcnt, int flags, struct call_wait *w);

static ssize_t send_fabric(struct uls_conn *c, struct fab_conn *f, int fd,
			   const struct iovec *iov, int iovcnt, int flags)
{
	struct call_wait w = {0};
	ssize_t n = send_waits(c, f, fd, iov, iovcnt, flags, &w);

	call_wait_end(&w, uls_conn_fd(c, fd));
	return n;
}

/*
 * May a blocking send put out its next piece (fab.mu held)? Only where the window has
 * room for the rest of the message, or for one piece (uls_send_piece, core/transport.h:
 * a send that waits between two pieces lets another thread's message in). Where both
 * write, a piece short of FAB_OFFER_MIN goes as DATA, within FAB_DATA_WINDOW. Each
 * window reopens by half at a time (copy_out), so the room always comes.
 */
static int send_fits(const struct fab_conn *f, size_t rest)
{
	size_t out = (size_t)(f->tx_fab - f->tx_ret);
	size_t piece = (size_t)uls_send_piece(f->peer_window);
	size_t want = rest < piece ? rest : piece;

	if (out > f->peer_window || f->peer_window - out < want)
		return 0;
	if (f->writes && want < FAB_OFFER_MIN)
		return out <= FAB_DATA_WINDOW && FAB_DATA_WINDOW - out >= want;
	return 1;
}

static ssize_t send_waits(struct uls_conn *c, struct fab_conn *f, int fd,
			  const struct iovec *iov, int iovcnt, int flags, struct call_wait *w)
{
	size_t total = iov_total(iov, (size_t)iovcnt), sent = 0;
	int nonblock = (flags & MSG_DONTWAIT) || atomic_load(&c->nonblock);
	uint64_t deadline = deadline_of(c->sndtimeo_ns);

	for (int first = 1;; first = 0) {
		/* A shutdown in another thread ends a send that waits, as the kernel's does;
		 * what it posted already goes before the FIN. */
		if (atomic_load(&c->shut_wr))
			return sent ? (ssize_t)sent : send_epipe(flags);
		pthread_mutex_lock(&fab.mu);
		if (first)
			fab_progress_fresh();
		else
			fab_progress();
		if (f->tx_stop) { /* the peer moved the connection back meanwhile (9.10) */
			pthread_mutex_unlock(&fab.mu);
			return sent ? (ssize_t)sent : FAB_MOVED;
		}
		if (f->err) {
			int e = f->err;
			pthread_mutex_unlock(&fab.mu);
			if (sent)
				break;
			if (e == ECONNRESET && !atomic_exchange(&c->reset_seen, 1))
				return -ECONNRESET;
			return send_epipe(flags);
		}
		if (f->peer_closed || f->tcp_end) {
			/* Nobody reads the fabric any more: the kernel's TCP answers as it would
			 * (it takes this send, and the peer's reset fails a later one). */
			pthread_mutex_unlock(&fab.mu);
			if (sent)
				break;
			return uls_kernel_transport.send(c, fd, iov, iovcnt, flags);
		}
		while (sent < total && (nonblock || send_fits(f, total - sent))) {
			size_t room = f->peer_window - (size_t)(f->tx_fab - f->tx_ret);
			size_t n = total - sent < room ? total - sent : room;
			/* Long: offered for the peer to read (9.6, AVAIL), or written into its
			 * ring (9.14, WROTE); -ENOTSUP: neither this time, DATA. */
			ssize_t (*lng)(struct fab_conn *, const struct iovec *, int, size_t, size_t) =
			    f->reads && !f->no_offers ? fab_offer_send
			    : f->writes		      ? fab_write_send
						      : NULL;
			if (lng && n >= FAB_OFFER_MIN) {
				/* Where the profile spins, the program's own memory is lent for
				 * about a copy's time (9.6, LEND): one copy, the peer's. */
				ssize_t r = lng == fab_offer_send && uls_cfg.spin_ns
						? fab_lend_send(f, iov, iovcnt, sent, n)
						: -ENOTSUP;
				if (r == -ENOTSUP)
					r = lng(f, iov, iovcnt, sent, n);
				if (r > 0) {
					sent += (size_t)r;
					continue;
				}
				if (r != -ENOTSUP)
					break;
			}
			/* DATA where both write keeps within FAB_DATA_WINDOW unreturned. */
			size_t out = (size_t)(f->tx_fab - f->tx_ret);
			if (f->writes && out >= FAB_DATA_WINDOW)
				break;
			if (f->writes && n > FAB_DATA_WINDOW - out)
				n = FAB_DATA_WINDOW - out;
			size_t slot = fab_tx_room(f);
			n = n < slot ? n : slot;
			if (n == 0 || fab_send_data(f, iov, iovcnt, sent, n) < 0)
				break;
			sent += n;
		}
		if (sent < total)
			atomic_fetch_add(&f->tx_short, 1);
		w->gen = atomic_load(&f->gen);
		w->tx_done = fab.tx_done;
		pthread_mutex_unlock(&fab.mu);
		if (sent == total || (sent && nonblock))
			break;
		if (nonblock)
			return -EAGAIN;
		if (!sent && atomic_load(&f->movers))
			return FAB_YIELD;
		int r = fab_wait(f, fd, WAIT_TX, deadline, w);
		if (r < 0) {
			if (sent)
				break;
			return r;
		}
	}
	if (sent > ULS_FAB_SMALL_SLOT - FAB_HDR && fab.txb.nslots) {
		/* Bulk messages leave in progress calls (fab_flush): before the program goes
		 * to wait elsewhere, where no progress runs. */
		pthread_mutex_lock(&fab.mu);
		fab_flush(FLUSH_NS);
		pthread_mutex_unlock(&fab.mu);
	}
	return (ssize_t)sent;
}

/*
 * Before this side's switch (tx_mu held): TCP, as the kernel's send, but a blocking one
 * waits here, not in the kernel, so that the handshake goes on meanwhile (a server that
 * sits in a full TCP send would leave the client's CONNECT unanswered); the switch, once
 * the handshake is done, takes the rest of the bytes to the fabric.
 */
static ssize_t send_tcp(struct uls_conn *c, struct fab_conn *f, int fd,
			const struct iovec *iov, int iovcnt, int flags)
{
	size_t total = iov_total(iov, (size_t)iovcnt), sent = 0;
	int nonblock = (flags & MSG_DONTWAIT) || atomic_load(&c->nonblock);
	uint64_t deadline = deadline_of(c->sndtimeo_ns);
	struct call_wait w = {0};
	struct iovec tmp[64];
	ssize_t r;

	for (;;) {
		w.gen = atomic_load(&f->gen);
		struct msghdr m = {.msg_iov = tmp,
				   .msg_iovlen = (size_t)iov_window(iov, (size_t)iovcnt, sent,
								    total - sent, tmp)};
		r = uls_libc.sendmsg(uls_conn_fd(c, fd), &m, flags | MSG_DONTWAIT);
		if (r > 0) {
			f->tx_tcp += (uint64_t)r;
			sent += (size_t)r;
			if (sent >= total)
				break;
			continue;
		}
		r = r < 0 ? -errno : 0;
		if (r == -EAGAIN)
			atomic_fetch_add(&f->tx_short, 1);
		if (r != -EAGAIN || nonblock || total == 0)
			break;
		if (atomic_load(&c->shut_wr)) { /* as in send_waits */
			if (!sent)
				r = send_epipe(flags);
			break;
		}
		fab_step(f, fd);
		fab_maybe_switch(f);
		if (f->tx_sw) {
			r = send_fabric(c, f, fd, tmp, (int)m.msg_iovlen, flags & ~MSG_DONTWAIT);
			if (r > 0)
				sent += (size_t)r;
			break;
		}
		if (!sent && atomic_load(&f->movers)) {
			r = FAB_YIELD;
			break;
		}
		if ((r = fab_wait(f, fd, WAIT_TX_TCP, deadline, &w)) < 0)
			break;
	}
	call_wait_end(&w, uls_conn_fd(c, fd));
	return sent ? (ssize_t)sent : r;
}

static ssize_t tx_once(struct uls_conn *c, struct fab_conn *f, int fd, const struct iovec *iov,
		       int iovcnt, int flags);

static ssize_t fab_tx(struct uls_conn *c, int fd, const struct iovec *iov, int iovcnt,
		      int flags)
{
	struct fab_conn *f = fab_of(c);
	ssize_t n;

	while ((n = tx_once(c, f, fd, iov, iovcnt, flags)) == FAB_YIELD)
		movers_wait(f);
	return n;
}

static ssize_t tx_once(struct uls_conn *c, struct fab_conn *f, int fd, const struct iovec *iov,
		       int iovcnt, int flags)
{
	ssize_t n;

	fab_step(f, fd);
	if (on_tcp(c))
		return uls_kernel_transport.send(c, fd, iov, iovcnt, flags);
	if (f->orphan && (f->tx_sw || f->hs == HS_DONE))
		return send_epipe(flags);
	pthread_mutex_lock(&f->tx_mu);
	if (flags & MSG_OOB)
		f->tx_never = !f->tx_sw; /* urgent data keeps the direction on TCP */
	fab_maybe_switch(f);
	if (f->tx_stop) {
		/* Moved back (9.10): what a leaving peer had not read goes first. */
		n = fab_resend(f, uls_conn_fd(c, fd), (flags & MSG_DONTWAIT) || atomic_load(&c->nonblock));
		if (n == 0)
			n = uls_kernel_transport.send(c, fd, iov, iovcnt, flags);
	} else if (!f->tx_sw) {
		n = send_tcp(c, f, fd, iov, iovcnt, flags);
	} else if (flags & MSG_OOB) {
		n = -EOPNOTSUPP;
	} else {
		n = send_fabric(c, f, fd, iov, iovcnt, flags);
		if (n == FAB_MOVED) {
			n = fab_resend(f, uls_conn_fd(c, fd),
				       (flags & MSG_DONTWAIT) || atomic_load(&c->nonblock));
			if (n == 0)
				n = uls_kernel_transport.send(c, fd, iov, iovcnt, flags);
		}
	}
	pthread_mutex_unlock(&f->tx_mu);
	if (n > 0)
		stat_add(c->stat ? &c->stat->tx_bytes : NULL, (size_t)n);
	if (__builtin_expect(!f->announced, 0)) /* as at the end of fab_recv */
		fab_step(f, fd);
	return n;
}

static int fab_shutdown(struct uls_conn *c, int fd, int how)
{
	struct fab_conn *f = fab_of(c);
	int r = 0;

	fab_step(f, fd);
	if (on_tcp(c))
		return uls_kernel_transport.shutdown(c, fd, how);
	if (how == SHUT_RD || how == SHUT_RDWR) {
		r = uls_kernel_transport.shutdown(c, fd, SHUT_RD);
		/* Reads go on with what the fabric holds and brings, never waiting (recv_waits). */
		if (r == 0)
			atomic_store(&c->shut_rd, 1);
	}
	if (r < 0 || how == SHUT_RD)
		return r;
	/* From here a send fails with EPIPE, as after the kernel's shutdown, and one that
	 * waits in another thread (holding tx_mu) sees it at its next look: its waits are
	 * 1 ms naps in a process with threads. No switch comes after it either. */
	atomic_store(&c->shut_wr, 1);
	pthread_mutex_lock(&f->tx_mu);
	if (f->tx_sw) {
		pthread_mutex_lock(&fab.mu);
		if (!f->fin_sent && !f->err && fab_send_fin(f, f->tx_sw_pos + f->tx_fab, 0) == 0)
			f->fin_sent = 1;
		pthread_mutex_unlock(&fab.mu);
	} else {
		/* Before its switch: a real shutdown, and the direction stays on TCP. */
		f->tx_never = 1;
		r = uls_kernel_transport.shutdown(c, fd, SHUT_WR);
	}
	pthread_mutex_unlock(&f->tx_mu);
	return r;
}

/* ------------------------------------------------------------------ readiness */

static int fab_kernel_parts(struct uls_conn *c)
{
	struct fab_conn *f = fab_of(c);
	int parts = 0;

	if (on_tcp(c))
		return ULS_KERNEL_RX | ULS_KERNEL_TX;
	if (!rx_on_fabric(f))
		parts |= ULS_KERNEL_RX;
	if (!f->tx_sw || f->tx_stop)
		parts |= ULS_KERNEL_TX;
	return parts;
}

/*
 * Bytes on the fabric that make the connection readable: SO_RCVLOWAT, but no more than
 * a blocking sender fills the window to (all but one piece, send_fits; within
 * FAB_DATA_WINDOW where both write and its short messages go as DATA). The kernel grows
 * its receive buffer to the mark; the window cannot grow. (fab.mu held)
 */
static uint64_t rx_mark(struct uls_conn *c, const struct fab_conn *f)
{
	int lowat = atomic_load_explicit(&c->rcvlowat, memory_order_relaxed);
	uint64_t window = f->writes && f->rx_window > FAB_DATA_WINDOW ? FAB_DATA_WINDOW
								      : f->rx_window;
	uint64_t full = window - uls_send_piece(window);

	if (lowat <= 1)
		return 1;
	return (uint64_t)lowat < full ? (uint64_t)lowat : full;
}

static int fab_ready(struct uls_conn *c, int events)
{
	struct fab_conn *f = fab_of(c);
	int r = 0;

	if (on_tcp(c))
		return 0;
	/* The handshake goes on here too, with the descriptor it was set up on while that
	 * still names this connection (a dup then close leaves another file at the number:
	 * a resend or an option must not go there). */
	if (uls_fd_conn(f->fd) == c)
		fab_step(f, f->fd);
	if (on_tcp(c))
		return 0;
	pthread_mutex_lock(&fab.mu);
	fab_progress();
	if (rx_on_fabric(f)) {
		if (f->rx_in - f->rx_out >= rx_mark(c, f) || f->fin || f->err || f->tcp_end)
			r |= POLLIN;
		if (f->fin || f->tcp_end)
			r |= POLLRDHUP;
		if (atomic_load(&c->shut_rd)) /* as the kernel says after SHUT_RD */
			r |= POLLIN | POLLRDHUP;
	}
	if (f->tx_sw && !f->tx_stop && (f->err || f->peer_closed || f->tcp_end ||
			 atomic_load(&c->shut_wr) || /* a send fails at once, as on TCP */
			 (f->peer_window > f->tx_fab - f->tx_ret && fab_tx_room(f))))
		r |= POLLOUT;
	if (f->err)
		r |= POLLIN | POLLOUT | POLLERR | POLLHUP;
	/* Both directions ended (the peer's FIN read here, this side's sent), as the kernel
	 * says of a socket shut both ways. */
	if (f->fin && f->fin_sent)
		r |= POLLHUP;
	pthread_mutex_unlock(&fab.mu);
	return r & (events | POLLERR | POLLHUP);
}

/* Before a sleep: no completion left unread, so the wait descriptor will report the next
 * (the sleeper's set holds it: transport.h, wait_fd). */
static void fab_arm(struct uls_conn *c, int events, int bell)
{
	struct fab_conn *f = fab_of(c);

	if (on_tcp(c))
		return;
	pthread_mutex_lock(&fab.mu);
	if (fab.state > 0 && fab.pid == uls_pid()) {
		if (fab.ep.wait_fd >= 0) {
			fab_trywait();
		} else {
			/* No wait descriptor: the peer's wake-up byte makes the socket readable. */
			fab_progress();
			fab_repost();
			uint32_t want = 0;
			if ((events & POLLIN) && rx_on_fabric(f) && f->rx_in == f->rx_out)
				want |= ULS_FAB_WANT_DATA;
			if ((events & POLLOUT) && f->tx_sw &&
			    (f->peer_window <= f->tx_fab - f->tx_ret || !fab_tx_room(f)))
				want |= ULS_FAB_WANT_SPACE;
			sleep_ask(f, want);
		}
	}
	pthread_mutex_unlock(&fab.mu);
}

static void fab_drain(struct uls_conn *c, int fd)
{
	if (!on_tcp(c))
		note_tcp(fab_of(c), uls_conn_fd(c, fd));
}

static int fab_sleep_recv(struct uls_conn *c, int fd)
{
	(void)c;
	(void)fd;
	return 0;
}

static uint64_t fab_gen(struct uls_conn *c, int events)
{
	struct fab_conn *f = fab_of(c);
	uint64_t g = 0;

	if (on_tcp(c))
		return 0;
	if (events & POLLIN)
		g += atomic_load(&f->gen);
	/* Like TCP, a writable edge follows only a send that found no room: an arrival, or
	 * a completion of this side's own control message, is none. (An error or hang-up
	 * changes the events reported, which is an edge of its own.) */
	if (events & POLLOUT)
		g += atomic_load(&f->tx_short) << 40;
	return g;
}

static int fab_inq(struct uls_conn *c, int fd, int *out)
{
	struct fab_conn *f = fab_of(c);

	if (on_tcp(c) || !rx_on_fabric(f)) {
		int r = uls_kernel_transport.inq(c, fd, out);
		if (r == 0 && !on_tcp(c) && f->peer_sw && (uint64_t)*out > f->peer_sw_pos - f->rx_tcp)
			*out = (int)(f->peer_sw_pos - f->rx_tcp);
		return r;
	}
	pthread_mutex_lock(&fab.mu);
	fab_progress();
	uint64_t n = f->rx_in - f->rx_out;
	pthread_mutex_unlock(&fab.mu);
	*out = n > INT32_MAX ? INT32_MAX : (int)n;
	return 0;
}

static int fab_outq(struct uls_conn *c, int fd, int *out)
{
	struct fab_conn *f = fab_of(c);
	int r = uls_kernel_transport.outq(c, fd, out);

	if (r == 0 && !on_tcp(c) && f->tx_sw) {
		pthread_mutex_lock(&fab.mu);
		*out += (int)(f->tx_fab - f->tx_ret);
		pthread_mutex_unlock(&fab.mu);
	}
	return r;
}

static int fab_atmark(struct uls_conn *c, int fd, int *out)
{
	return uls_kernel_transport.atmark(c, fd, out);
}

/* ------------------------------------------------------------------ back to TCP */

/*
 * Moves f back to TCP in place (9.10), this side leaving: REVERT{REQUEST|LEAVING} says
 * where its fabric stream ends and how far it read the peer's; it drops what it had not
 * read (the peer sends it again on TCP) and waits for the peer's REVERT, after which both
 * directions are TCP's alone. Both locks are held: no call of this process is inside.
 */
static int revert_locked(struct uls_conn *c, struct fab_conn *f, int fd, int timeout_ms)
{
	uint64_t until = uls_now_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 2000) * 1000000u;
	int r;

	pthread_mutex_lock(&fab.mu);
	fab_progress();
	r = fab_abandon(f);
	if (r == 0) {
		pthread_mutex_unlock(&fab.mu);
		uls_conn_set_kernel(c, fd, f->why);
		return 0;
	}
	if (f->orphan || (f->hs != HS_DONE && f->hs != HS_SRV_ACCEPTED) || f->err) {
		pthread_mutex_unlock(&fab.mu);
		return f->err ? -f->err : -EBUSY;
	}
	r = fab_send_revert(f, ULS_FAB_REVERT_REQUEST | ULS_FAB_REVERT_LEAVING);
	if (r == 0) {
		f->rev = 1;
		f->tx_stop = 1;
		f->tx_never = 1;
		f->rx_out = f->rx_in; /* dropped: the peer sends it again */
	}
	while (r == 0 && !f->rev_answered && !f->err) {
		int may = fab_trywait();
		pthread_mutex_unlock(&fab.mu);
		if (uls_now_ns() >= until) {
			pthread_mutex_lock(&fab.mu);
			r = -ETIMEDOUT;
			break;
		}
		fab_sleep_1ms(may);
		pthread_mutex_lock(&fab.mu);
		fab_progress();
	}
	if (r == 0 && f->err)
		r = -f->err;
	/* The wake-up bytes the peer sent before its answer come before its TCP data: an
	 * end or error of TCP before they all came is a reset. */
	for (int ended = 0; r == 0 && !fab_wakes_skipped(f, uls_conn_fd(c, fd));) {
		pthread_mutex_unlock(&fab.mu);
		if (ended)
			r = -ECONNRESET;
		else if (uls_now_ns() >= until)
			r = -ETIMEDOUT;
		else if (tcp_ended(uls_conn_fd(c, fd), 1))
			ended = 1; /* what came before the end is read first */
		pthread_mutex_lock(&fab.mu);
	}
	pthread_mutex_unlock(&fab.mu);
	if (r < 0)
		return r;
	/* Crossing REQUESTs: the peer left too, and gets again what it had not read. */
	if (f->resend_pending && (r = (int)fab_resend(f, uls_conn_fd(c, fd), 0)) < 0)
		return r;
	fab_fin_to_tcp(f, uls_conn_fd(c, fd));
	uls_conn_set_kernel(c, fd, "moved back to kernel TCP");
	return 0;
}

static int fab_revert(struct uls_conn *c, int fd, int timeout_ms)
{
	struct fab_conn *f = fab_of(c);
	int r;

	if (on_tcp(c))
		return 0;
	pthread_mutex_lock(&f->tx_mu);
	pthread_mutex_lock(&f->rx_mu);
	r = on_tcp(c) ? 0 : revert_locked(c, f, fd, timeout_ms);
	pthread_mutex_unlock(&f->rx_mu);
	pthread_mutex_unlock(&f->tx_mu);
	return r;
}

static int fab_tx_to_kernel(struct uls_conn *c, int fd)
{
	struct fab_conn *f = fab_of(c);
	int r = 0;

	(void)fd;
	if (on_tcp(c))
		return 0;
	pthread_mutex_lock(&f->tx_mu);
	if (f->tx_sw)
		r = -EBUSY;
	else
		f->tx_never = 1;
	pthread_mutex_unlock(&f->tx_mu);
	return r;
}

static void fab_async(struct uls_conn *c, int fd)
{
	fab_revert(c, fd, 0);
}

/* On TCP for good: late fabric messages for it are dropped from now on. */
static void fab_settled(struct uls_conn *c)
{
	struct fab_conn *f = fab_of(c);

	pthread_mutex_lock(&fab.mu);
	fab_unlist(f);
	pthread_mutex_unlock(&fab.mu);
}

/* ------------------------------------------------------------------ close */

/* Where a handshake stood when its program closed the socket: the debug log says, for
 * whoever wonders why a connection stayed on TCP (fab.mu held). */
static const char *hs_stage(const struct fab_conn *f)
{
	static const char *const dir[] = {
	    [ULS_FAB_DIRQ_IDLE] = "the directory not asked yet",
	    [ULS_FAB_DIRQ_CONNECTING] = "connecting to the directory",
	    [ULS_FAB_DIRQ_BANNER] = "waiting for the directory's banner",
	    [ULS_FAB_DIRQ_HELLO] = "sending HELLO to the directory",
	    [ULS_FAB_DIRQ_ANSWER] = "waiting for the directory's answer",
	    [ULS_FAB_DIRQ_DONE] = "the directory answered",
	    [ULS_FAB_DIRQ_FAILED] = "the directory failed",
	};

	switch (f->hs) {
	case HS_CLI_CONNECTING:
		return "the kernel's connect not completed";
	case HS_CLI_DIR:
		return (unsigned)f->dq.state < sizeof(dir) / sizeof(dir[0]) ? dir[f->dq.state]
									     : "asking the directory";
	case HS_CLI_SENT:
		return "CONNECT sent, no ACCEPT yet";
	case HS_CLI_ACCEPTED:
		return "ACCEPT taken, not switched";
	case HS_SRV_REG:
		return "registered, no CONNECT yet";
	case HS_SRV_ACCEPTED:
		return "ACCEPT sent, no SWITCH or ABORT yet";
	default:
		return "settled";
	}
}

/* The last close (9.8): FIN with CLOSE after the switch, up to 100 ms for this
 * connection's sends to complete, then nothing of it stays in the process. */
static void fab_closing(struct uls_conn *c, int fd)
{
	struct fab_conn *f = fab_of(c);

	/* One last look: a handshake that ended meanwhile says how. */
	fab_step(f, fd);
	pthread_mutex_lock(&f->tx_mu);
	pthread_mutex_lock(&fab.mu);
	if (!on_tcp(c) && f->hs != HS_DONE && f->hs != HS_FAILED)
		uls_dbg("fabric: fd=%d closed %llu ms into its handshake: %s", fd,
			fab_hs_age_ms(f, uls_now_ns()), hs_stage(f));
	if (!on_tcp(c) && !f->orphan) {
		if (f->tx_sw && !f->err) {
			/* After a FIN of shutdown: the CLOSE one still says the holder left. */
			f->close_sent = fab_send_fin(f, f->tx_sw_pos + f->tx_fab, 1) == 0;
			f->fin_sent = 1;
		} else if (!f->tx_sw && !f->peer_sw && fab_abandon(f) == 0) {
			/* It lived on TCP: its path says so, and why. */
			pthread_mutex_unlock(&fab.mu);
			pthread_mutex_unlock(&f->tx_mu);
			uls_conn_set_kernel(c, fd, "fabric: closed before the handshake ended");
			pthread_mutex_lock(&f->tx_mu);
			pthread_mutex_lock(&fab.mu);
		}
	}
	pthread_mutex_unlock(&fab.mu);
	pthread_mutex_unlock(&f->tx_mu);
	/* A server still waiting for the client's SWITCH or ABORT: it lived on TCP. */
	if (atomic_load(&c->path) == ULS_PATH_PENDING)
		uls_conn_set_kernel(c, fd, "fabric: closed before the handshake ended");
	/*
	 * Sends still in flight are the endpoint owner's to wait for: not a fork child's (a
	 * connection moved back to TCP before the fork is in no list, so not orphaned). And
	 * only while the connection is listed: completions find it by its tag (tx_done), so
	 * after its move back to TCP for good (fab_settled) its count never falls, and the
	 * close would wait its whole bound for nothing.
	 */
	for (int i = 0; i < CLOSE_WAIT_MS && !f->orphan && f->tag && fab.pid == uls_pid(); i++) {
		pthread_mutex_lock(&fab.mu);
		fab_progress();
		/* Offers wait for the peer's copy too (it takes them at the FIN: 9.6). */
		uint32_t flight = f->tx_flight + (uint32_t)fab_offers_untaken(f);
		int may = flight && fab.state > 0 && fab_trywait();
		pthread_mutex_unlock(&fab.mu);
		if (!flight)
			break;
		fab_sleep_1ms(may);
	}
	uls_fab_dirq_fini(&f->dq);
	pthread_mutex_lock(&fab.mu);
	fab_unlist(f);
	pthread_mutex_unlock(&fab.mu);
	if (f->announced && uls_cfg.log_level >= ULS_LOG_INFO)
		uls_info("fd=%d fabric: sent %llu bytes on TCP and %llu on the fabric, received %llu "
			 "on TCP and %llu on the fabric; wake-ups: %u asked, %llu received, %llu "
			 "sent; offers read: %llu bytes; lent: %llu bytes, %llu moved; written: %llu "
			 "bytes", fd,
			 (unsigned long long)f->tx_tcp, (unsigned long long)f->tx_fab,
			 (unsigned long long)f->rx_tcp, (unsigned long long)f->rx_in, f->sleeps,
			 (unsigned long long)f->rx_wake, (unsigned long long)f->wakes,
			 (unsigned long long)f->offers_read, (unsigned long long)f->lent,
			 (unsigned long long)f->moved, (unsigned long long)f->written);
}

static int fab_close(struct uls_conn *c, int fd)
{
	return uls_kernel_transport.close(c, fd);
}

static void fab_wake(struct uls_conn *c)
{
	(void)c; /* sleepers look again within a slice (fab_wait) */
}

static void fab_destroy(struct uls_conn *c)
{
	struct fab_conn *f = fab_of(c);

	if (!f)
		return;
	pthread_mutex_lock(&fab.mu);
	fab_unlist(f);
	fab_offer_release(f);
	fab_ring_release(f);
	pthread_mutex_unlock(&fab.mu);
	uls_fab_dirq_fini(&f->dq);
	pthread_mutex_destroy(&f->tx_mu);
	pthread_mutex_destroy(&f->rx_mu);
	fab_held_free(f);
	free(f->txbuf);
	free(f->rxbuf);
	free(f);
	memset(c->tp_state, 0, sizeof(f));
}

static int fab_joined(struct uls_conn *c)
{
	(void)c;
	return 0;
}

static void fab_tcp_info(struct uls_conn *c, void *info, socklen_t len)
{
	(void)c;
	(void)info;
	(void)len;
}

/* ------------------------------------------------------------------ the process */

/* In a fork child: the parent keeps the endpoint and every connection's fabric side
 * (9.9). Connections that had not switched stay on TCP here. */
static void fab_atfork_child(void)
{
	pthread_mutex_init(&fab.mu, NULL);
	/* The parent's posted sends are not this process's to push (fab_idle, fab_nap_ns). */
	atomic_store(&fab.tx_posted, 0);
	for (struct fab_conn *f = fab.conns; f; f = f->next) {
		f->orphan = 1;
		pthread_mutex_init(&f->tx_mu, NULL);
		pthread_mutex_init(&f->rx_mu, NULL);
	}
}

#define MOVER_WAIT_MS 100

/*
 * Moves a connection back for a fork or an exec. Another thread's call may hold its
 * locks: one that waits with nothing done lets go of them (FAB_YIELD) and goes on once
 * this is over, on TCP. One that does not (a send with part of its bytes out, waiting for
 * window; a MSG_WAITALL recv part full): with bounded, -EDEADLK after MOVER_WAIT_MS;
 * without, the wait goes on until it returns.
 */
static int revert_for(struct uls_conn *c, int fd, int bounded)
{
	struct fab_conn *f = fab_of(c);
	int r = -EDEADLK;

	atomic_fetch_add(&f->movers, 1);
	if (!bounded)
		r = fab_revert(c, fd, 2000);
	for (int i = 0; bounded && i <= MOVER_WAIT_MS; i++) {
		if (pthread_mutex_trylock(&f->tx_mu) == 0) {
			if (pthread_mutex_trylock(&f->rx_mu) == 0) {
				r = on_tcp(c) ? 0 : revert_locked(c, f, fd, 2000);
				pthread_mutex_unlock(&f->rx_mu);
				pthread_mutex_unlock(&f->tx_mu);
				break;
			}
			pthread_mutex_unlock(&f->tx_mu);
		}
		if (i < MOVER_WAIT_MS)
			uls_libc.poll(NULL, 0, 1);
	}
	atomic_fetch_sub(&f->movers, 1);
	return r;
}

enum revert_why { FOR_FORK, FOR_EXEC, FOR_SPAWN };

/*
 * Fabric connections among the process's descriptors move back to TCP in place, before:
 *
 * FOR_FORK: all of them, but one whose locks another thread holds for MOVER_WAIT_MS
 * (revert_for) stays the parent's (-EDEADLK).
 *
 * FOR_SPAWN (posix_spawn, this process goes on): those the child inherits, each waiting
 * for its locks.
 *
 * FOR_EXEC: those the new image inherits, each waiting for its locks as long as it
 * takes (the new program would read a raw fabric connection's TCP); and the
 * close-on-exec ones, which the exec would end with no FIN on the fabric (the endpoint
 * goes with the image): their peers would read ECONNRESET after the last byte where
 * kernel TCP gives the end of the stream (a Python server's sockets are close-on-exec).
 * Moved back, the exec's close of the kernel socket is the end, and an exec that fails
 * leaves them working, on TCP. The peer answers once it holds every fabric byte (9.10),
 * so the endpoint may go with the image. A close-on-exec one that another thread holds
 * for MOVER_WAIT_MS stays (the exec ends that thread: no wait for ever), as does a fork
 * or vfork child's copy: the exec closes only the copy, and the parent's connection
 * goes on.
 *
 * A failure is logged.
 */
static void revert_all(enum revert_why why)
{
	int max = uls_fd_max();

	for (int fd = 0; fd < max && fab.nconns; fd++) {
		struct uls_conn *c = uls_fd_conn(fd);
		if (!c || c->tp != &uls_fabric_transport || on_tcp(c))
			continue;
		int r;
		if (why == FOR_FORK) {
			r = revert_for(c, fd, 1);
			/* -EBUSY: a handshake under way, which a child's copy never completes. */
			if (r == -EBUSY)
				continue;
			if (r < 0)
				uls_warn("fork: fd=%d stays on the fabric, the parent's only: %s", fd,
					 strerror(-r));
			continue;
		}
		int fl = uls_libc.fcntl(fd, F_GETFD);
		if (fl < 0)
			continue;
		if (!(fl & FD_CLOEXEC)) {
			r = revert_for(c, fd, 0);
		} else {
			/* The kernel's pid: a vfork child has the parent's cached one. */
			if (why == FOR_SPAWN || fab_of(c)->orphan ||
			    fab.pid != (pid_t)uls_syscall(SYS_getpid))
				continue;
			r = revert_for(c, fd, 1);
			if (r == -EBUSY) /* a handshake under way: nothing on the fabric yet */
				continue;
		}
		if (r == -EDEADLK)
			uls_warn("exec: fd=%d is in another thread's call: the exec ends it on the "
				 "fabric without a FIN (its peer reads ECONNRESET after what came on "
				 "the fabric)", fd);
		else if (r < 0)
			uls_warn("%s: fd=%d could not move back to kernel TCP: %s",
				 why == FOR_SPAWN ? "posix_spawn" : "exec", fd, strerror(-r));
	}
}

/*
 * Before a fork (9.9): the child cannot use a fabric connection (the endpoint is the
 * parent's, and no TAKEOVER yet), and either process may be the one that goes on with
 * it, so every fabric connection moves back to TCP in place first, byte-exact, as for an
 * exec.
 */
static void fab_fork_prepare(void)
{
	if (fab.state > 0 && fab.pid == uls_pid())
		revert_all(FOR_FORK);
}

/*
 * Before an exec, or a posix_spawn: the new image cannot take a fabric connection over
 * (its endpoint and state die with this one), so every one it inherits moves back to TCP
 * first, and at an exec every one this process owns (revert_all); a failure is logged,
 * and that connection is broken for the new program.
 */
static void fab_exec_begin(int spawn)
{
	revert_all(spawn ? FOR_SPAWN : FOR_EXEC);
	/* The new image has its own endpoint, if any; this one's region name goes now (an
	 * exec that fails leaves the endpoint to peers that had mapped it already). After
	 * posix_spawn this process goes on: its name stays, for peers yet to come. */
	if (!spawn)
		fab_shm_unlink();
}

/*
 * FINs with CLOSE that connections closed earlier still wait to see answered: their tags
 * and since when (fab.mu held, but for the exit's first look, which only counts them).
 * Only the exit waits for them (fab_last_words); a close returns once its sends are out,
 * and the process keeps the provider's sockets.
 */
#define UNTAKEN_MAX 64
#define EXIT_WAIT_MS 500 /* the exit's, for sends, offers' copies and answers */
#define UNTAKEN_NS 2000000000ull /* a peer that did not answer in 2 s will not soon */
static struct untaken {
	uint64_t tag, since;
	fi_addr_t peer;
} untaken[UNTAKEN_MAX];
static unsigned untaken_next;

void fab_untaken_note(const struct fab_conn *f)
{
	untaken[untaken_next++ % UNTAKEN_MAX] =
		(struct untaken){.tag = f->tag, .since = uls_now_ns(), .peer = f->peer};
}

void fab_untaken_late(uint64_t tag, uint8_t type, const uint8_t *p, uint32_t len)
{
	struct uls_fab_fin fin;

	/* The answer, or a peer that closed or reset and will not give it. */
	if (type != ULS_FAB_TAKEN && type != ULS_FAB_RESET &&
	    (type != ULS_FAB_FIN || uls_fab_fin_parse(&fin, p, len) < 0 ||
	     !(fin.flags & ULS_FAB_FIN_CLOSE)))
		return;
	for (unsigned i = 0; i < UNTAKEN_MAX; i++)
		if (untaken[i].tag == tag)
			untaken[i].tag = 0;
}

void fab_untaken_pair_failed(fi_addr_t peer)
{
	for (unsigned i = 0; i < UNTAKEN_MAX; i++)
		if (untaken[i].peer == peer)
			untaken[i].tag = 0;
}

static unsigned untaken_count(uint64_t now)
{
	unsigned n = 0;

	for (unsigned i = 0; i < UNTAKEN_MAX; i++)
		n += untaken[i].tag && now - untaken[i].since < UNTAKEN_NS;
	return n;
}

/*
 * The process ends (exit, _exit; 9.8): each connection it sends on gets its FIN with
 * CLOSE. Up to 500 ms in all, then, for what dies with the process: a software
 * provider's queued sends, offered memory not yet copied (a close waits 100 ms for
 * those: the process keeps them), and bytes tcp's provider has handed to the kernel.
 * Its sends complete in the kernel's socket, and a process that dies with bytes unread
 * on that socket (window the peer returned meanwhile) makes the kernel reset it,
 * dropping what it had not sent yet (seen: a peer 256 KiB short). So the exit also waits
 * for the TAKEN that answers each FIN with CLOSE: every byte before it arrived. On a
 * loaded 2-core host a reading peer answered within 14 ms in 9 exits of 10, and within
 * 77 ms in all but 1 of about 560. The kernel closes the sockets next: a peer that had
 * the FIN reads to the end and sees EOF, as after a close.
 */
void fab_last_words(void)
{
	static int said;
	uint64_t start = uls_now_ns(), now = start, until = start + EXIT_WAIT_MS * 1000000ull;

	/* Once: exit() runs the atexit handler (proc.c), then the library's destructor. */
	if (said)
		return;
	fab_shm_unlink();
	if (fab.state <= 0 || fab.pid != uls_pid() || (!fab.nconns && !untaken_count(now)))
		return;
	said = 1;
	while (pthread_mutex_trylock(&fab.mu) != 0) /* another thread may hold it for good */
		if (uls_now_ns() >= until)
			return;
	for (struct fab_conn *f = fab.conns; f; f = f->next)
		if (!f->orphan && f->tx_sw && !f->fin_sent && !f->err && !f->tx_stop &&
		    !on_tcp(f->c) && fab_send_fin(f, f->tx_sw_pos + f->tx_fab, 1) == 0)
			f->fin_sent = f->close_sent = 1;
	uint32_t flight = 0, unanswered = 0;
	for (;;) {
		fab_progress();
		now = uls_now_ns();
		flight = 0;
		unanswered = untaken_count(now);
		for (struct fab_conn *f = fab.conns; f; f = f->next) {
			flight += f->tx_flight + (uint32_t)fab_offers_untaken(f);
			unanswered += (uint32_t)fab_fin_untaken(f);
		}
		if ((!flight && !unanswered) || now >= until)
			break;
		int may = fab_trywait();
		pthread_mutex_unlock(&fab.mu);
		fab_sleep_1ms(may);
		if (pthread_mutex_trylock(&fab.mu) != 0)
			return;
	}
	if (flight)
		uls_warn("fabric: the process ends with %u sends not yet out or offers not yet "
			 "copied after %d ms: their peers read ECONNRESET", flight, EXIT_WAIT_MS);
	else
		uls_dbg("fabric: the process ends after %llu us, its sends out, %u FINs unanswered",
			(unsigned long long)(now - start) / 1000, unanswered);
	/* A connection whose handshake had not ended lived on TCP: its path says so, as a
	 * close's would. Only the path and its line: the rest of the state goes with the
	 * process (a lock another thread holds is not waited for). */
	static const char ended[] = "fabric: the process ended before the handshake did";
	for (struct fab_conn *f = fab.conns; f; f = f->next) {
		struct uls_conn *c = f->c;
		if (f->orphan || atomic_load(&c->path) != ULS_PATH_PENDING ||
		    pthread_mutex_trylock(&c->mu) != 0)
			continue;
		snprintf(c->reason, sizeof(c->reason), "%s", ended);
		atomic_store(&c->path, ULS_PATH_KERNEL);
		pthread_mutex_unlock(&c->mu);
		uls_conn_log_path(c, f->fd);
	}
	pthread_mutex_unlock(&fab.mu);
}

/* A thread is about to sleep: connection slots taken are posted again (fab_repost), and
 * sends still posted are pushed out first, for a while (the program may sleep on
 * something else, where no progress runs: fab_flush). */
static void fab_idle(void)
{
	if (fab.state <= 0 || fab.pid != uls_pid() || pthread_mutex_trylock(&fab.mu) != 0)
		return;
	fab_repost();
	if (atomic_load(&fab.tx_posted))
		fab_flush(FLUSH_NS);
	pthread_mutex_unlock(&fab.mu);
}

static int fab_wait_fd(void)
{
	return fab.state > 0 && fab.pid == uls_pid() && fab.nconns > 0 ? fab.ep.wait_fd : -1;
}

/* While a handshake is under way, sleepers look again after fab_hs_nap_ms: the provider's
 * connection set-up, the directory's answer and a deadline wake no one (9.7); every
 * millisecond while sends are posted (fab_idle). */
static uint64_t fab_nap_ns(void)
{
	uint64_t nap = 0;

	if (!fab.nconns)
		return 0;
	if (atomic_load(&fab.tx_posted) && fab.pid == uls_pid())
		return 1000000; /* and sends still posted: fab_idle pushes them */
	if (fab.state > 0 && fab.pid == uls_pid() && fab.ep.wait_fd < 0)
		return fab_nowake_nap();
	uint64_t now = uls_now_ns();
	pthread_mutex_lock(&fab.mu);
	for (struct fab_conn *f = fab.conns; f && nap != 1000000; f = f->next)
		if (fab_handshaking(f)) {
			uint64_t ns = (uint64_t)fab_hs_nap_ms(f, now) * 1000000u;
			nap = !nap || ns < nap ? ns : nap;
		}
	pthread_mutex_unlock(&fab.mu);
	return nap;
}

const struct uls_transport_ops uls_fabric_transport = {
	.name = "fabric",
	.connect = fab_connect,
	.connect_failed = fab_connect_failed,
	.connected = fab_connected,
	.accept = fab_accept,
	.adopt = fab_adopt,
	.send = fab_tx,
	.recv = fab_recv,
	.shutdown = fab_shutdown,
	.kernel_parts = fab_kernel_parts,
	.ready = fab_ready,
	.arm = fab_arm,
	.drain = fab_drain,
	.sleep_recv = fab_sleep_recv,
	.gen = fab_gen,
	.inq = fab_inq,
	.outq = fab_outq,
	.atmark = fab_atmark,
	.revert = fab_revert,
	.tx_to_kernel = fab_tx_to_kernel,
	.async = fab_async,
	.settled = fab_settled,
	.closing = fab_closing,
	.close = fab_close,
	.wake = fab_wake,
	.destroy = fab_destroy,
	.joined = fab_joined,
	.tcp_info = fab_tcp_info,
	.fork_prepare = fab_fork_prepare,
	.atfork_child = fab_atfork_child,
	.exec_begin = fab_exec_begin,
	.process_exit = fab_last_words,
	.wait_fd = fab_wait_fd,
	.nap_ns = fab_nap_ns,
	.idle = fab_idle,
};
