/* SPDX-License-Identifier: MIT */
/* Registered slot pools (pool.h). */
#include "pool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <rdma/fi_domain.h>

#include "../../os/guard.h"
#include "lib.h"

#define POOL_MIN (64u << 10)
#define POOL_MAX (64u << 20)

size_t uls_fab_pool_budget(int rx)
{
	struct rlimit rl;
	size_t b = POOL_MAX;

	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		b = (size_t)(rl.rlim_cur / (rx ? 4 : 8));
	return b < POOL_MIN ? POOL_MIN : b > POOL_MAX ? POOL_MAX : b;
}

/* Registration where the provider needs it; 0 or a negative FI_ errno. */
static int reg(struct uls_fab_pool *p, struct uls_fab_ep *e, uint64_t access)
{
	uint64_t mode = e->info->domain_attr->mr_mode;
	int r;

	if (!(mode & FI_MR_LOCAL))
		return 0;
	r = fi_mr_reg(e->domain, p->base, p->len, access, 0, 0, 0, &p->mr, NULL);
	if (r)
		return r;
	if (mode & FI_MR_ENDPOINT) {
		if ((r = fi_mr_bind(p->mr, &e->ep->fid, 0)) || (r = fi_mr_enable(p->mr)))
			return r;
	}
	p->desc = fi_mr_desc(p->mr);
	return 0;
}

int uls_fab_pool_open(struct uls_fab_pool *p, struct uls_fab_ep *e, size_t slot_size,
		      uint32_t nslots, uint64_t access, char *why, size_t wlen)
{
	memset(p, 0, sizeof(*p));
	if (slot_size < 64 || slot_size > (64u << 10) || (slot_size & (slot_size - 1)) ||
	    nslots == 0 || (uint64_t)slot_size * nslots > POOL_MAX) {
		snprintf(why, wlen, "bad pool geometry: %zu slots of %zu bytes", (size_t)nslots,
			 slot_size);
		return -1;
	}
	p->slot_size = slot_size;
	p->nslots = nslots;
	p->len = slot_size * nslots;
	p->base = mmap(NULL, p->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	p->free = malloc(nslots * sizeof(*p->free));
	p->taken = calloc(nslots, 1);
	if (p->base == MAP_FAILED || !p->free || !p->taken) {
		if (p->base == MAP_FAILED)
			p->base = NULL;
		snprintf(why, wlen, "no memory for a pool of %zu bytes", p->len);
		uls_fab_pool_close(p);
		return -1;
	}
	/* A forked child must not share the pages a provider may have pinned. */
	madvise(p->base, p->len, MADV_DONTFORK);
	for (uint32_t i = 0; i < nslots; i++)
		p->free[i] = nslots - 1 - i; /* slot 0 on top */
	p->nfree = nslots;
	uls_inside_begin();
	int r = reg(p, e, access);
	uls_inside_end();
	if (r) {
		snprintf(why, wlen, "cannot register a pool of %zu bytes: %s", p->len,
			 uls_fab_err(r));
		uls_fab_pool_close(p);
		return -1;
	}
	return 0;
}

void uls_fab_pool_close(struct uls_fab_pool *p)
{
	if (p->mr) {
		uls_inside_begin();
		fi_close(&p->mr->fid);
		uls_inside_end();
	}
	if (p->base)
		munmap(p->base, p->len);
	free(p->free);
	free(p->taken);
	memset(p, 0, sizeof(*p));
}

void *uls_fab_pool_get(struct uls_fab_pool *p, uint32_t *idx)
{
	if (p->nfree == 0)
		return NULL;
	*idx = p->free[--p->nfree];
	p->taken[*idx] = 1;
	return uls_fab_slot(p, *idx);
}

int uls_fab_pool_put(struct uls_fab_pool *p, uint32_t idx)
{
	if (idx >= p->nslots || !p->taken[idx])
		return -1;
	p->taken[idx] = 0;
	p->free[p->nfree++] = idx;
	return 0;
}

int64_t uls_fab_pool_index(const struct uls_fab_pool *p, const void *a)
{
	const uint8_t *b = a;

	if (!p->base || b < p->base || b >= p->base + p->len)
		return -1;
	size_t off = (size_t)(b - p->base);
	return off % p->slot_size ? -1 : (int64_t)(off / p->slot_size);
}
