/* SPDX-License-Identifier: MIT */
/*
 * One copy's end of a logical stream. A producer copy holds a ulf_out over one
 * connection per consumer copy; a consumer copy holds a ulf_in over one connection per
 * producer copy. Both work on any connected stream descriptors (TCP in the runtime,
 * socketpairs in the unit tests).
 */
#ifndef ULF_STREAM_H
#define ULF_STREAM_H

#include "ulflow.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ULF_POLICY_STATE 64

struct ulf_out {
	int n;
	int *fds;
	unsigned *unacked; /* buffers sent and not yet acknowledged, per consumer copy */
	uint64_t *sent;	   /* buffers sent per consumer copy, over all UOWs */
	unsigned window;
	size_t block;
	const struct ulf_policy_ops *policy;
	unsigned char pstate[ULF_POLICY_STATE];
};

struct ulf_in {
	int m;
	int *fds;
	bool *ended; /* this producer copy's end-of-work marker arrived in this UOW */
	int ended_count;
	int next; /* where the next poll scan starts, so no producer starves */
	unsigned char *buf;
	size_t cap;
};

/* The policies the runtime knows: "rr", "dd", then the registered ones. */
const struct ulf_policy_ops *ulf_policy_find(const char *name);
extern const struct ulf_policy_ops ulf_policy_rr, ulf_policy_dd;

int ulf_out_init(struct ulf_out *o, int n, const int *fds, unsigned window, size_t block,
		 const struct ulf_policy_ops *policy);
void ulf_out_fini(struct ulf_out *o);
/* Takes the acknowledgements that arrived; waits for one when block is set. */
int ulf_out_drain_acks(struct ulf_out *o, bool block);
/* The consumer copy for the next buffer, or -EAGAIN (wait false) when the policy waits. */
int ulf_out_pick(struct ulf_out *o, bool wait);
int ulf_out_send(struct ulf_out *o, int copy, const void *data, size_t len, uint64_t tag);
int ulf_out_write(struct ulf_out *o, const void *data, size_t len, uint64_t tag);
/* The end-of-work marker to every consumer copy. */
int ulf_out_end(struct ulf_out *o);

int ulf_in_init(struct ulf_in *in, int m, const int *fds, size_t block);
void ulf_in_fini(struct ulf_in *in);
/* Starts a UOW: no marker seen yet. */
void ulf_in_reset(struct ulf_in *in);
/* 1: a buffer (acknowledged to its producer); 0: every marker arrived; or -errno. */
int ulf_in_read(struct ulf_in *in, const void **data, size_t *len, uint64_t *tag);

#endif
