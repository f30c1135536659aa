/* SPDX-License-Identifier: MIT */
#include "shortconn.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "config.h"
#include "../os/libc.h"

struct dest {
	uint8_t addr[16];
	uint16_t port;
	uint8_t family;
	uint8_t run;   /* short connections in a row, up to ULS_SHORT_RUN */
	uint32_t used; /* tick of the last look: the least recently used goes; 0: free */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct dest dests[ULS_SHORT_DESTS];
static uint32_t tick;

/* The key of dst; 0 when it is not an Internet address (never remembered). */
static int key_of(const struct sockaddr *dst, struct dest *k)
{
	memset(k, 0, sizeof(*k));
	if (dst->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)dst;
		memcpy(k->addr, &s->sin_addr, 4);
		k->port = s->sin_port;
	} else if (dst->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)dst;
		memcpy(k->addr, &s->sin6_addr, 16);
		k->port = s->sin6_port;
	} else {
		return 0;
	}
	k->family = (uint8_t)dst->sa_family;
	return 1;
}

/* The entry for k, or with make a fresh one in the least recently used place; under mu. */
static struct dest *find(const struct dest *k, int make)
{
	struct dest *victim = &dests[0];

	for (int i = 0; i < ULS_SHORT_DESTS; i++) {
		struct dest *d = &dests[i];
		if (d->used && d->family == k->family && d->port == k->port &&
		    memcmp(d->addr, k->addr, sizeof(d->addr)) == 0) {
			d->used = ++tick ? tick : ++tick;
			return d;
		}
		if (d->used < victim->used)
			victim = d;
	}
	if (!make)
		return NULL;
	*victim = *k;
	victim->used = ++tick ? tick : ++tick;
	return victim;
}

int uls_short_skip(const struct sockaddr *dst)
{
	struct dest k;
	int skip = 0;

	if (!uls_cfg.short_calls || !key_of(dst, &k) || pthread_mutex_trylock(&mu) != 0)
		return 0;
	struct dest *d = find(&k, 0);
	if (d)
		skip = d->run >= ULS_SHORT_RUN;
	pthread_mutex_unlock(&mu);
	return skip;
}

void uls_short_note(const struct sockaddr *dst, uint32_t units, uint64_t life_ns)
{
	struct dest k;
	int is_short = units < (uint32_t)uls_cfg.short_calls && life_ns < ULS_SHORT_LIFE_NS;

	if (!uls_cfg.short_calls || !key_of(dst, &k) || pthread_mutex_trylock(&mu) != 0)
		return;
	/* A long connection to a destination never seen needs no entry: it is the default. */
	struct dest *d = find(&k, is_short);
	if (d)
		d->run = is_short ? (uint8_t)(d->run < ULS_SHORT_RUN ? d->run + 1 : ULS_SHORT_RUN) : 0;
	pthread_mutex_unlock(&mu);
}

uint32_t uls_short_kernel_units(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	memset(&ti, 0, sizeof(ti));
	if (uls_libc.getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0 ||
	    len < offsetof(struct tcp_info, tcpi_data_segs_out) + sizeof(ti.tcpi_data_segs_out))
		return UINT32_MAX;
	/* The turns, as the segments tell them: an exchange is at least a segment each way. */
	uint64_t in = ti.tcpi_data_segs_in, out = ti.tcpi_data_segs_out;
	uint64_t u = 2 * (in < out ? in : out) + (in != out);
	u += (ti.tcpi_bytes_acked + ti.tcpi_bytes_received) >> ULS_SHORT_UNIT_SHIFT;
	return u > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)u;
}

void uls_short_atfork_child(void)
{
	pthread_mutex_init(&mu, NULL);
}

void uls_short_reset(void)
{
	pthread_mutex_lock(&mu);
	memset(dests, 0, sizeof(dests));
	tick = 0;
	pthread_mutex_unlock(&mu);
}
