/* SPDX-License-Identifier: MIT */
#include "shmlock.h"

#include <errno.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "../../core/config.h"
#include "../../os/cpu.h"
#include "../../os/futex.h"
#include "../../os/libc.h"

/* 0: free, 1: held, 2: held with waiters. */

static uint32_t self_pid(void)
{
	return (uint32_t)uls_pid();
}

int uls_shmlock_try(_Atomic uint32_t *word, _Atomic uint32_t *owner)
{
	uint32_t zero = 0;

	/* Acquire: the holder sees what the previous holder wrote before releasing. */
	if (atomic_compare_exchange_strong_explicit(word, &zero, 1, memory_order_acquire,
						    memory_order_relaxed)) {
		atomic_store_explicit(owner, self_pid(), memory_order_relaxed);
		return 1;
	}
	return 0;
}

static int owner_dead(_Atomic uint32_t *owner)
{
	uint32_t pid = atomic_load_explicit(owner, memory_order_relaxed);

	return pid != 0 && pid != self_pid() && kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

/*
 * Takes the lock, sleeping on the futex while it is held; gives up at deadline (a
 * uls_now_ns time, UINT64_MAX: never) and returns 0 then. The word is left at 2 on a
 * give-up: the holder's release only wakes a sleeper that is no longer there.
 */
int uls_shmlock_acquire_until(_Atomic uint32_t *word, _Atomic uint32_t *owner,
			      uint64_t deadline)
{
	uint32_t c;

	for (int i = 0; i < 100; i++) {
		if (uls_shmlock_try(word, owner))
			return 1;
		uls_cpu_relax();
	}
	for (;;) {
		c = atomic_exchange_explicit(word, 2, memory_order_acquire);
		if (c == 0)
			break;
		uint64_t now = uls_now_ns(), left = 100u * 1000 * 1000;
		if (now >= deadline)
			return 0;
		if (deadline - now < left)
			left = deadline - now;
		/* The 100 ms slices only serve to notice a holder that died. */
		struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)left};
		if (uls_futex_wait(word, 2, &ts) < 0 && errno == ETIMEDOUT && owner_dead(owner)) {
			atomic_store_explicit(word, 2, memory_order_relaxed);
			break;
		}
	}
	atomic_store_explicit(owner, self_pid(), memory_order_relaxed);
	return 1;
}

void uls_shmlock_acquire(_Atomic uint32_t *word, _Atomic uint32_t *owner)
{
	(void)uls_shmlock_acquire_until(word, owner, UINT64_MAX);
}

void uls_shmlock_release(_Atomic uint32_t *word, _Atomic uint32_t *owner)
{
	atomic_store_explicit(owner, 0, memory_order_relaxed);
	/* Release: the next holder sees everything written under the lock. */
	if (atomic_exchange_explicit(word, 0, memory_order_release) == 2)
		uls_futex_wake(word, 1);
}
