/* SPDX-License-Identifier: MIT */
/*
 * Asymmetric store-load fences for the wake-up protocol (docs/protocol.md, section 5).
 *
 * A publisher (a producer moving tail, or a consumer moving head) stores its position and
 * then reads the peer's "I sleep" flag; a sleeper stores that flag and then re-reads the
 * position. Each needs a store-load fence. On x86 the publisher's fence on every message
 * costs more than the rest of a small send: it waits for the store to a line the peer is
 * reading. The sleeper is about to make a system call anyway, so it can pay instead:
 * membarrier(2) with MEMBARRIER_CMD_GLOBAL_EXPEDITED runs a full barrier on every CPU that
 * runs a thread of a registered process, which makes a compiler-only fence enough on the
 * publisher's side.
 *
 * But that system call on every sleep is a loss where sleeps are frequent and messages
 * few (a connection's first request, many connections in one epoll set, the efficient
 * profile). So the publisher asks for it only while it streams: a side sets its
 * `light_fence` flag (struct uls_side) after FENCE_STREAK publications in a row that
 * found the peer awake, with a full fence after the store, and clears it when it finds
 * the peer asleep. A sleeper stores its flag, fences fully, and calls membarrier only
 * when the peer's `light_fence` is set. Either the sleeper sees the flag, or the
 * publisher's later loads see the sleeper's flag (both sides fenced fully around the
 * flag), so no wake-up is lost. A process that could not register never sets the flag.
 */
#ifndef ULS_FENCE_H
#define ULS_FENCE_H

#include <stdatomic.h>

/* Publications in a row that found the peer awake before a side asks for light fences. */
#define ULS_FENCE_STREAK 64

/* 1 when this process is registered for MEMBARRIER_CMD_GLOBAL_EXPEDITED. */
extern _Atomic int uls_fence_registered;

/* Registers this process when the kernel allows it. Safe to call again (fork child). */
void uls_fence_init(void);

/* The publisher's half; *mine is its own side's light_fence flag. */
static inline void uls_fence_light(_Atomic unsigned *mine)
{
	if (atomic_load_explicit(mine, memory_order_acquire) &&
	    atomic_load_explicit(&uls_fence_registered, memory_order_relaxed))
		atomic_signal_fence(memory_order_seq_cst);
	else
		atomic_thread_fence(memory_order_seq_cst);
}

/*
 * The publisher learns whether the peer slept; *streak counts its publications in a row
 * that found the peer awake (process-local).
 */
static inline void uls_fence_adapt(_Atomic unsigned *mine, _Atomic unsigned *streak,
				   int peer_slept)
{
	unsigned n = atomic_load_explicit(streak, memory_order_relaxed);

	if (peer_slept) {
		if (n)
			atomic_store_explicit(streak, 0, memory_order_relaxed);
		if (atomic_load_explicit(mine, memory_order_relaxed))
			atomic_store_explicit(mine, 0, memory_order_relaxed);
		return;
	}
	if (n >= ULS_FENCE_STREAK)
		return;
	atomic_store_explicit(streak, n + 1, memory_order_relaxed);
	if (n + 1 == ULS_FENCE_STREAK &&
	    atomic_load_explicit(&uls_fence_registered, memory_order_relaxed)) {
		atomic_store(mine, 1);
		atomic_thread_fence(memory_order_seq_cst);
	}
}

/*
 * The sleeper's half, after it stored its flag: a full fence, then membarrier when the
 * peer's light_fence (*peer) is set. When membarrier fails, the peer's flag is cleared
 * and 0 returned: the caller must then bound its sleep, since the peer may have used a
 * light fence once more. Returns 1 otherwise.
 */
int uls_fence_heavy(_Atomic unsigned *peer);

/*
 * A full barrier on every CPU that runs a thread of a registered process, for a store-load
 * handshake whose other side uses a compiler barrier only. Returns 0 when membarrier failed.
 */
int uls_fence_global(void);

#endif
