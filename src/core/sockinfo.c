/* SPDX-License-Identifier: MIT */
/*
 * What the kernel reports about a socket's bytes, made true for an accelerated
 * connection: zero-copy completions (the ring copies at once, so each MSG_ZEROCOPY send
 * completes as it returns, reported as the kernel reports a copied one) and the byte
 * counters of TCP_INFO (the kernel counts wake-up bytes and never sees ring bytes).
 */
#include <errno.h>
#include <time.h>
#include <linux/errqueue.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>

#include "conn.h"
#include "../os/libc.h"

int uls_conn_zc_enabled(struct uls_conn *c, int fd)
{
	int on = 0;
	socklen_t len = sizeof(on);

	pthread_mutex_lock(&c->mu);
	if (c->zc_state == 0)
		c->zc_state = uls_libc.getsockopt(uls_conn_fd(c, fd), SOL_SOCKET, SO_ZEROCOPY, &on,
						  &len) == 0 && on ? 2 : 1;
	on = c->zc_state == 2;
	pthread_mutex_unlock(&c->mu);
	return on;
}

void uls_conn_zc_set(struct uls_conn *c, int on)
{
	pthread_mutex_lock(&c->mu);
	c->zc_state = on ? 2 : 1;
	pthread_mutex_unlock(&c->mu);
}

void uls_conn_zc_sent(struct uls_conn *c)
{
	pthread_mutex_lock(&c->mu);
	uint32_t id = c->zc_next++;
	if (!atomic_load(&c->zc_pending))
		c->zc_lo = id;
	c->zc_hi = id; /* ids are consecutive: one range, as the kernel merges them */
	atomic_store(&c->zc_pending, 1);
	pthread_mutex_unlock(&c->mu);
}

ssize_t uls_conn_zc_report(struct uls_conn *c, struct msghdr *msg)
{
	struct sock_extended_err ee = {
		.ee_errno = 0,
		.ee_origin = SO_EE_ORIGIN_ZEROCOPY,
		.ee_code = SO_EE_CODE_ZEROCOPY_COPIED,
	};
	int v6 = c->local_sa.ss_family == AF_INET6;

	pthread_mutex_lock(&c->mu);
	if (!atomic_load(&c->zc_pending)) {
		pthread_mutex_unlock(&c->mu);
		return -EAGAIN;
	}
	ee.ee_info = c->zc_lo;
	ee.ee_data = c->zc_hi;
	atomic_store(&c->zc_pending, 0);
	pthread_mutex_unlock(&c->mu);
	msg->msg_flags = MSG_ERRQUEUE;
	if (!msg->msg_control || msg->msg_controllen < CMSG_LEN(sizeof(ee))) {
		msg->msg_flags |= MSG_CTRUNC;
		msg->msg_controllen = 0;
		return 0;
	}
	struct cmsghdr *cm = (struct cmsghdr *)msg->msg_control;
	cm->cmsg_level = v6 ? SOL_IPV6 : SOL_IP;
	cm->cmsg_type = v6 ? IPV6_RECVERR : IP_RECVERR;
	cm->cmsg_len = CMSG_LEN(sizeof(ee));
	memcpy(CMSG_DATA(cm), &ee, sizeof(ee));
	msg->msg_controllen = CMSG_SPACE(sizeof(ee)) <= msg->msg_controllen
				      ? CMSG_SPACE(sizeof(ee)) : CMSG_LEN(sizeof(ee));
	return 0;
}

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

void uls_conn_fix_tcp_info(struct uls_conn *c, void *info, socklen_t len)
{
	struct tcp_info *ti = info;

	if (!uls_conn_accelerated(c))
		return;
	uint64_t my_tokens = atomic_load(&c->me->tokens_sent);
	uint64_t peer_tokens = atomic_load(&c->peer->tokens_sent);
	uint64_t tx = ring_bytes(atomic_load(&c->tx->sh->prod.tail), atomic_load(&c->me->tx_reverted),
				 atomic_load(&c->me->revert_ring_end));
	uint64_t rx = ring_bytes(atomic_load(&c->rx->sh->prod.tail),
				 atomic_load(&c->peer->tx_reverted),
				 atomic_load(&c->peer->revert_ring_end));

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
	if (HAS(tcpi_unacked) && !atomic_load(&c->me->tx_reverted) &&
	    (c->role == ULS_SERVER || atomic_load(&c->me->switched)))
		ti->tcpi_unacked = 0;
	if (HAS(tcpi_bytes_received)) {
		uint64_t got = ti->tcpi_bytes_received, data;
		if (atomic_load(&c->peer->tx_reverted))
			data = less(got, peer_tokens);
		else if (c->role == ULS_CLIENT)
			data = 0; /* an attached server puts nothing but wake-ups on TCP */
		else if (atomic_load(&c->peer->switched))
			data = got < atomic_load(&c->peer->switch_pos) ? got
								 : atomic_load(&c->peer->switch_pos);
		else
			data = got;
		ti->tcpi_bytes_received = data + rx;
	}
}
