/* SPDX-License-Identifier: MIT */
/*
 * Data streams between copies. Every buffer is one DATA frame; a consumer acknowledges a
 * buffer (one ACK frame back on the same connection) when it hands it to the filter, that
 * is when processing starts. The producer counts unacknowledged buffers per consumer copy
 * and never lets one exceed the stream's window: that is the demand-driven policy's
 * signal and every policy's back-pressure. ACKs are tiny and bounded by the window, so a
 * consumer writing one never blocks on a producer that is blocked writing data.
 */
#include "stream.h"
#include "wire.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

int ulf_out_init(struct ulf_out *o, int n, const int *fds, unsigned window, size_t block,
		 const struct ulf_policy_ops *policy)
{
	memset(o, 0, sizeof(*o));
	o->fds = calloc((size_t)n, sizeof(*o->fds));
	o->unacked = calloc((size_t)n, sizeof(*o->unacked));
	o->sent = calloc((size_t)n, sizeof(*o->sent));
	if (!o->fds || !o->unacked || !o->sent) {
		ulf_out_fini(o);
		return -ENOMEM;
	}
	memcpy(o->fds, fds, (size_t)n * sizeof(*fds));
	o->n = n;
	o->window = window ? window : 1;
	o->block = block;
	o->policy = policy ? policy : &ulf_policy_rr;
	return 0;
}

void ulf_out_fini(struct ulf_out *o)
{
	if (!o)
		return;
	free(o->fds);
	free(o->unacked);
	free(o->sent);
	memset(o, 0, sizeof(*o));
}

static int take_ack(struct ulf_out *o, int c)
{
	unsigned type;
	uint32_t len;
	uint64_t tag;
	int rc = ulf_wire_recv_hdr(o->fds[c], &type, &len, &tag);

	if (rc < 0)
		return rc;
	if (type != ULF_F_ACK || len != 0 || tag > o->unacked[c])
		return -EPROTO;
	o->unacked[c] -= (unsigned)tag;
	return 0;
}

int ulf_out_drain_acks(struct ulf_out *o, bool block)
{
	struct pollfd pf[64];
	int n = o->n < 64 ? o->n : 64, timeout = block ? -1 : 0;

	for (;;) {
		int ready, rc;

		for (int i = 0; i < n; i++)
			pf[i] = (struct pollfd){ .fd = o->fds[i], .events = POLLIN };
		ready = poll(pf, (nfds_t)n, timeout);
		if (ready < 0 && errno == EINTR)
			continue;
		if (ready < 0)
			return -errno;
		if (ready == 0)
			return 0;
		for (int i = 0; i < n; i++) {
			if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			rc = take_ack(o, i);
			if (rc < 0)
				return rc;
		}
		/* Once something arrived, take only what is already there. */
		timeout = 0;
	}
}

int ulf_out_pick(struct ulf_out *o, bool wait)
{
	int rc = ulf_out_drain_acks(o, false), c;

	while (rc == 0) {
		c = o->policy->pick(o->pstate, o->unacked, o->n, o->window);
		if (c >= o->n)
			return -EINVAL;
		if (c >= 0)
			return c;
		if (!wait)
			return -EAGAIN;
		rc = ulf_out_drain_acks(o, true);
	}
	return rc;
}

int ulf_out_send(struct ulf_out *o, int copy, const void *data, size_t len, uint64_t tag)
{
	int rc;

	if (len > o->block)
		return -EMSGSIZE;
	rc = ulf_wire_send(o->fds[copy], ULF_F_DATA, tag, data, (uint32_t)len);
	if (rc < 0)
		return rc;
	o->unacked[copy]++;
	o->sent[copy]++;
	return 0;
}

int ulf_out_write(struct ulf_out *o, const void *data, size_t len, uint64_t tag)
{
	int c = ulf_out_pick(o, true);

	return c < 0 ? c : ulf_out_send(o, c, data, len, tag);
}

int ulf_out_end(struct ulf_out *o)
{
	for (int i = 0; i < o->n; i++) {
		int rc = ulf_wire_send(o->fds[i], ULF_F_EOW, 0, NULL, 0);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int ulf_in_init(struct ulf_in *in, int m, const int *fds, size_t block)
{
	memset(in, 0, sizeof(*in));
	in->fds = calloc((size_t)m, sizeof(*in->fds));
	in->ended = calloc((size_t)m, sizeof(*in->ended));
	in->buf = malloc(block ? block : 1);
	if (!in->fds || !in->ended || !in->buf) {
		ulf_in_fini(in);
		return -ENOMEM;
	}
	memcpy(in->fds, fds, (size_t)m * sizeof(*fds));
	in->m = m;
	in->cap = block;
	return 0;
}

void ulf_in_fini(struct ulf_in *in)
{
	if (!in)
		return;
	free(in->fds);
	free(in->ended);
	free(in->buf);
	memset(in, 0, sizeof(*in));
}

void ulf_in_reset(struct ulf_in *in)
{
	memset(in->ended, 0, (size_t)in->m * sizeof(*in->ended));
	in->ended_count = 0;
}

/* The next producer copy with a frame waiting, scanning fairly from in->next. */
static int ready_producer(struct ulf_in *in)
{
	struct pollfd pf[64];
	int map[64], n = 0;

	if (in->m == 1)
		return 0;
	for (int k = 0; k < in->m && n < 64; k++) {
		int i = (in->next + k) % in->m;
		if (in->ended[i])
			continue;
		pf[n] = (struct pollfd){ .fd = in->fds[i], .events = POLLIN };
		map[n++] = i;
	}
	for (;;) {
		int r = poll(pf, (nfds_t)n, -1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		for (int k = 0; k < n; k++)
			if (pf[k].revents)
				return map[k];
	}
}

int ulf_in_read(struct ulf_in *in, const void **data, size_t *len, uint64_t *tag)
{
	while (in->ended_count < in->m) {
		unsigned type;
		uint32_t plen;
		int i = ready_producer(in), rc;

		if (i < 0)
			return i;
		rc = ulf_wire_recv_hdr(in->fds[i], &type, &plen, tag);
		if (rc < 0)
			return rc;
		if (type == ULF_F_EOW && plen == 0) {
			in->ended[i] = true;
			in->ended_count++;
			continue;
		}
		if (type != ULF_F_DATA || plen > in->cap)
			return -EPROTO;
		rc = ulf_read_full(in->fds[i], in->buf, plen);
		if (rc == 0)
			rc = ulf_wire_send(in->fds[i], ULF_F_ACK, 1, NULL, 0);
		if (rc < 0)
			return rc;
		in->next = (i + 1) % in->m;
		*data = in->buf;
		*len = plen;
		return 1;
	}
	return 0;
}
