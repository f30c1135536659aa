/* SPDX-License-Identifier: MIT */
#include "spin.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
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
/* The averages below: each new spin weighs 1/8 (AVG_SHIFT), hits in units of HIT_ONE. */
#define AVG_SHIFT 3
#define HIT_ONE 1024u
/*
 * While spinning does not pay on a crowded machine, a wait in 2, then 4 .. 64 (each such
 * probe after which it still does not pay doubles the gap) spins this long to see whether
 * the events come sooner now: about what a sleep and its wake-up cost where the sleeper
 * shares its core (design.md, "What a wake-up costs": 1.4 to 2 µs).
 */
#define PROBE_NS 2000u
#define SKIP_MAX 63u

/* Per thread: no spinning before this time (CLOCK_MONOTONIC ns). */
static __thread uint64_t calm_until;
/* The pause the next contention sets (calm_until is where the last one ended). */
static __thread uint64_t backoff_ns = BACKOFF_NS;
/*
 * What this thread's bounded spins bought lately: the share of them that ended with
 * their event (hits, of HIT_ONE) and the time they took (spent_ns; a run-out's is its
 * whole budget), both averaged over the last few; a run-out counts only on a crowded
 * machine (ran_out). The profile's budget is what it deems a sleep avoided to be worth,
 * so spinning pays while hits * budget >= spent_ns: spins that end with their event
 * soon and seldom run out. Where it does not and the machine is crowded, the thread lets
 * waits pass without spinning (skip), and probes (PROBE_NS) now and then.
 */
static __thread uint32_t hits = HIT_ONE, spent_ns, skip, gap;
/* The spin under way: started at spin_began, last looked at the clock at spin_last; it
 * is open until it ends in a run-out or contention (then it ended with its event). */
static __thread uint64_t spin_began, spin_last;
static __thread int open_spin;
/*
 * The process looks at the machine at most this often, and keeps the share of its recent
 * looks that found it crowded (of HIT_ONE, each look weighing 1/8); a contention counts
 * this long (crowded_lately). The unit test's answer, or -1.
 */
#define CROWD_LOOK_NS 5000000u
#define CROWD_KEEP_NS 10000000u
static _Atomic uint64_t crowd_look_at, crowd_seen_at;
static _Atomic uint32_t crowd_share;
static int crowd_forced = -1;

void uls_spin_start_fixed(struct uls_spin *s)
{
	s->start = uls_now_ns();
	s->last = s->start;
	s->last_yield = s->start;
	s->calm = s->start < calm_until;
	s->probe = 0;
}

static int crowded_lately(uint64_t now);

/* One bounded spin's outcome into the averages: hit or not, after spent ns. */
static void learn(int hit, uint64_t spent)
{
	uint32_t h = hit ? HIT_ONE : 0;
	uint32_t t = spent < UINT32_MAX ? (uint32_t)spent : UINT32_MAX;

	hits = hits - (hits >> AVG_SHIFT) + (h >> AVG_SHIFT);
	spent_ns = spent_ns - (spent_ns >> AVG_SHIFT) + (t >> AVG_SHIFT);
}

static int spin_pays(void)
{
	return (uint64_t)hits * (uint64_t)uls_cfg.spin_ns >= (uint64_t)spent_ns * HIT_ONE;
}

void uls_spin_start(struct uls_spin *s)
{
	uls_spin_start_fixed(s);
	if (open_spin) /* the last spin ended with its event */
		learn(1, spin_last - spin_began);
	open_spin = 0;
	if (s->calm || uls_cfg.spin_ns <= 0)
		return;
	if (spin_pays()) {
		gap = skip = 0;
	} else if (crowded_lately(s->start)) {
		if (skip) {
			skip--;
			s->calm = 1;
			return;
		}
		/* This wait probes; the next few do not spin. */
		gap = gap ? (gap * 2 + 1 < SKIP_MAX ? gap * 2 + 1 : SKIP_MAX) : 1;
		skip = gap;
		s->probe = 1;
	}
	open_spin = 1;
	spin_began = spin_last = s->start;
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
	atomic_store_explicit(&crowd_seen_at, now, memory_order_relaxed);
	open_spin = 0;
	return 0;
}

static int machine_crowded(void);

void uls_spin_assume_crowded(int crowded)
{
	crowd_forced = crowded;
}

/*
 * Was the machine crowded lately (ran_out, and the waits while spinning does not pay)?
 * One thread of the process looks at a time, at most once per CROWD_LOOK_NS (a look
 * reads a file under /proc, about 4 µs here: 64 single-threaded clients that looked once
 * a millisecond each spent a sixth of a core on it). A look counts one instant, and
 * both a crowded machine and a quiet one have instants of the other kind: 16 hotspot
 * clients of one server on these 2 CPUs found no crowd in one look in 5 to 7, and a
 * fabric ping-pong between two pinned processes found one in one look in 15 to 20 (a
 * kernel worker, the directory service). So the machine counts as crowded while most
 * recent looks found it so, or within CROWD_KEEP_NS of a contention. One look that
 * decided alone, kept 1 or 10 ms, let each hotspot client spin in vain for up to 20 ms
 * of a 2 s run; kept 50 ms, it held back the ping-pong's spins (round trips near the
 * budget) after each stray crowd: 12.6 against 10.1 µs, medians of 7.
 */
static int crowded_lately(uint64_t now)
{
	if (crowd_forced >= 0)
		return crowd_forced;
	uint64_t look = atomic_load_explicit(&crowd_look_at, memory_order_relaxed);
	if ((!look || (now > look && now - look >= CROWD_LOOK_NS)) &&
	    atomic_compare_exchange_strong_explicit(&crowd_look_at, &look, now,
						    memory_order_relaxed, memory_order_relaxed)) {
		/* Only the thread that won the look updates the share; the process's first look
		 * sets it alone (short runs of many processes learn at once). */
		uint32_t share = atomic_load_explicit(&crowd_share, memory_order_relaxed);
		uint32_t crowded = machine_crowded() ? HIT_ONE : 0;
		share = look ? share - (share >> AVG_SHIFT) + (crowded >> AVG_SHIFT) : crowded;
		atomic_store_explicit(&crowd_share, share, memory_order_relaxed);
	}
	if (atomic_load_explicit(&crowd_share, memory_order_relaxed) >= HIT_ONE / 2)
		return 1;
	uint64_t seen = atomic_load_explicit(&crowd_seen_at, memory_order_relaxed);
	return seen && (now <= seen || now - seen < CROWD_KEEP_NS);
}

/*
 * A bounded spin ran its budget out: the event it waits for came later than a spin lasts.
 * Where the machine is crowded, a core spinning in vain is a core the producer of that
 * event may need, and the run-out counts against spinning (spin_pays). Where it is not,
 * the spin cost no one anything and counts for nothing: a ping-pong whose round trip is
 * near the budget (the fabric's, 13 to 20 µs here) would otherwise run a few out, stop
 * spinning, and from then on find its peer asleep too, every spin running out (8 µs to
 * 58 µs, balanced profile, tcp provider).
 */
static int ran_out(uint64_t now)
{
	open_spin = 0;
	if (crowded_lately(now))
		learn(0, now - spin_began);
	return 0;
}

/*
 * More runnable threads on the machine than online CPUs, now? The fourth field of
 * /proc/loadavg counts the runnable ones (this thread included). A jump of the clock
 * alone does not say who had the core: an interrupt's softirq, a kernel worker or the
 * hypervisor (steal) take it from a spinner now and then on an idle machine too, and
 * sleeping then only adds a wake-up to the next message (on these 2-vCPU VMs about one
 * jump in 20 ms: a 64-byte ping-pong between two pinned processes slept in 2% of its
 * waits). Asked after a jump, so a few system calls at most once per 50 µs of spinning,
 * and by crowded_lately, at most every 5 ms; 1 (crowded, the safe answer) when the file
 * cannot be read.
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
	if (uls_read_small_file("/proc/loadavg", buf, sizeof(buf)) <= 0)
		return 1;
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
	spin_last = now;
	if (budget > 0)
		return now - s->start < (uint64_t)(s->probe ? PROBE_NS : budget) ? 1 : ran_out(now);
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
					 .hits = hits, .spent_ns = spent_ns, .skip = skip,
					 .pays = spin_pays()};
}

void uls_spin_forget(void)
{
	calm_until = 0;
	backoff_ns = BACKOFF_NS;
	hits = HIT_ONE;
	spent_ns = skip = gap = 0;
	open_spin = 0;
	atomic_store(&crowd_look_at, 0);
	atomic_store(&crowd_seen_at, 0);
	atomic_store(&crowd_share, 0);
}
