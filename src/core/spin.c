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
		return now - s->start < (uint64_t)budget;
	if (now - s->last_yield < YIELD_EVERY_NS)
		return 1;
	sched_yield();
	s->last_yield = s->last = uls_now_ns();
	if (s->last - now > PREEMPTED_NS)
		return contended(s->last);
	return 1;
}
