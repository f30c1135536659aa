/* SPDX-License-Identifier: MIT */
/* membarrier(2): a full memory barrier on every CPU, for the asymmetric fences (fence.h). */
#ifndef ULS_OS_MEMBARRIER_H
#define ULS_OS_MEMBARRIER_H

/* Registers for the global expedited command; 1 when it can be used from now on. */
int uls_membarrier_register(void);
/* The barrier itself; 0 when it ran, -1 and errno when it did not. */
int uls_membarrier_global(void);

#endif
