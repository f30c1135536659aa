/* SPDX-License-Identifier: MIT */
/*
 * A pool of fixed-size message slots for one endpoint (docs/protocol.md 9.2 and 9.6):
 * one mapping, registered once with the domain where the provider needs its local
 * buffers registered (FI_MR_LOCAL: verbs, efa), carved into slots of slot_size bytes.
 * Sends copy into a slot and receives are posted into slots, so no program buffer is
 * ever registered. A process's pools together stay within what RLIMIT_MEMLOCK allows,
 * since hardware providers pin what they register.
 *
 * The free slots are a stack of indices; the caller serialises (the endpoint's lock).
 */
#ifndef ULS_FAB_POOL_H
#define ULS_FAB_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "endpoint.h"

struct uls_fab_pool {
	uint8_t *base; /* the mapping, page-aligned */
	size_t len;
	size_t slot_size; /* a power of two */
	uint32_t nslots;
	uint32_t nfree;
	uint32_t *free; /* indices of the free slots, nfree of them at the bottom */
	uint8_t *taken; /* per slot: 1 while given out (a double put is refused) */
	struct fid_mr *mr; /* the registration, NULL where the provider needs none */
	void *desc;        /* its descriptor for sends and receives, or NULL */
};

/*
 * The bytes a process may give its receive pools (rx) or its send pools: a quarter and
 * an eighth of RLIMIT_MEMLOCK, at least 64 KiB and at most 64 MiB each.
 */
size_t uls_fab_pool_budget(int rx);

/*
 * Maps nslots slots of slot_size bytes (a power of two from 64 bytes to 64 KiB) and
 * registers them with e's domain for access (FI_SEND, FI_RECV) where e's provider needs
 * it. Returns 0, or -1 with why (wlen bytes); p is then empty.
 */
int uls_fab_pool_open(struct uls_fab_pool *p, struct uls_fab_ep *e, size_t slot_size,
		      uint32_t nslots, uint64_t access, char *why, size_t wlen);
void uls_fab_pool_close(struct uls_fab_pool *p);

/* A free slot (its index in *idx), or NULL when none is free. */
void *uls_fab_pool_get(struct uls_fab_pool *p, uint32_t *idx);
/* Gives slot idx back; an index that is not a taken slot of p is refused (-1). */
int uls_fab_pool_put(struct uls_fab_pool *p, uint32_t idx);

static inline void *uls_fab_slot(const struct uls_fab_pool *p, uint32_t idx)
{
	return p->base + (size_t)idx * p->slot_size;
}

/* The index of the slot that holds address a, or -1 when a is not a slot's start. */
int64_t uls_fab_pool_index(const struct uls_fab_pool *p, const void *a);

#endif
