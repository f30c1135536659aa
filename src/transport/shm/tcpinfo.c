/* SPDX-License-Identifier: MIT */
/*
 * TCP_INFO made true for a connection on the rings: the kernel counts wake-up bytes as
 * data and never sees ring bytes.
 */
#include <linux/tcp.h>
#include <stddef.h>

#include "shm_int.h"

/* n less the wake-up bytes, never below 0: the counts in the segment are the peer's. */
static uint64_t less(uint64_t n, uint64_t tokens)
{
	return n > tokens ? n - tokens : 0;
}

/* Positions to count in one direction: up to a revert's ring end, where TCP took over. */
static uint64_t ring_bytes(uint64_t tail, int reverted, uint64_t ring_end)
{
	return reverted ? ring_end : tail;
}

#define HAS(field) (len >= offsetof(struct tcp_info, field) + sizeof(((struct tcp_info *)0)->field))

void uls_shm_tcp_info(struct uls_conn *c, void *info, socklen_t len)
{
	struct uls_shm_conn *s = shm_of(c);
	struct tcp_info *ti = info;

	if (!uls_conn_accelerated(c))
		return;
	uint64_t my_tokens = atomic_load(&s->me->tokens_sent);
	uint64_t peer_tokens = atomic_load(&s->peer->tokens_sent);
	uint64_t tx = ring_bytes(atomic_load(&s->tx->sh->prod.tail), atomic_load(&s->me->tx_reverted),
				 atomic_load(&s->me->revert_ring_end));
	uint64_t rx = ring_bytes(atomic_load(&s->rx->sh->prod.tail),
				 atomic_load(&s->peer->tx_reverted),
				 atomic_load(&s->peer->revert_ring_end));

	/*
	 * This side's TCP bytes are its data (a client's before its switch, anything after a
	 * revert) and its wake-ups, which every data byte before a switch precedes: the data
	 * is acknowledged once anything after it is. The connecting side's SYN counts as one
	 * acknowledged byte, as in the kernel. What came from the peer the same way: its
	 * data before its switch (a client's), then wake-ups only.
	 */
	if (HAS(tcpi_bytes_sent) && HAS(tcpi_bytes_acked)) {
		uint64_t data = less(ti->tcpi_bytes_sent, my_tokens);
		uint64_t syn = c->role == ULS_CLIENT;
		ti->tcpi_bytes_sent = data + tx;
		ti->tcpi_bytes_acked = (ti->tcpi_bytes_acked < syn + data ? ti->tcpi_bytes_acked
									  : syn + data) + tx;
	}
	/* Segments in flight from this side are wake-ups while it sends on the ring. */
	if (HAS(tcpi_unacked) && !atomic_load(&s->me->tx_reverted) &&
	    (c->role == ULS_SERVER || atomic_load(&s->me->switched)))
		ti->tcpi_unacked = 0;
	if (HAS(tcpi_bytes_received)) {
		uint64_t got = ti->tcpi_bytes_received, data;
		if (atomic_load(&s->peer->tx_reverted))
			data = less(got, peer_tokens);
		else if (c->role == ULS_CLIENT)
			data = 0; /* an attached server puts nothing but wake-ups on TCP */
		else if (atomic_load(&s->peer->switched))
			data = got < atomic_load(&s->peer->switch_pos) ? got
								 : atomic_load(&s->peer->switch_pos);
		else
			data = got;
		ti->tcpi_bytes_received = data + rx;
	}
}
