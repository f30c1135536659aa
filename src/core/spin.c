/* SPDX-License-Identifier: MIT */
#include "spin.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "config.h"
#include "../os/cpu.h"
#include "../os/libc.h"

/* Unlimited spinning hands the core over this often. */
#define YIELD_EVERY_NS 50000u
/*
 * A gap this long between two steps, or a yield this slow: another thread had the core.
 * A step of an epoll wait (a user pass, now and then a system call) takes a few µs.
 */
#define PREEMPTED_NS 50000u
/*
 * After contention, this thread sleeps at once for this long before it spins again;
 * contention found again soon after such a pause ended doubles the next one, up to
 * BACKOFF_MAX_NS, so that a machine that stays crowded soon sees little spinning.
 */
#define BACKOFF_NS 2000000u
#define BACKOFF_MAX_NS 256000000u
/* Bounded spins in a row that ran their budget out before this thread stops spinning
 * on every wait, and the most waits it then lets pass between two tries. */
#define FAILS_BEFORE_SKIP 4u
#define SKIP_MAX 63u

/* Per thread: no spinning before this time (CLOCK_MONOTONIC ns). */
static __thread uint64_t calm_until;
/* The pause the next contention sets (calm_until is where the last one ended). */
static __thread uint64_t backoff_ns = BACKOFF_NS;
/* What spinning bought this thread lately: bounded spins in a row that ran out (the
 * event came only after the sleep), waits to let pass without spinning, and whether
 * the spin under way has ended in neither a run-out nor contention (then it ended with
 * its event, and the streak is over). */
static __thread uint32_t fails, skip;
static __thread int open_spin;
/* Looks at the machine's runnable threads at most this often, and a crowd seen (or a
 * contention) counts this long (crowded_lately); the unit test's answer, or -1. */
#define CROWD_LOOK_NS 1000000u
#define CROWD_KEEP_NS 1000000u
static __thread uint64_t crowd_look_at, crowd_seen_at;
static int crowd_forced = -1;

void uls_spin_start_fixed(struct uls_spin *s)
{
	s->start = uls_now_ns();
	s->last = s->start;
	s->last_yield = s->start;
	s->calm = s->start < calm_until;
}

void uls_spin_start(struct uls_spin *s)
{
	uls_spin_start_fixed(s);
	if (open_spin) { /* the last spin ended with its event */
		fails = 0;
		skip = 0;
	}
	if (!s->calm && skip) {
		skip--;
		s->calm = 1;
	}
	open_spin = !s->calm;
}

static int contended(uint64_t now)
{
	/* Contention again within one pause of the last one's end: the machine stays
	 * crowded. */
	if (now < calm_until + backoff_ns)
		backoff_ns = backoff_ns * 2 < BACKOFF_MAX_NS ? backoff_ns * 2 : BACKOFF_MAX_NS;
	else
		backoff_ns = BACKOFF_NS;
	calm_until = now + backoff_ns;
	crowd_seen_at = now;
	open_spin = 0;
	return 0;
}

static int machine_crowded(void);

void uls_spin_assume_crowded(int crowded)
{
	crowd_forced = crowded;
}

/*
 * Was the machine crowded lately (ran_out)? A thread looks at its runnable threads at
 * most once per CROWD_LOOK_NS, and a crowd it saw (or a contention) counts for
 * CROWD_KEEP_NS: the count is of one instant, and a crowded machine has quiet instants.
 */
static int crowded_lately(uint64_t now)
{
	if (crowd_forced >= 0)
		return crowd_forced;
	if (!crowd_look_at || now - crowd_look_at >= CROWD_LOOK_NS) {
		crowd_look_at = now;
		if (machine_crowded())
			crowd_seen_at = now;
	}
	return crowd_seen_at && now - crowd_seen_at < CROWD_KEEP_NS;
}

/*
 * A bounded spin ran its budget out: the event it waits for comes later than a spin
 * lasts. Where the machine has more runnable threads than CPUs, a core spinning in vain
 * is a core the producer of that event may need: after a few such spins in a row the
 * thread spins on one wait in 2, 4 .. 64 only, and every wait again once one of those
 * spins ends with its event. Where it has not, the spin cost no one anything and counts
 * for nothing: a ping-pong whose round trip is near the budget (the fabric's, 13 to 20 µs
 * here) would otherwise run a few out, stop spinning, and from then on find its peer
 * asleep too, every spin running out (8 µs to 58 µs, balanced profile, tcp provider).
 */
static int ran_out(uint64_t now)
{
	open_spin = 0;
	if (!crowded_lately(now))
		return 0;
	if (++fails >= FAILS_BEFORE_SKIP) {
		uint32_t k = fails - FAILS_BEFORE_SKIP;
		skip = k >= 6 ? SKIP_MAX : 1u << k;
	}
	return 0;
}

/*
 * More runnable threads on the machine than online CPUs, now? The fourth field of
 * /proc/loadavg counts the runnable ones (this thread included). A jump of the clock
 * alone does not say who had the core: an interrupt's softirq, a kernel worker or the
 * hypervisor (steal) take it from a spinner now and then on an idle machine too, and
 * sleeping then only adds a wake-up to the next message (on these 2-vCPU VMs about one
 * jump in 20 ms: a 64-byte ping-pong between two pinned processes slept in 2% of its
 * waits). Asked only after a jump, so a few system calls at most once per 50 µs of
 * spinning; 1 (crowded, the safe answer) when the file cannot be read.
 */
static int machine_crowded(void)
{
	static _Atomic long cpus;
	char buf[128];
	int err = errno; /* the caller's stays */
	long n = atomic_load_explicit(&cpus, memory_order_relaxed);

	if (n <= 0) {
		n = sysconf(_SC_NPROCESSORS_ONLN);
		errno = err;
		if (n <= 0)
			return 1;
		atomic_store_explicit(&cpus, n, memory_order_relaxed);
	}
	/* Raw calls: read and close are the library's own interposed names. */
	long fd = uls_syscall(SYS_openat, AT_FDCWD, "/proc/loadavg", O_RDONLY | O_CLOEXEC);
	long len = fd < 0 ? -1 : uls_syscall(SYS_read, (int)fd, buf, sizeof(buf) - 1);
	if (fd >= 0)
		uls_syscall(SYS_close, (int)fd);
	errno = err;
	if (len <= 0)
		return 1;
	buf[len] = 0;
	/* "0.52 0.58 0.59 2/345 12345": runnable/threads after the third space. */
	const char *p = buf;
	for (int spaces = 0; *p && spaces < 3; p++)
		spaces += *p == ' ';
	if (*p < '0' || *p > '9')
		return 1;
	char *end;
	long running = strtol(p, &end, 10);
	errno = err;
	return *end != '/' || running > n;
}

/* One pause and a look at the clock: the time, or 0 when the spinner was preempted on a
 * crowded machine (and the thread backs off). */
static uint64_t spin_step(struct uls_spin *s)
{
	uls_cpu_relax();
	/* Every step reads the clock (vDSO, tens of ns): a gap must mean preemption, not a
	 * caller whose steps are slow. */
	uint64_t now = uls_now_ns();
	if (now - s->last > PREEMPTED_NS) {
		if (machine_crowded())
			return contended(now);
		now = uls_now_ns(); /* the look itself is not a gap */
	}
	s->last = now;
	return now;
}

int uls_spin_until(struct uls_spin *s, uint64_t end_ns)
{
	if (s->calm)
		return 0;
	uint64_t now = spin_step(s);
	return now && now < end_ns;
}

int uls_spin_more(struct uls_spin *s)
{
	int64_t budget = uls_cfg.spin_ns;

	if (budget == 0 || s->calm)
		return 0;
	uint64_t now = spin_step(s);
	if (!now)
		return 0;
	if (budget > 0)
		return now - s->start < (uint64_t)budget ? 1 : ran_out(now);
	if (now - s->last_yield < YIELD_EVERY_NS)
		return 1;
	sched_yield();
	s->last_yield = s->last = uls_now_ns();
	if (s->last - now > PREEMPTED_NS)
		return contended(s->last);
	return 1;
}

void uls_spin_learned(struct uls_spin_learned *out)
{
	*out = (struct uls_spin_learned){.calm_until = calm_until, .backoff_ns = backoff_ns,
					 .fails = fails, .skip = skip};
}

void uls_spin_forget(void)
{
	calm_until = 0;
	backoff_ns = BACKOFF_NS;
	fails = skip = 0;
	open_spin = 0;
	crowd_look_at = crowd_seen_at = 0;
}
