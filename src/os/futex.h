/* SPDX-License-Identifier: MIT */
/*
 * futex(2) on a 32-bit word, without FUTEX_PRIVATE_FLAG: the words live in segments that
 * other processes map, and their sleepers and wakers are in those processes.
 */
#ifndef ULS_OS_FUTEX_H
#define ULS_OS_FUTEX_H

#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>

#include "libc.h"

/* Sleeps while *word holds v, for at most *ts (NULL: no limit). -1 and errno as futex. */
static inline long uls_futex_wait(_Atomic uint32_t *word, uint32_t v, const struct timespec *ts)
{
	return uls_syscall(SYS_futex, word, FUTEX_WAIT, v, ts, NULL, 0);
}

/* Wakes up to n sleepers on word (INT_MAX: all). */
static inline long uls_futex_wake(_Atomic uint32_t *word, int n)
{
	return uls_syscall(SYS_futex, word, FUTEX_WAKE, n, NULL, NULL, 0);
}

#endif
