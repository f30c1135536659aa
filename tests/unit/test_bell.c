/* SPDX-License-Identifier: MIT */
/*
 * Bells (core/bell.h): a ring is never lost to a clear that runs at the same time.
 *
 * A sleeper clears its bell when the kernel says it rang, while another thread may be
 * ringing it again for a wake-up byte it just consumed. Whatever the interleaving, once
 * both are done the bell must still be able to ring: the next ring makes its pipe
 * readable. A clear that forgot the ring's "pending" mark but kept its count, or kept
 * the mark after reading the count away, would swallow every later ring, and the
 * sleeper it was meant for would sleep until its timeout (a JVM's "Read timed out").
 *
 * Each round starts from a bell that rang; the main thread clears it while a second
 * thread rings it, both released at once with a random stagger; then the main thread
 * rings once more and the pipe must be readable.
 */
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#include "check.h"
#include "core/bell.h"
#include "os/libc.h"

#define ROUNDS 100000

static struct uls_bells regs;
static _Atomic unsigned go, finished;
static _Atomic int quit;
static uint64_t seed = 0x62656c6cull;

/* Spinning, not a pthread barrier: both threads leave it within a few cycles. */
static void wait_for(_Atomic unsigned *word, unsigned value)
{
	for (unsigned spins = 0; atomic_load(word) != value; spins++)
		if ((spins & 1023) == 1023)
			sched_yield();
}

/* Up to about a system call's length, so that the two calls overlap every way. */
static void stagger(uint64_t *rng)
{
	for (unsigned i = (unsigned)check_rand_below(rng, 2000); i; i--)
		__asm__ volatile("" ::: "memory");
}

static void *ringer(void *arg)
{
	uint64_t rng = seed ^ 0x5eed;

	(void)arg;
	for (unsigned round = 1;; round++) {
		wait_for(&go, round);
		if (atomic_load(&quit))
			return NULL;
		stagger(&rng);
		uls_bells_ring_others(&regs);
		atomic_store(&finished, round);
	}
}

static int readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

int main(void)
{
	pthread_t t;
	uint64_t rng = seed;
	int bell, fd;

	uls_libc_init();
	bell = uls_bell_get();
	CHECK_INT(bell, >=, 0);
	fd = uls_bell_fd(bell);
	CHECK_INT(fd, >=, 0);
	uls_bell_begin(bell);
	CHECK(uls_bells_add(&regs, bell));
	CHECK_INT(pthread_create(&t, NULL, ringer, NULL), ==, 0);

	for (int round = 0; round < ROUNDS; round++) {
		check_context("round %d", round);
		/* The sleeper's bell rang: the kernel reported it, the sleeper clears it... */
		uls_bells_ring_others(&regs);
		CHECK(readable(fd));
		atomic_store(&go, (unsigned)round + 1);
		stagger(&rng);
		uls_bell_clear(bell); /* ...while the other thread rings it again */
		wait_for(&finished, (unsigned)round + 1);
		/* Whichever came first, a ring now is heard. */
		uls_bells_ring_others(&regs);
		CHECK(readable(fd));
		uls_bell_clear(bell);
		CHECK(!readable(fd));
	}
	atomic_store(&quit, 1);
	atomic_store(&go, ROUNDS + 1);
	pthread_join(t, NULL);
	uls_bell_put(bell);
	return CHECK_PASS;
}
