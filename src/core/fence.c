/* SPDX-License-Identifier: MIT */
#include "fence.h"
#include "../preload/libc.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

_Atomic int uls_fence_registered;

static long membarrier(int cmd)
{
	return uls_syscall(SYS_membarrier, cmd, 0, 0);
}

void uls_fence_init(void)
{
	long cmds = membarrier(MEMBARRIER_CMD_QUERY);
	int ok = cmds > 0 && (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
		 (cmds & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) &&
		 membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;

	atomic_store(&uls_fence_registered, ok);
}

int uls_fence_heavy(_Atomic unsigned *peer)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (!atomic_load_explicit(peer, memory_order_relaxed))
		return 1;
	if (membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0)
		return 1;
	/* From the peer's next publication on, it fences fully again. */
	atomic_store(peer, 0);
	atomic_thread_fence(memory_order_seq_cst);
	return 0;
}

int uls_fence_global(void)
{
	atomic_thread_fence(memory_order_seq_cst);
	return membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0;
}
