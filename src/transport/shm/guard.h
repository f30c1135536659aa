/* SPDX-License-Identifier: MIT */
/*
 * The segment guard: a process whose segment file is shrunk under it (ftruncate by the
 * peer, or by any process of the user that owns the file) gets SIGBUS on its next access
 * to the lost pages. The guard's SIGBUS handler replaces that whole mapping with private
 * zero pages and lets the access run again, so only the connection breaks: the calls
 * that see it (uls_guard_was_cut) report ECONNRESET. SIGBUS from anywhere else goes to the
 * program's own disposition, which the guard keeps on the program's behalf.
 */
#ifndef ULS_GUARD_H
#define ULS_GUARD_H

#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>

typedef int (*uls_sigaction_fn)(int, const struct sigaction *, struct sigaction *);

/* Installs the SIGBUS handler through real (libc's sigaction). Returns 0 or -errno. */
int uls_guard_install(uls_sigaction_fn real);

/*
 * The program's sigaction(SIGBUS, act, old) while the guard is installed: the program's
 * action is recorded (and reported back) instead of replacing the guard's. Returns 0 when
 * the guard handled it (*ret is sigaction's result), -1 to let the caller pass it on.
 */
int uls_guard_sigaction(const struct sigaction *act, struct sigaction *old, int *ret);

/*
 * If addr lies in this process's mapping of a ulsock segment file, replaces the whole
 * mapping with private zero pages and records its start. Async-signal-safe. 1 if so.
 */
int uls_guard_cut(const void *addr);

/*
 * Records a segment mapping that /proc/self/maps does not name (an unnamed file's), for
 * uls_guard_cut. Returns 0, or -ENOSPC when NOTE_SLOTS (1024) are in use: then the caller
 * must not use such a mapping. uls_guard_forget drops it.
 */
int uls_guard_note(const void *base, size_t len);

/* Is a slot free for uls_guard_note? */
int uls_guard_note_room(void);

/* How many mappings were cut so far: 0 nearly always, so callers look at this first. */
extern _Atomic unsigned uls_guard_cuts;

/* Was the mapping that starts at base cut? */
int uls_guard_was_cut(const void *base);

static inline int uls_guard_cut_at(const void *base)
{
	return atomic_load_explicit(&uls_guard_cuts, memory_order_relaxed) &&
	       uls_guard_was_cut(base);
}

/*
 * exec resets handlers to the default but keeps an ignored signal ignored: before exec
 * the program's own SIG_IGN goes back to the kernel; if exec fails the guard returns.
 */
void uls_guard_exec_begin(int spawn);
void uls_guard_exec_failed(void);

/* The mapping at base is going away: forget it was noted or cut (its address may return). */
void uls_guard_forget(const void *base);

#endif
