/* SPDX-License-Identifier: MIT */
/*
 * What the kernel reports about a socket's bytes, made true for an accelerated
 * connection: zero-copy completions (a fast transport copies at once, so each MSG_ZEROCOPY
 * send completes as it returns, reported as the kernel reports a copied one). The byte
 * counters of TCP_INFO are the transport's (transport.h, tcp_info).
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
