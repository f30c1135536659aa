/* SPDX-License-Identifier: MIT */
/*
 * A futex lock in shared memory, taken by the threads and processes of one side of a
 * connection. The holder's pid is recorded so that a lock left by a killed process is
 * taken over instead of waited on forever.
 */
#ifndef ULS_SHMLOCK_H
#define ULS_SHMLOCK_H

#include <stdatomic.h>
#include <stdint.h>

void uls_shmlock_acquire(_Atomic uint32_t *word, _Atomic uint32_t *owner);
int uls_shmlock_acquire_until(_Atomic uint32_t *word, _Atomic uint32_t *owner,
			      uint64_t deadline);
int uls_shmlock_try(_Atomic uint32_t *word, _Atomic uint32_t *owner);
void uls_shmlock_release(_Atomic uint32_t *word, _Atomic uint32_t *owner);

#endif
