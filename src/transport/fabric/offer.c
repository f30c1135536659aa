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
 * resets the connection instead of handing over bytes that are not the stream's. A peer that closes or leaves has its offers copied at
 * once (fab_run_pulls), so that its close and its exec need not wait for the program.
 */
#include "fabric_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/log.h"

/* Registered txbufs kept after their connection, for a peer that may still read them. */
#define LINGER_MAX (64u << 20)
/* A read into the program's buffer of less than this goes through the receive buffer. */
#define DIRECT_MIN 4096u

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

void fab_offer_arrival(struct fab_conn *f, const uint8_t *p, uint32_t len)
{
	struct uls_fab_avail a;

	if (!f->reads || uls_fab_avail_parse(&a, p, len) < 0)
		return fab_violation(f, "AVAIL");
	if (!fab_stream_admits(f, a.len))
		return;
	uint32_t max = fab_offers_max(f);
	if (f->off_n >= max)
		return fab_violation(f, "too many offers");
	if (!f->offers && !(f->offers = calloc(max, sizeof(*f->offers))))
		return fab_violation(f, "out of memory for an offer");
	f->offers[(f->off_head + f->off_n) % max] =
		(struct fab_offer){.pos = f->rx_in, .addr = a.addr, .key = a.key,
				   .guard_addr = a.guard_addr, .guard = a.guard, .len = a.len};
	f->off_n++;
	f->rx_in += a.len;
}

void fab_taken_arrival(struct fab_conn *f, const uint8_t *p, uint32_t len)
{
	struct uls_fab_taken t;

	if (!f->reads || uls_fab_taken_parse(&t, p, len) < 0 || t.pos > f->tx_fab ||
	    t.pos < f->peer_taken)
		return fab_violation(f, "TAKEN");
	f->peer_taken = t.pos;
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
	struct fi_rma_iov data = {.addr = o->addr, .len = n, .key = o->key};
	struct fi_rma_iov guard = {.addr = o->guard_addr, .len = sizeof(seen), .key = o->key};
	struct iovec at_seen = {&seen, sizeof(seen)};

	seen = 0;
	reading = 1; /* the reads progress, and a FIN they bring must not pull this offer */
	int r = fab_read(local, nl, &data, 1, f->peer);
	if (r == 0)
		r = fab_read(&at_seen, 1, &guard, 1, f->peer);
	reading = 0;
	if (r == 0 && seen == o->guard) {
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
	/* A REVERT with nothing to copy is answered at once; a closing sender that offered
	 * waits for TAKEN even when every offer was read already. */
	if (rev ? !f->off_n : !f->reads)
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
				fab_send_ctl(f, ULS_FAB_TAKEN, p, sizeof(p));
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

void fab_offer_release(struct fab_conn *f)
{
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
