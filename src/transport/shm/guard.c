/* SPDX-License-Identifier: MIT */
#include "guard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "segment.h"
#include "../../os/libc.h"

_Atomic unsigned uls_guard_cuts;

/* Starts of the mappings cut so far; a slot is 0 when free. */
#define CUT_SLOTS 64
static _Atomic uintptr_t cut_base[CUT_SLOTS];

/*
 * Segment mappings that /proc/self/maps does not name: a client segment that began as an
 * unnamed spare keeps the name it was opened by there, "/dev/shm/#<inode> (deleted)".
 * A slot is claimed by its start, then given its length; 0 is free.
 */
#define NOTE_SLOTS 1024
static struct {
	_Atomic uintptr_t lo;
	_Atomic size_t len;
} noted[NOTE_SLOTS];
static _Atomic int noted_top;  /* slots at and above are free */
static _Atomic int noted_live; /* slots in use */

static uls_sigaction_fn real_sigaction;
static _Atomic int installed;

/*
 * The program's own SIGBUS action. It is written by sigaction calls (rare) and read by
 * the handler; two copies and an index, so the handler never reads a half-written one.
 */
static struct sigaction app_act[2];
static _Atomic int app_cur;

/* ---- finding the mapping (async-signal-safe: raw system calls, no allocation) ---- */

static int hex_value(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	return -1;
}

/* Parses "start-end ..." at the head of a /proc/self/maps line. */
static int parse_range(const char *p, const char *end, uintptr_t *lo, uintptr_t *hi)
{
	uintptr_t v[2] = {0, 0};

	for (int k = 0; k < 2; k++) {
		int digits = 0, h;
		while (p < end && (h = hex_value(*p)) >= 0) {
			v[k] = v[k] << 4 | (uintptr_t)h;
			p++;
			digits++;
		}
		if (!digits || p >= end || *p != (k == 0 ? '-' : ' '))
			return 0;
		p++;
	}
	*lo = v[0];
	*hi = v[1];
	return 1;
}

static int line_names_segment(const char *p, const char *end)
{
	static const char prefix[] = ULS_SEG_PATH_PREFIX;
	size_t n = sizeof(prefix) - 1;

	for (; p + n <= end; p++)
		if (*p == '/' && memcmp(p, prefix, n) == 0)
			return 1;
	return 0;
}

int uls_guard_note_room(void)
{
	return atomic_load_explicit(&noted_live, memory_order_relaxed) < NOTE_SLOTS;
}

int uls_guard_note(const void *base, size_t len)
{
	if (!uls_guard_note_room())
		return -ENOSPC;
	for (int i = 0; i < NOTE_SLOTS; i++) {
		uintptr_t zero = 0;
		if (!atomic_compare_exchange_strong(&noted[i].lo, &zero, (uintptr_t)base))
			continue;
		atomic_store(&noted[i].len, len);
		atomic_fetch_add(&noted_live, 1);
		int top = atomic_load(&noted_top);
		while (top < i + 1 && !atomic_compare_exchange_weak(&noted_top, &top, i + 1))
			;
		return 0;
	}
	return -ENOSPC;
}

static int find_noted(uintptr_t addr, uintptr_t *lo, uintptr_t *hi)
{
	int top = atomic_load(&noted_top);

	for (int i = 0; i < top; i++) {
		uintptr_t a = atomic_load(&noted[i].lo);
		size_t n = atomic_load(&noted[i].len);
		if (a && n && addr - a < n) {
			*lo = a;
			*hi = a + n;
			return 1;
		}
	}
	return 0;
}

/* The segment mapping of this process that holds addr: 1 and its range, or 0. */
static int find_mapping(uintptr_t addr, uintptr_t *lo, uintptr_t *hi)
{
	if (find_noted(addr, lo, hi))
		return 1;

	char buf[4096];
	size_t have = 0;
	int found = 0, skipping = 0;
	long fd = uls_syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	for (;;) {
		long n = uls_syscall(SYS_read, (int)fd, buf + have, sizeof(buf) - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		have += (size_t)n;
		char *line = buf, *nl;
		while ((nl = memchr(line, '\n', have - (size_t)(line - buf))) != NULL) {
			uintptr_t a, b;
			if (!skipping && parse_range(line, nl, &a, &b) && addr >= a && addr < b) {
				found = line_names_segment(line, nl);
				if (found) {
					*lo = a;
					*hi = b;
				}
				goto done;
			}
			skipping = 0;
			line = nl + 1;
		}
		/* Keep the unfinished line; one longer than the buffer is skipped. */
		have -= (size_t)(line - buf);
		memmove(buf, line, have);
		if (have == sizeof(buf)) {
			have = 0;
			skipping = 1;
		}
	}
done:
	uls_syscall(SYS_close, (int)fd);
	return found;
}

int uls_guard_cut(const void *addr)
{
	uintptr_t lo, hi;

	if (!find_mapping((uintptr_t)addr, &lo, &hi))
		return 0;
	/* The same addresses, now private zero pages: the faulting access runs again. */
	if (mmap((void *)lo, hi - lo, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
		return 0;
	for (int i = 0; i < CUT_SLOTS; i++) {
		uintptr_t zero = 0;
		if (atomic_compare_exchange_strong(&cut_base[i], &zero, lo))
			break;
	}
	/* With every slot taken the range still reads as zeros: the ring checks catch it. */
	atomic_fetch_add(&uls_guard_cuts, 1);
	return 1;
}

int uls_guard_was_cut(const void *base)
{
	for (int i = 0; i < CUT_SLOTS; i++)
		if (atomic_load_explicit(&cut_base[i], memory_order_relaxed) == (uintptr_t)base)
			return base != NULL;
	return 0;
}

void uls_guard_forget(const void *base)
{
	if (!base)
		return;
	int top = atomic_load_explicit(&noted_top, memory_order_relaxed);
	for (int i = 0; i < top; i++) {
		if (atomic_load_explicit(&noted[i].lo, memory_order_relaxed) == (uintptr_t)base) {
			atomic_store(&noted[i].len, 0);
			atomic_store(&noted[i].lo, 0);
			atomic_fetch_sub(&noted_live, 1);
			break;
		}
	}
	if (!atomic_load_explicit(&uls_guard_cuts, memory_order_relaxed))
		return;
	for (int i = 0; i < CUT_SLOTS; i++) {
		uintptr_t b = (uintptr_t)base;
		atomic_compare_exchange_strong(&cut_base[i], &b, 0);
	}
}

/* ---- the handler ---- */

static void handler(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;

	if (si && si->si_code > 0 && uls_guard_cut(si->si_addr)) {
		errno = saved;
		return;
	}
	struct sigaction *a = &app_act[atomic_load(&app_cur)];
	if ((a->sa_flags & SA_SIGINFO) && a->sa_sigaction) {
		a->sa_sigaction(sig, si, uc);
	} else if (a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN) {
		a->sa_handler(sig);
	} else if (a->sa_handler == SIG_DFL || (si && si->si_code > 0)) {
		/* The default action: a fault runs again and kills, a sent signal is re-raised
		 * (blocked until this handler returns). An ignored fault cannot be ignored. */
		struct sigaction dfl;
		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		real_sigaction(SIGBUS, &dfl, NULL);
		if (!si || si->si_code <= 0)
			raise(SIGBUS);
	}
	errno = saved;
}

static struct sigaction guard_act(void)
{
	struct sigaction act;

	memset(&act, 0, sizeof(act));
	act.sa_sigaction = handler;
	act.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
	sigemptyset(&act.sa_mask);
	return act;
}

/* Is the kernel's SIGBUS action still the guard's? */
static int guard_in_place(void)
{
	struct sigaction cur;

	return real_sigaction(SIGBUS, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
	       cur.sa_sigaction == handler;
}

int uls_guard_install(uls_sigaction_fn real)
{
	struct sigaction act = guard_act(), old;

	if (atomic_load(&installed))
		return 0;
	if (!real)
		return -ENOSYS;
	real_sigaction = real;
	if (real(SIGBUS, &act, &old) < 0)
		return -errno;
	/* A runtime that keeps SIGBUS to itself (a sanitizer) may have refused quietly. */
	if (!guard_in_place()) {
		real(SIGBUS, &old, NULL);
		return -EPERM;
	}
	/* Whatever was there before (SIG_DFL, or a handler from before ulsock loaded). */
	app_act[0] = old;
	atomic_store(&app_cur, 0);
	atomic_store(&installed, 1);
	return 0;
}

void uls_guard_exec_begin(int spawn)
{
	(void)spawn; /* posix_spawn's child takes the disposition from here too */
	if (!atomic_load(&installed))
		return;
	struct sigaction *a = &app_act[atomic_load(&app_cur)];
	if (!(a->sa_flags & SA_SIGINFO) && a->sa_handler == SIG_IGN)
		real_sigaction(SIGBUS, a, NULL);
}

void uls_guard_exec_failed(void)
{
	if (!atomic_load(&installed))
		return;
	struct sigaction act = guard_act();
	real_sigaction(SIGBUS, &act, NULL);
}

int uls_guard_sigaction(const struct sigaction *act, struct sigaction *old, int *ret)
{
	if (!atomic_load(&installed))
		return -1;
	/* signal() and friends reach the kernel past the interposer: once the program
	 * replaced the guard that way, its actions go straight to the kernel again. */
	if (!guard_in_place()) {
		atomic_store(&installed, 0);
		return -1;
	}
	int cur = atomic_load(&app_cur);
	if (old)
		*old = app_act[cur];
	if (act) {
		app_act[!cur] = *act;
		atomic_store(&app_cur, !cur);
	}
	*ret = 0;
	return 0;
}
