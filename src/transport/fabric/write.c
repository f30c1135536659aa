/* SPDX-License-Identifier: MIT */
/*
 * Writes (docs/protocol.md 9.14, RING and WROTE). Where both endpoints write into a
 * peer's memory and a send after a write is delivered after the write's bytes are placed
 * (tcp;ofi_rxm), each side registers its receive ring for its peer's writes, under a
 * random key, and says where it is with one RING. A long send is then copied once, into
 * txbuf (which keeps every byte until the window returns it, for 9.10), written from
 * there into the peer's ring at the bytes' own positions, and announced by an 8-byte
 * WROTE, where DATA went in slots of at most 64 KiB through two more copies. The bytes
 * leave with the sender's call, as DATA does: the receiver needs nothing of the sender's
 * program afterwards (a read would wait for the sender's progress).
 *
 * The peer may write into the ring at any time, so the ring stays registered until the
 * peer's stream has ended for sure (its FIN or its REVERT, which follow its last write);
 * a connection closed before that keeps its ring, registered, for the rest of the
 * process or until that message comes (64 MiB in all; past that, new connections
 * announce no ring and get DATA). A write lands only in this connection's ring, whose
 * bytes are the writer's own stream: a hostile peer breaks only its own connection.
 */
#include "fabric_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/log.h"

/* Rings of closed connections, still registered while their peer may write. */
#define RING_LINGER_MAX (64u << 20)

struct ring_linger {
	struct ring_linger *next;
	uint64_t tag; /* the connection's own: the peer's last messages still carry it */
	fi_addr_t peer;
	uint8_t *buf;
	struct fid_mr *mr;
	size_t size;
};
static struct ring_linger *lingering;
static size_t linger_bytes;

void fab_ring_offer(struct fab_conn *f)
{
	uint64_t key = 0, addr = 0;

	if (!f->writes || f->ring_mr || f->orphan)
		return;
	if (linger_bytes + f->rx_window > RING_LINGER_MAX ||
	    uls_fab_ep_mr_reg(&fab.ep, f->rxbuf, f->rx_window, FI_REMOTE_WRITE, fab_random64(),
			      &f->ring_mr, &key, &addr) != 0) {
		uls_dbg("fabric: fd=%d receive ring not registered: the peer sends DATA", f->fd);
		f->ring_mr = NULL;
		return;
	}
	struct uls_fab_ring r = {.addr = addr, .key = key, .len = f->rx_window};
	uint8_t p[ULS_FAB_RING_SIZE];

	uls_fab_ring_pack(&r, p);
	if (fab_send_ctl(f, ULS_FAB_RING, p, sizeof(p)) < 0) {
		uls_dbg("fabric: fd=%d RING not sent: the peer sends DATA", f->fd);
		uls_fab_ep_mr_close(f->ring_mr);
		f->ring_mr = NULL;
	}
}

void fab_ring_arrival(struct fab_conn *f, const uint8_t *p, uint32_t len)
{
	struct uls_fab_ring r;

	if (!f->writes || f->peer_ring_len || uls_fab_ring_parse(&r, p, len) < 0 ||
	    r.len != f->peer_window)
		return fab_violation(f, "RING");
	f->peer_ring_addr = r.addr;
	f->peer_ring_key = r.key;
	f->peer_ring_len = r.len;
}

ssize_t fab_write_send(struct fab_conn *f, const struct iovec *iov, int iovcnt, size_t skip,
		       size_t n)
{
	if (!f->peer_ring_len)
		return -ENOTSUP;
	size_t at = (size_t)(f->tx_fab & (f->peer_ring_len - 1)), run = f->peer_ring_len - at;

	if (run > n)
		run = n;
	/* The WROTE that follows needs a send slot: none, nothing written. */
	if (!fab_ctl_room())
		return -EAGAIN;
	/* The ring's bytes from tx_fab on were returned: the caller's window room. */
	fab_iov_copy(f->txbuf + at, iov, iovcnt, skip, run);
	int r = fab_write(f, f->txbuf + at, run, f->peer_ring_addr + at, f->peer_ring_key);
	if (r < 0)
		return r;
	struct uls_fab_wrote w = {.len = (uint32_t)run};
	uint8_t p[ULS_FAB_WROTE_SIZE];

	uls_fab_wrote_pack(&w, p);
	/* Not announced: the bytes lie unannounced at their place, and the caller's next
	 * try writes the same bytes there again. */
	if ((r = fab_send_ctl(f, ULS_FAB_WROTE, p, sizeof(p))) < 0)
		return r;
	f->tx_fab += run;
	f->written += run;
	return (ssize_t)run;
}

void fab_wrote_arrival(struct fab_conn *f, const uint8_t *p, uint32_t len)
{
	struct uls_fab_wrote w;

	if (!f->ring_mr || uls_fab_wrote_parse(&w, p, len) < 0)
		return fab_violation(f, "WROTE");
	if (!fab_stream_admits(f, w.len))
		return;
	/* The bytes are at their place in the ring already (placed before this message). */
	f->rx_in += w.len;
}

void fab_ring_release(struct fab_conn *f)
{
	struct ring_linger *l;

	if (!f->ring_mr)
		return;
	if (f->orphan) { /* a fork child's copy: the registration is the parent's */
		f->ring_mr = NULL;
		return;
	}
	/* The peer may write until its FIN or its REVERT, which follow its last write; not
	 * once its SWITCH said its direction stays on TCP (a failed pair took the
	 * registration already: fab_ring_pair_failed). */
	int done = f->fin || f->peer_rev || (f->peer_sw && f->peer_sw_pos == UINT64_MAX);
	if (!done && (l = malloc(sizeof(*l)))) {
		*l = (struct ring_linger){.next = lingering, .tag = f->tag, .peer = f->peer,
					  .buf = f->rxbuf, .mr = f->ring_mr, .size = f->rx_window};
		lingering = l;
		linger_bytes += l->size;
		f->rxbuf = NULL;
		f->ring_mr = NULL;
		return;
	}
	uls_fab_ep_mr_close(f->ring_mr);
	f->ring_mr = NULL;
}

/* Lingering rings of tag (any, when 0) toward peer (any, when FI_ADDR_UNSPEC) go. */
static void ring_drop(uint64_t tag, fi_addr_t peer)
{
	for (struct ring_linger **pp = &lingering, *l; (l = *pp);) {
		if ((tag && l->tag != tag) || (peer != FI_ADDR_UNSPEC && l->peer != peer)) {
			pp = &l->next;
			continue;
		}
		*pp = l->next;
		linger_bytes -= l->size;
		uls_fab_ep_mr_close(l->mr);
		free(l->buf);
		free(l);
	}
}

void fab_ring_late(uint64_t tag, uint8_t type, fi_addr_t src)
{
	if (type == ULS_FAB_FIN || type == ULS_FAB_REVERT || type == ULS_FAB_RESET)
		ring_drop(tag, src);
}

void fab_ring_pair_failed(fi_addr_t peer)
{
	ring_drop(0, peer);
	/* Live connections keep their rings' bytes for the program, not the registration. */
	for (struct fab_conn *f = fab.conns; f; f = f->next)
		if (f->peer == peer && f->ring_mr && !f->orphan) {
			uls_fab_ep_mr_close(f->ring_mr);
			f->ring_mr = NULL;
		}
}
