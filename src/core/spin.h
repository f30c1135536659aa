/* SPDX-License-Identifier: MIT */
/*
 * How long a waiting call spins before it sleeps in the kernel (the profile's budget),
 * and what spinning does when the cores are oversubscribed.
 *
 * Spinning pays only while the spinner has a core to itself. When the machine has more
 * runnable threads than cores (a pipeline of a few threads on these 2-core machines gets
 * there at once), a spinner takes CPU from the very threads that would produce what it
 * waits for. Two signs show it: the clock jumps between two spin steps (the spinner was
 * preempted) while the machine has more runnable threads than online CPUs (asked of
 * /proc/loadavg after the jump only: interrupts and the hypervisor preempt a spinner on
 * an idle machine too), or, with the latency profile's unlimited budget, a sched_yield()
 * that hands the core over comes back late (another thread ran). Either way the spinner
 * stops and sleeps until it is woken, and the thread does not spin again for a short
 * while (BACKOFF_NS), after which it tries once more.
 */
#ifndef ULS_SPIN_H
#define ULS_SPIN_H

#include <stdint.h>

struct uls_spin {
	uint64_t start;      /* when the wait began */
	uint64_t last;       /* the clock at the previous check */
	uint64_t last_yield; /* unlimited budget: when the core was last handed over */
	int calm;            /* this thread saw contention lately: do not spin */
};

void uls_spin_start(struct uls_spin *s);

/* One spin step (a pause); returns 1 to keep spinning, 0 to go to sleep. */
int uls_spin_more(struct uls_spin *s);

/* The same step for a wait whose caller sets its own end (CLOCK_MONOTONIC ns), whatever
 * the profile's budget: 0 past it, or when the machine is crowded as above. */
int uls_spin_until(struct uls_spin *s, uint64_t end_ns);

#endif
