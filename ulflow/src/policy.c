/* SPDX-License-Identifier: MIT */
/* Distribution policies among transparent copies, and the registry of the application's. */
#include "stream.h"

#include <errno.h>
#include <string.h>

#define MAX_POLICIES 16

/* Round-robin: the copies in turn; waits for the one whose turn it is. */
static int rr_pick(void *state, const unsigned *unacked, int copies, unsigned window)
{
	unsigned *next = state;
	int c = (int)(*next % (unsigned)copies);

	if (unacked[c] >= window)
		return -1;
	*next = (unsigned)(c + 1);
	return c;
}

/*
 * Demand-driven: the copy with the fewest unacknowledged buffers. Ties go to the copy
 * after the last one chosen, so equal consumers share equally.
 */
static int dd_pick(void *state, const unsigned *unacked, int copies, unsigned window)
{
	unsigned *last = state;
	int best = -1;

	for (int i = 1; i <= copies; i++) {
		int c = (int)((*last + (unsigned)i) % (unsigned)copies);
		if (unacked[c] < window && (best < 0 || unacked[c] < unacked[best]))
			best = c;
	}
	if (best >= 0)
		*last = (unsigned)best;
	return best;
}

const struct ulf_policy_ops ulf_policy_rr = { .name = "rr", .pick = rr_pick };
const struct ulf_policy_ops ulf_policy_dd = { .name = "dd", .pick = dd_pick };

static const struct ulf_policy_ops *registered[MAX_POLICIES];
static int nregistered;

int ulf_register_policy(const struct ulf_policy_ops *ops)
{
	if (!ops || !ops->name || !ops->pick)
		return -EINVAL;
	if (ulf_policy_find(ops->name))
		return -EEXIST;
	if (nregistered == MAX_POLICIES)
		return -ENOSPC;
	registered[nregistered++] = ops;
	return 0;
}

const struct ulf_policy_ops *ulf_policy_find(const char *name)
{
	if (strcmp(name, "rr") == 0)
		return &ulf_policy_rr;
	if (strcmp(name, "dd") == 0)
		return &ulf_policy_dd;
	for (int i = 0; i < nregistered; i++)
		if (strcmp(registered[i]->name, name) == 0)
			return registered[i];
	return NULL;
}
