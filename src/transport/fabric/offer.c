/* SPDX-License-Identifier: MIT */
/*
 * Offers (docs/protocol.md 9.6, AVAIL and TAKEN). Where both endpoints read a peer's
 * memory in the reader's own call (shm: one process_vm_readv), a long send copies its
 * bytes once, into the connection's txbuf, which is registered for the peer's reads, and
 * sends a 64-byte AVAIL in place of DATA. The receiver reads them with fi_read straight
 * into its program's buffer, or into its receive buffer for a peek, a discard or a short
 * read. Two copies in all, against five for DATA (program to slot, slot to txbuf, the
 * provider's, slot to receive buffer, receive buffer to program).
 *
 * txbuf keeps every byte until the peer's window returns it (9.10 needs it), so an offer
 * stays readable while the sender lives. Its memory may still go with the sender (exec,
 * exit, a close the peer outlasts): each read of bytes is followed by a read of a guard
 * word placed after the ring, which the sender clears before the memory goes. One read
 * sees one address space, so a guard still in place after the bytes proves them the
 * stream's; one found changed (another image, another process under the same pid)
 * resets the connection instead of handing over bytes that are not the stream's. A peer
 * that closes or leaves has its offers copied at once (fab_run_pulls), so that its close
 * and its exec need not wait for the program.
 *
 * Lends (LEND and MOVED) save the sender's copy too: where the profile spins, a long send
 * offers the program's own buffer and waits about a copy's time for the peer's program to
 * consume it (the window returns it at once then). Otherwise the bytes move into txbuf at
 * their place, MOVED tells the reader, and only then does the lend's own guard go, so a
 * reader that finds it changed finds MOVED in its queue and reads again from txbuf. One
 * lend at a time per connection: its send holds the connection's send lock throughout.
 */
#include "fabric_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/log.h"
#include "../../core/spin.h"

/* Registered txbufs kept after their connection, for a peer that may still read them. */
#define LINGER_MAX (64u << 20)
/* A read into the program's buffer of less than this goes through the receive buffer. */
#define DIRECT_MIN 4096u
/* A lending send waits for the peer to consume the bytes LEND_WAIT_NS plus a nanosecond
 * a byte (a slow copy, and a sleeping reader's wake-up), before it moves them into txbuf. */
#define LEND_WAIT_NS 50000u
/* Long sends after a lend that moved that are offered from txbuf before the next lend. */
#define LEND_SKIP 16u
/* A receiver that finds a lend's guard changed waits this long for the MOVED sent before
 * it (the provider's delivery), then resets the connection. */
#define MOVED_WAIT_NS 10000000u

struct fab_linger {
	struct fab_linger *next;
	uint8_t *buf;
	struct fid_mr *mr;
	size_t size;
};
static struct fab_linger *lingering;
static size_t linger_bytes;
static int pulls_marked; /* some connection has `pull` set */
static int reading;      /* a read is in flight: its offer stays at the head till it ends */

static int offer_register(struct fab_conn *f)
{
	uint64_t guard = fab_random64();

	if (uls_fab_ep_mr_reg(&fab.ep, f->txbuf, (size_t)f->peer_window + FAB_GUARD,
			      FI_REMOTE_READ, fab_random64(), &f->tx_mr, &f->tx_key, &f->tx_addr) != 0) {
		uls_dbg("fabric: fd=%d txbuf not registered: DATA only", f->fd);
		f->tx_mr = NULL;
		f->no_offers = 1;
		return -1;
	}
	memcpy(f->txbuf + f->peer_window, &guard, sizeof(guard));
	f->guard = guard;
	return 0;
}

ssize_t fab_offer_send(struct fab_conn *f, const struct iovec *iov, int iovcnt, size_t skip,
		       size_t n)
{
	if (f->no_offers || (!f->tx_mr && offer_register(f) < 0))
		return -ENOTSUP;
	size_t at = (size_t)(f->tx_fab % f->peer_window), run = f->peer_window - at;

	if (run > n)
		run = n;
	/* The ring's bytes from tx_fab on were returned: the caller's window room. */
	fab_iov_copy(f->txbuf + at, iov, iovcnt, skip, run);
	struct uls_fab_avail a = {.len = (uint32_t)run, .addr = f->tx_addr + at, .key = f->tx_key,
				  .guard_addr = f->tx_addr + f->peer_window, .guard = f->guard};
	uint8_t p[ULS_FAB_AVAIL_SIZE];

	uls_fab_avail_pack(&a, p);
	int r = fab_send_ctl(f, ULS_FAB_AVAIL, p, sizeof(p));
	if (r < 0)
		return r;
	f->tx_fab += run;
	f->offered_end = f->tx_fab;
	return (ssize_t)run;
}

/* The lend's guard word, after the ring's in txbuf (FAB_GUARD holds both). */
#define LEND_GUARD_AT 8u

static uint64_t *lend_guard(struct fab_conn *f)
{
	return (uint64_t *)(void *)(f->txbuf + f->peer_window + LEND_GUARD_AT);
}

/* The peer's program consumed the lent bytes: the window returned them. Read into its
 * receive buffer only, they are not taken: if the peer left before its program read them,
 * this side would send them again on TCP (9.10), from txbuf. */
static int lend_taken(const struct fab_conn *f)
{
	return f->tx_ret >= f->lend_pos + f->lend_len;
}

static void lend_settle(struct fab_conn *f);

ssize_t fab_lend_send(struct fab_conn *f, const struct iovec *iov, int iovcnt, size_t skip,
		      size_t n)
{
	if (f->no_offers || (!f->tx_mr && offer_register(f) < 0))
		return -ENOTSUP;
	int i = 0;
	while (i < iovcnt && skip >= iov[i].iov_len)
		skip -= iov[i++].iov_len;
	if (i == iovcnt)
		return -ENOTSUP;
	size_t at = (size_t)(f->tx_fab % f->peer_window), run = f->peer_window - at;
	if (run > n)
		run = n;
	if (run > iov[i].iov_len - skip)
		run = iov[i].iov_len - skip;
	if (run < FAB_LEND_MIN)
		return -ENOTSUP;
	/* A peer that let the last lend go unread is not asked again for a while: a send
	 * must not spend twice a copy's time on every call to a slow reader. */
	if (f->lend_skip) {
		f->lend_skip--;
		return -ENOTSUP;
	}
	uint8_t *src = (uint8_t *)iov[i].iov_base + skip;
	struct uls_fab_lend l = {.len = (uint32_t)run,
				 .guard_addr = f->tx_addr + f->peer_window + LEND_GUARD_AT,
				 .guard_key = f->tx_key,
				 .guard = fab_random64() | 1};
	if (uls_fab_ep_mr_reg(&fab.ep, src, run, FI_REMOTE_READ, fab_random64(), &f->lend_mr,
			      &l.key, &l.addr) != 0)
		return -ENOTSUP;
	__atomic_store_n(lend_guard(f), l.guard, __ATOMIC_SEQ_CST);
	uint8_t p[ULS_FAB_LEND_SIZE];
	uls_fab_lend_pack(&l, p);
	int r = fab_send_ctl(f, ULS_FAB_LEND, p, sizeof(p));
	if (r < 0) {
		__atomic_store_n(lend_guard(f), 0, __ATOMIC_SEQ_CST);
		uls_fab_ep_mr_close(f->lend_mr);
		f->lend_mr = NULL;
		return r;
	}
	f->lend_src = src;
	f->lend_pos = f->tx_fab;
	f->lend_len = (uint32_t)run;
	f->tx_fab += run;
	f->offered_end = f->tx_fab;
	/* The peer reads while this send spins; fab.mu goes between steps, as in any wait. */
	uint64_t end = uls_now_ns() + LEND_WAIT_NS + run;
	struct uls_spin sp;
	uls_spin_start_fixed(&sp);
	while (!lend_taken(f) && !f->err && !f->tx_stop && !f->peer_rev && !f->peer_closed &&
	       !f->tcp_end) {
		pthread_mutex_unlock(&fab.mu);
		int more = uls_spin_until(&sp, end);
		pthread_mutex_lock(&fab.mu);
		if (!more)
			break;
		fab_progress();
	}
	lend_settle(f);
	return (ssize_t)run;
}

/* MOVED for the lend's bytes, now at txbuf + at, posted before the caller clears the
 * lend's guard: a reader that finds the guard changed has it in its queue already. */
static void lend_moved(struct fab_conn *f, size_t at)
{
	struct uls_fab_moved m = {.pos = f->lend_pos, .len = f->lend_len, .addr = f->tx_addr + at,
				  .key = f->tx_key, .guard_addr = f->tx_addr + f->peer_window,
				  .guard = f->guard};
	uint8_t p[ULS_FAB_MOVED_SIZE];
	uint64_t give_up = uls_now_ns() + MOVED_WAIT_NS;
	int r;

	uls_fab_moved_pack(&m, p);
	while ((r = fab_send_ctl(f, ULS_FAB_MOVED, p, sizeof(p))) == -EAGAIN &&
	       uls_now_ns() < give_up)
		fab_progress();
	while (r == 0 && fab_deferred_to(f->peer) && uls_now_ns() < give_up)
		fab_progress();
	if (r < 0 || fab_deferred_to(f->peer)) {
		uls_warn("fabric: fd=%d the moved bytes of a lend could not be announced: the "
			 "connection is reset", f->fd);
		f->err = ECONNRESET;
		fab_news(f);
	}
}

/* The lend in flight, if any, ends: its bytes go into txbuf at their place unless the
 * peer took them, MOVED tells the peer so, and the program's memory is no longer read. */
static void lend_settle(struct fab_conn *f)
{
	if (!f->lend_len)
		return;
	if (lend_taken(f)) {
		f->lent += f->lend_len;
	} else if (!f->err) {
		/* The bytes go to their place in txbuf, where an AVAIL's would be (the window
		 * kept it free). A peer that reads no more (its REVERT came) gets what it did
		 * not consume again on TCP, from there. */
		size_t at = (size_t)(f->lend_pos % f->peer_window);
		memcpy(f->txbuf + at, f->lend_src, f->lend_len);
		f->moved += f->lend_len;
		f->lend_skip = LEND_SKIP;
		if (!f->peer_rev && !f->tx_stop)
			lend_moved(f, at);
	}
	__atomic_store_n(lend_guard(f), 0, __ATOMIC_SEQ_CST);
	uls_fab_ep_mr_close(f->lend_mr);
	f->lend_mr = NULL;
	f->lend_src = NULL;
	f->lend_len = 0;
}

static void offer_add(struct fab_conn *f, const struct fab_offer *o)
{
	if (!fab_stream_admits(f, o->len))
		return;
	uint32_t max = fab_offers_max(f);
	if (f->off_n >= max)
		return fab_violation(f, "too many offers");
	if (!f->offers && !(f->offers = calloc(max, sizeof(*f->offers))))
		return fab_violation(f, "out of memory for an offer");
	f->offers[(f->off_head + f->off_n) % max] = *o;
	f->off_n++;
	f->rx_in += o->len;
}

void fab_offer_arrival(struct fab_conn *f, const uint8_t *p, uint32_t len)
{
	struct uls_fab_avail a;

	if (!f->reads || uls_fab_avail_parse(&a, p, len) < 0)
		return fab_violation(f, "AVAIL");
	offer_add(f, &(struct fab_offer){.pos = f->rx_in, .addr = a.addr, .key = a.key,
					 .guard_addr = a.guard_addr, .guard_key = a.key,
					 .guard = a.guard, .len = a.len});
}

void fab_lend_arrival(struct fab_conn *f, const uint8_t *p, uint32_t len)
{
	struct uls_fab_lend l;

	if (!f->reads || uls_fab_lend_parse(&l, p, len) < 0)
		return fab_violation(f, "LEND");
	offer_add(f, &(struct fab_offer){.pos = f->rx_in, .addr = l.addr, .key = l.key,
					 .guard_addr = l.guard_addr, .guard_key = l.guard_key,
					 .guard = l.guard, .len = l.len, .lent = 1});
	f->lend_due = f->rx_in; /* its sender waits: the window goes back once it is read */
}

void fab_moved_arrival(struct fab_conn *f, const uint8_t *p, uint32_t len)
{
	struct uls_fab_moved m;

	if (!f->reads || uls_fab_moved_parse(&m, p, len) < 0 || m.pos > f->rx_in ||
	    m.len > f->rx_in - m.pos)
		return fab_violation(f, "MOVED");
	/* The lent offer, or what is left of it; none when it was read meanwhile (the
	 * sender moved the bytes before the window returned them). */
	uint32_t max = fab_offers_max(f);
	for (uint32_t i = 0; i < f->off_n; i++) {
		struct fab_offer *o = &f->offers[(f->off_head + i) % max];
		if (!o->lent || o->pos < m.pos || o->pos + o->len > m.pos + m.len)
			continue;
		o->addr = m.addr + (o->pos - m.pos);
		o->key = m.key;
		o->guard_addr = m.guard_addr;
		o->guard_key = m.key;
		o->guard = m.guard;
		o->lent = 0;
	}
}

void fab_taken_arrival(struct fab_conn *f, const uint8_t *p, uint32_t len)
{
	struct uls_fab_taken t;

	if (uls_fab_taken_parse(&t, p, len) < 0 || t.pos > f->tx_fab || t.pos < f->peer_taken)
		return fab_violation(f, "TAKEN");
	f->peer_taken = t.pos;
	f->taken = 1;
}

struct fab_offer *fab_offer_at(struct fab_conn *f, uint64_t pos)
{
	struct fab_offer *o = f->off_n ? &f->offers[f->off_head] : NULL;

	return o && o->pos == pos ? o : NULL;
}

uint64_t fab_offer_next(const struct fab_conn *f)
{
	return f->off_n ? f->offers[f->off_head].pos : f->rx_in;
}

static void offer_pop(struct fab_conn *f)
{
	f->off_head = (f->off_head + 1) % fab_offers_max(f);
	f->off_n--;
}

/*
 * Reads n bytes of the head offer into the nl local pieces, then its guard word: 0, or
 * -errno with the connection reset. Two reads of one piece each, as shm reads in the
 * caller's call only then (one remote piece); the guard is read second, so a guard still
 * in place proves that the bytes read before it were the sender's (it clears the guard
 * before the memory goes, and a new image never holds it).
 */
static int offer_read(struct fab_conn *f, struct iovec *local, size_t nl, size_t n)
{
	const struct fab_offer *o = &f->offers[f->off_head];
	static uint64_t seen; /* fab.mu held: one read at a time */
	struct iovec at_seen = {&seen, sizeof(seen)};
	uint64_t give_up = 0;
	int r, ok = 0;

	reading = 1; /* the reads progress, and a FIN they bring must not pull this offer */
	for (;;) {
		/* The reads progress: a MOVED they bring changes *o, not the read under way. */
		const struct fab_offer was = *o;
		struct fi_rma_iov data = {.addr = was.addr, .len = n, .key = was.key};
		struct fi_rma_iov guard = {.addr = was.guard_addr, .len = sizeof(seen),
					   .key = was.guard_key};
		seen = 0;
		r = fab_read(local, nl, &data, 1, f->peer);
		if (r == 0)
			r = fab_read(&at_seen, 1, &guard, 1, f->peer);
		ok = r == 0 && seen == was.guard;
		if (ok || !was.lent)
			break;
		/* A lend whose send stopped waiting: its bytes moved, and MOVED, sent before
		 * the guard changed, says where (fab_moved_arrival clears o->lent). */
		uint64_t now = uls_now_ns();
		if (!give_up)
			give_up = now + MOVED_WAIT_NS;
		while (o->lent && !f->err && now < give_up) {
			fab_progress();
			now = uls_now_ns();
		}
		if (o->lent || f->err)
			break;
	}
	reading = 0;
	if (ok) {
		f->offers_read += n;
		return 0;
	}
	if (!f->err)
		uls_warn("fabric: fd=%d the peer's offered bytes could not be read (%s): the "
			 "connection is reset", f->fd, r ? strerror(-r) : "its memory changed");
	f->err = ECONNRESET;
	fab_news(f);
	return -ECONNRESET;
}

/* Reads the head offer into the program's memory at base (n bytes at most): the count,
 * or -errno (the connection is reset). */
static ssize_t offer_read_into(struct fab_conn *f, void *base, size_t n)
{
	struct fab_offer *o = &f->offers[f->off_head];
	struct iovec local[1] = {{base, n < o->len ? n : o->len}};

	n = local[0].iov_len;
	if (offer_read(f, local, 1, n) < 0)
		return -ECONNRESET;
	o->pos += n;
	o->addr += n;
	o->len -= (uint32_t)n;
	if (!o->len)
		offer_pop(f);
	f->rx_out += n;
	return (ssize_t)n;
}

/* The head offer, whole, into its place in the receive buffer (a ring by position). */
static int offer_pull(struct fab_conn *f)
{
	const struct fab_offer *o = &f->offers[f->off_head];
	uint32_t at = (uint32_t)(o->pos & (f->rx_window - 1)), first = f->rx_window - at;
	struct iovec local[2];
	size_t nl = 0;

	if (first > o->len)
		first = o->len;
	local[nl++] = (struct iovec){f->rxbuf + at, first};
	if (o->len > first)
		local[nl++] = (struct iovec){f->rxbuf, o->len - first};
	if (offer_read(f, local, nl, o->len) < 0)
		return -ECONNRESET;
	offer_pop(f);
	return 0;
}

int fab_offer_pull_all(struct fab_conn *f)
{
	while (f->off_n && !f->err)
		if (offer_pull(f) < 0)
			return -ECONNRESET;
	return 0;
}

ssize_t fab_offer_into(struct fab_conn *f, void *base, size_t n)
{
	if (n < DIRECT_MIN)
		return offer_pull(f) < 0 ? -ECONNRESET : 0;
	return offer_read_into(f, base, n);
}

int fab_pull_later(struct fab_conn *f, int rev)
{
	/* A REVERT with nothing to copy is answered at once; a FIN with CLOSE always gets
	 * its TAKEN (9.8), after the offers it leaves behind are copied (9.6). */
	if (rev && !f->off_n)
		return 0;
	f->pull = 1;
	f->rev_due |= rev;
	pulls_marked = 1;
	return 1;
}

void fab_run_pulls(void)
{
	static int running; /* a pull's read progresses, which ends here again */

	if (!pulls_marked || running || reading)
		return;
	running = 1;
	while (pulls_marked) {
		pulls_marked = 0;
		for (struct fab_conn *f = fab.conns; f; f = f->next) {
			if (!f->pull)
				continue;
			f->pull = 0;
			if (!f->rev)
				fab_offer_pull_all(f);
			if (f->rev_due) {
				f->rev_due = 0;
				fab_send_revert(f, 0);
			} else if (f->peer_closed && !f->err) {
				struct uls_fab_taken t = {.pos = f->rx_in};
				uint8_t p[ULS_FAB_TAKEN_SIZE];
				uls_fab_taken_pack(&t, p);
				if (fab_send_ctl(f, ULS_FAB_TAKEN, p, sizeof(p)) == 0)
					uls_dbg("fabric: fd=%d FIN with CLOSE answered: TAKEN at %llu",
						f->fd, (unsigned long long)t.pos);
			}
			fab_news(f);
		}
	}
	running = 0;
}

int fab_offers_untaken(const struct fab_conn *f)
{
	uint64_t done = f->peer_taken > f->tx_ret ? f->peer_taken : f->tx_ret;

	return f->tx_mr && f->offered_end > done && !f->peer_rev && !f->err;
}

int fab_fin_untaken(const struct fab_conn *f)
{
	/* A peer that closed or died, or moved back, answers no more. */
	return f->close_sent && !f->taken && !f->err && !f->peer_closed && !f->tcp_end &&
	       !f->peer_rev && !f->orphan;
}

void fab_offer_release(struct fab_conn *f)
{
	if (f->orphan) /* a fork child's copy: the lend is the parent's */
		f->lend_len = 0;
	lend_settle(f);
	free(f->offers);
	f->offers = NULL;
	f->off_n = 0;
	if (!f->tx_mr)
		return;
	if (f->orphan) { /* a fork child's copy: the registration is the parent's */
		f->tx_mr = NULL;
		return;
	}
	size_t size = (size_t)f->peer_window + FAB_GUARD;
	struct fab_linger *l;
	if (fab_offers_untaken(f) && linger_bytes + size <= LINGER_MAX &&
	    (l = malloc(sizeof(*l)))) {
		*l = (struct fab_linger){.next = lingering, .buf = f->txbuf, .mr = f->tx_mr, .size = size};
		lingering = l;
		linger_bytes += size;
		f->txbuf = NULL;
		f->tx_mr = NULL;
		uls_dbg("fabric: fd=%d closed with offers unread: its %zu bytes stay", f->fd, size);
		return;
	}
	/* Cleared before the memory goes: a late read sees it (offer_read). */
	__atomic_store_n((uint64_t *)(void *)(f->txbuf + f->peer_window), 0, __ATOMIC_SEQ_CST);
	uls_fab_ep_mr_close(f->tx_mr);
	f->tx_mr = NULL;
}
