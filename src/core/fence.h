/* SPDX-License-Identifier: MIT */
/*
 * Asymmetric store-load fences for the wake-up protocol (docs/protocol.md, section 5).
 *
 * A producer publishes a position and then reads the peer's "I sleep" flag; a sleeper sets
 * that flag and then re-reads the position. Each needs a store-load fence, and on x86 the
 * producer's fence per message costs more than the rest of a small send: it waits for
 * the store to a line the consumer is reading. The sleeper, on the other hand, is about
 * to make a system call anyway. So the sleeper pays instead: membarrier(2) with
 * MEMBARRIER_CMD_GLOBAL_EXPEDITED runs a full barrier on every CPU that is running a
 * thread of a registered process, which makes the producer's compiler-only fence enough.
 *
 * The light fence is only correct when both halves hold: this process is registered (so
 * the peer's membarrier reaches its threads), and the peer's sleepers promised to use
 * membarrier (struct uls_side.heavy_fence, published before the side's first sleep).
 * Anything else gets the full fence on both sides.
 */
#ifndef ULS_FENCE_H
#define ULS_FENCE_H

#include <stdatomic.h>

/* 1 when this process is registered for MEMBARRIER_CMD_GLOBAL_EXPEDITED. */
extern _Atomic int uls_fence_registered;

/* Registers this process when the kernel allows it. Safe to call again (fork child). */
void uls_fence_init(void);

/* Whether this process can promise membarrier-backed sleeps on a side it publishes. */
static inline int uls_fence_can_promise(void)
{
	return atomic_load_explicit(&uls_fence_registered, memory_order_relaxed);
}

/* The producer's half: peer_heavy is the peer side's published promise. */
static inline void uls_fence_light(unsigned peer_heavy)
{
	if (peer_heavy && atomic_load_explicit(&uls_fence_registered, memory_order_relaxed))
		atomic_signal_fence(memory_order_seq_cst);
	else
		atomic_thread_fence(memory_order_seq_cst);
}

/*
 * The sleeper's half, after it stored its flag: *promise is its own side's published
 * promise. When membarrier fails, the promise is withdrawn and 0 returned: the caller
 * must then bound its sleep, since a producer that read the old promise may have used the
 * light fence once more. Returns 1 otherwise.
 */
int uls_fence_heavy(_Atomic unsigned *promise);

#endif
