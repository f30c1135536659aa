/* SPDX-License-Identifier: MIT */
/*
 * What a thread's spinning learns (core/spin.h): on a crowded machine, bounded spins
 * that keep running their budget out make the thread spin on fewer waits (after 4 in a
 * row, one wait in 2, then one in 3, 5, 9 .. 64), and one spin that ends with its event
 * (the caller stops before the budget) brings back spinning on every wait. On a machine
 * with a CPU to spare, run-outs change nothing.
 *
 * Contention (a preempted spinner on a machine with more runnable threads than CPUs) has
 * its own pause, which a busy test machine may cause at any step: an attempt that meets
 * one is started again, and the test is skipped if none of 200 ran without.
 */
#include <stdint.h>

#include "check.h"
#include "core/config.h"
#include "core/spin.h"

/* One wait that spins until its budget runs out: 1 when it spun, 0 when it let the
 * wait pass. */
static int wait_runs_out(void)
{
	struct uls_spin s;

	uls_spin_start(&s);
	while (uls_spin_more(&s))
		;
	return !s.calm;
}

/* One wait whose event comes during the spin: 1 when it spun. */
static int wait_succeeds(void)
{
	struct uls_spin s;

	uls_spin_start(&s);
	return uls_spin_more(&s);
}

static int contended(void)
{
	struct uls_spin_learned l;

	uls_spin_learned(&l);
	return l.calm_until != 0;
}

/* A wait's outcome is checked only where no contention came (which pauses all spinning
 * for a while): otherwise the attempt starts again. */
#define EXPECT(wait, want)                                                                  \
	do {                                                                               \
		int got_ = (wait);                                                         \
		if (contended())                                                           \
			return 0;                                                          \
		CHECK_INT(got_, ==, (want));                                               \
	} while (0)

/* One attempt: 1 when it ran without contention (and checked everything), 0 if not. */
static int attempt(void)
{
	struct uls_spin_learned l;

	uls_spin_forget();
	for (int i = 0; i < 4; i++)
		EXPECT(wait_runs_out(), 1);
	uls_spin_learned(&l);
	CHECK_INT(l.fails, ==, 4);
	CHECK_INT(l.skip, ==, 1);
	EXPECT(wait_succeeds(), 0); /* the wait let pass */
	EXPECT(wait_runs_out(), 1); /* the next spins, and runs out: 5 in a row */
	uls_spin_learned(&l);
	CHECK_INT(l.fails, ==, 5);
	CHECK_INT(l.skip, ==, 2);
	EXPECT(wait_succeeds(), 0);
	EXPECT(wait_succeeds(), 0);
	/* Doubling to the cap: 4 .. 64 waits apart. */
	for (uint32_t want = 4; want <= 64; want *= 2) {
		EXPECT(wait_runs_out(), 1);
		uls_spin_learned(&l);
		CHECK_INT(l.skip, ==, want < 64 ? want : 63);
		for (uint32_t i = 0; i < l.skip; i++)
			EXPECT(wait_succeeds(), 0);
	}
	/* A spin that ends with its event: every wait spins again. */
	EXPECT(wait_succeeds(), 1);
	EXPECT(wait_succeeds(), 1);
	uls_spin_learned(&l);
	CHECK_INT(l.fails, ==, 0);
	CHECK_INT(l.skip, ==, 0);
	return 1;
}

/* On a machine with a CPU to spare, run-outs teach nothing: every wait spins. */
static int attempt_uncrowded(void)
{
	struct uls_spin_learned l;

	uls_spin_forget();
	for (int i = 0; i < 10; i++)
		EXPECT(wait_runs_out(), 1);
	uls_spin_learned(&l);
	CHECK_INT(l.fails, ==, 0);
	CHECK_INT(l.skip, ==, 0);
	return 1;
}

int main(void)
{
	int done = 0;

	uls_config_load();
	uls_cfg.spin_ns = 200000; /* 200 µs: a first step is well inside it */
	uls_spin_assume_crowded(1);
	for (int i = 0; i < 200 && !done; i++)
		done = attempt();
	uls_spin_assume_crowded(0);
	for (int i = 0; i < 200 && done == 1; i++)
		if (attempt_uncrowded())
			done = 2;
	return done == 2 ? CHECK_PASS : CHECK_SKIPPED;
}
