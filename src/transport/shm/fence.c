/* SPDX-License-Identifier: MIT */
#include "fence.h"

#include "../../os/membarrier.h"

_Atomic int uls_fence_registered;

void uls_fence_init(void)
{
	atomic_store(&uls_fence_registered, uls_membarrier_register());
}

int uls_fence_heavy(_Atomic unsigned *peer)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (!atomic_load_explicit(peer, memory_order_relaxed))
		return 1;
	if (uls_membarrier_global() == 0)
		return 1;
	/* From the peer's next publication on, it fences fully again. */
	atomic_store(peer, 0);
	atomic_thread_fence(memory_order_seq_cst);
	return 0;
}

int uls_fence_global(void)
{
	atomic_thread_fence(memory_order_seq_cst);
	return uls_membarrier_global() == 0;
}
