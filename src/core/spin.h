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
 * while (BACKOFF_NS, doubled each time contention comes back soon after), after which it
 * tries once more. And a bounded spin pays only when it buys something: each thread keeps
 * the share of its recent spins that ended with their event and the time they took, and
 * while those say that spinning costs more CPU than the sleeps it saves are worth (the
 * profile's budget for one) and the machine is crowded (most of the process's recent
 * looks, one thread at a time and at most every 5 ms, found more runnable threads than
 * CPUs, or a contention came within 10 ms), it lets its waits pass without spinning,
 * but for a 2 µs probe on one in 2, 4 .. 64 of them.
 */
#ifndef ULS_SPIN_H
#define ULS_SPIN_H

#include <stdint.h>

struct uls_spin {
	uint64_t start;      /* when the wait began */
	uint64_t last;       /* the clock at the previous check */
	uint64_t last_yield; /* unlimited budget: when the core was last handed over */
	int calm;            /* do not spin: contention lately, or spinning does not pay */
	int probe;           /* a short spin, to see whether spinning pays again */
};

/* A wait with the profile's budget begins (uls_spin_more): it may not spin at all, or
 * only briefly, when this thread's recent spins did not pay (spin.c, spin_pays). */
void uls_spin_start(struct uls_spin *s);
/* A wait whose caller sets its own end begins (uls_spin_until): it neither learns from
 * nor is held back by the outcome of the thread's other spins, only by contention. */
void uls_spin_start_fixed(struct uls_spin *s);

/* One spin step (a pause); returns 1 to keep spinning, 0 to go to sleep. */
int uls_spin_more(struct uls_spin *s);

/* The same step for a wait whose caller sets its own end (CLOCK_MONOTONIC ns), whatever
 * the profile's budget: 0 past it, or when the machine is crowded as above. */
int uls_spin_until(struct uls_spin *s, uint64_t end_ns);

/* This thread's learning, for the unit test: what the next waits will do. */
struct uls_spin_learned {
	uint64_t calm_until; /* no spinning before (contention) */
	uint64_t backoff_ns; /* the pause the next contention sets */
	uint32_t hits;       /* share of recent bounded spins that ended with their event, of 1024 */
	uint32_t spent_ns;   /* their average length */
	uint32_t skip;       /* waits still to pass without spinning */
	int pays;            /* spinning pays: hits * budget >= spent (of 1024) */
};
void uls_spin_learned(struct uls_spin_learned *out);
/* Forgets it (a new thread's state). */
void uls_spin_forget(void);
/* For the unit test: run-outs are judged as on a machine that is crowded (1) or not (0),
 * whatever /proc/loadavg says; -1 asks it again. */
void uls_spin_assume_crowded(int crowded);

#endif
