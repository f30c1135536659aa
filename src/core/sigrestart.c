/* SPDX-License-Identifier: MIT */
/* SA_RESTART emulation (wait.h): the program's handlers behind a trampoline. */
#include "wait.h"

#include <stdatomic.h>

#include "transport.h"
#include "../os/libc.h"

/*
 * SA_RESTART emulation. ulsock sleeps in poll(), which the kernel never restarts, while
 * the program's recv or send would have been restarted for a handler installed with
 * SA_RESTART. sigaction() is interposed: handlers run through a trampoline that records
 * which signal arrived, so that an interrupted wait can look up that handler's flags.
 */
#define NSIG_TRACKED 65
static struct sigaction app_act[NSIG_TRACKED];
static _Atomic int tracked[NSIG_TRACKED];
static __thread int last_signal;
/* SIGPIPE's action: -1 not asked yet, 1 SIG_IGN, 0 anything else. */
static _Atomic int pipe_ignored = -1;

static int ignores(const struct sigaction *act)
{
	return !(act->sa_flags & SA_SIGINFO) && act->sa_handler == SIG_IGN;
}

int uls_sigpipe_ignored(void)
{
	int v = atomic_load_explicit(&pipe_ignored, memory_order_relaxed);
	struct sigaction cur;

	if (v >= 0)
		return v;
	/* The real call: the interposed one would report the trampoline's flags too. */
	if (!uls_libc.sigaction || uls_libc.sigaction(SIGPIPE, NULL, &cur) != 0)
		return 0;
	/* A program's sigaction that raced with this question wrote its own value: keep it. */
	v = ignores(&cur);
	int expected = -1;
	atomic_compare_exchange_strong(&pipe_ignored, &expected, v);
	return atomic_load(&pipe_ignored);
}

static void trampoline(int sig, siginfo_t *si, void *uc)
{
	last_signal = sig;
	if (sig <= 0 || sig >= NSIG_TRACKED)
		return;
	if (app_act[sig].sa_flags & SA_SIGINFO)
		app_act[sig].sa_sigaction(sig, si, uc);
	else if (app_act[sig].sa_handler != SIG_IGN && app_act[sig].sa_handler != SIG_DFL)
		app_act[sig].sa_handler(sig);
}

int uls_signal_install(int sig, const struct sigaction *act, struct sigaction *old,
		       int (*real)(int, const struct sigaction *, struct sigaction *))
{
	struct sigaction mine, prev, was;
	int r;

	/* A signal a transport keeps (SIGBUS for shared memory): it records the program's
	 * action itself. */
	if (uls_transports_sigaction(sig, act, old, &r) == 0)
		return r;

	if (sig <= 0 || sig >= NSIG_TRACKED || sig == SIGKILL || sig == SIGSTOP)
		return real(sig, act, old);
	/* Before the call, so that a wake-up in between holds the signal (wakepipe.c). */
	if (sig == SIGPIPE && act && !ignores(act))
		atomic_store(&pipe_ignored, 0);
	/* The program's action behind the trampoline before this call changes it. */
	was = app_act[sig];
	if (!act || (!(act->sa_flags & SA_SIGINFO) &&
		     (act->sa_handler == SIG_IGN || act->sa_handler == SIG_DFL))) {
		r = real(sig, act, &prev);
		if (r == 0 && act)
			atomic_store(&tracked[sig], 0);
	} else {
		mine = *act;
		mine.sa_flags |= SA_SIGINFO;
		mine.sa_sigaction = trampoline;
		app_act[sig] = *act;
		r = real(sig, &mine, &prev);
		if (r == 0)
			atomic_store(&tracked[sig], 1);
		else
			app_act[sig] = was;
	}
	if (r == 0 && sig == SIGPIPE && act && ignores(act))
		atomic_store(&pipe_ignored, 1);
	if (r == 0 && old) {
		/* Report the program's own handler, never the trampoline (and never the one
		 * this call just installed: replacing a handler used to return the new one). */
		*old = prev;
		if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction == trampoline)
			*old = was;
	}
	return r;
}

void uls_signal_clear(void)
{
	last_signal = 0;
}

int uls_signals_interrupt(void)
{
	int sig = last_signal;

	/* A handler ulsock did not install (signal(): BSD semantics) restarts. */
	if (sig <= 0 || sig >= NSIG_TRACKED || !atomic_load(&tracked[sig]))
		return 0;
	return !(app_act[sig].sa_flags & SA_RESTART);
}
