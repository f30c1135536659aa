/* SPDX-License-Identifier: MIT */
#include "spin.h"

#include <sched.h>

#include "config.h"
#include "../os/cpu.h"

/* Unlimited spinning hands the core over this often. */
#define YIELD_EVERY_NS 50000u
/*
 * A gap this long between two steps, or a yield this slow: another thread had the core.
 * A step of an epoll wait (a user pass, now and then a system call) takes a few µs.
 */
#define PREEMPTED_NS 50000u
/* After contention, this thread sleeps at once for this long before it spins again. */
#define BACKOFF_NS 2000000u

/* Per thread: no spinning before this time (CLOCK_MONOTONIC ns). */
static __thread uint64_t calm_until;

void uls_spin_start(struct uls_spin *s)
{
	s->start = uls_now_ns();
	s->last = s->start;
	s->last_yield = s->start;
	s->calm = s->start < calm_until;
}

static int contended(uint64_t now)
{
	calm_until = now + BACKOFF_NS;
	return 0;
}

int uls_spin_more(struct uls_spin *s)
{
	int64_t budget = uls_cfg.spin_ns;

	if (budget == 0 || s->calm)
		return 0;
	uls_cpu_relax();
	/* Every step reads the clock (vDSO, tens of ns): a gap must mean preemption, not a
	 * caller whose steps are slow. */
	uint64_t now = uls_now_ns();
	if (now - s->last > PREEMPTED_NS)
		return contended(now);
	s->last = now;
	if (budget > 0)
		return now - s->start < (uint64_t)budget;
	if (now - s->last_yield < YIELD_EVERY_NS)
		return 1;
	sched_yield();
	s->last_yield = s->last = uls_now_ns();
	if (s->last - now > PREEMPTED_NS)
		return contended(s->last);
	return 1;
}
