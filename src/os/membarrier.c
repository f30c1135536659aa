/* SPDX-License-Identifier: MIT */
#include "membarrier.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>

#include "libc.h"

static long membarrier(int cmd)
{
	return uls_syscall(SYS_membarrier, cmd, 0, 0);
}

int uls_membarrier_register(void)
{
	long cmds = membarrier(MEMBARRIER_CMD_QUERY);

	return cmds > 0 && (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
	       (cmds & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) &&
	       membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
}

int uls_membarrier_global(void)
{
	return membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0 ? 0 : -1;
}
