/* SPDX-License-Identifier: MIT */
/*
 * What a thread's spinning learns (core/spin.h): on a crowded machine, bounded spins
 * that keep running their budget out stop paying (after 6 in a row from a fresh start),
 * and the thread then spins only for a short probe on one wait in 2, then 4, 8 .. 64;
 * probes that end with their event bring back spinning, with the whole budget, on every
 * wait. On a machine with a CPU to spare, run-outs change nothing.
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
 * wait pass; *probe says whether it was a probe. */
static int wait_runs_out_probe(int *probe)
{
	struct uls_spin s;

	uls_spin_start(&s);
	*probe = s.probe;
	while (uls_spin_more(&s))
		;
	return !s.calm;
}

static int wait_runs_out(void)
{
	int probe;

	return wait_runs_out_probe(&probe);
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
	int probe;

	uls_spin_forget();
	uls_spin_learned(&l);
	CHECK_INT(l.pays, ==, 1);
	/* With a 200 µs budget, six run-outs from a fresh start: 461 of 1024 hits against
	 * about 110 µs spent a spin, which is more than 461/1024 of the budget. After five,
	 * 526 hits pay for up to 102.7 µs, and 97.4 µs were spent if each run-out took its
	 * 200 µs; one that ran over (an interrupt, another task on the CPU at its last step)
	 * could tip that, so the attempt starts again when the average is 4 µs over. */
	uint64_t ideal = 0;
	for (int i = 0; i < 6; i++) {
		uls_spin_learned(&l);
		CHECK_INT(l.pays, ==, 1);
		EXPECT(wait_runs_out_probe(&probe), 1);
		CHECK_INT(probe, ==, 0);
		ideal = ideal - (ideal >> 3) + (200000 >> 3);
		uls_spin_learned(&l);
		if (l.spent_ns > ideal + 4000)
			return 0;
	}
	uls_spin_learned(&l);
	CHECK_INT(l.pays, ==, 0);
	CHECK_INT(l.hits, ==, 461);
	/* Probes: one wait in 2, 4 .. 64, each a short spin that runs out. */
	for (uint32_t gap = 1; gap <= 63; gap = gap * 2 + 1) {
		EXPECT(wait_runs_out_probe(&probe), 1);
		CHECK_INT(probe, ==, 1);
		uls_spin_learned(&l);
		CHECK_INT(l.skip, ==, gap);
		CHECK_INT(l.pays, ==, 0);
		for (uint32_t i = 0; i < gap; i++)
			EXPECT(wait_succeeds(), 0);
	}
	EXPECT(wait_runs_out_probe(&probe), 1); /* the gap stays at 64 */
	uls_spin_learned(&l);
	CHECK_INT(l.skip, ==, 63);
	/* Probes whose event comes at once: spinning pays again (a probe's hit counts at the
	 * next wait's start, which then spins), and then every wait spins with the whole
	 * budget. */
	int probes = 0, waits = 0;
	for (;;) {
		int spun = wait_succeeds();
		if (contended())
			return 0;
		uls_spin_learned(&l);
		if (l.pays)
			break;
		probes += spun;
		CHECK_INT(++waits, <, 1000);
	}
	CHECK_INT(probes, >=, 1);
	CHECK_INT(probes, <=, 3);
	for (int i = 0; i < 3; i++)
		EXPECT(wait_succeeds(), 1);
	uls_spin_learned(&l);
	CHECK_INT(l.skip, ==, 0);
	EXPECT(wait_runs_out_probe(&probe), 1); /* the whole budget, not a probe */
	CHECK_INT(probe, ==, 0);
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
	CHECK_INT(l.hits, ==, 1024);
	CHECK_INT(l.pays, ==, 1);
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
