/* SPDX-License-Identifier: MIT */
/*
 * The calls that set signal actions. ulsock needs to see every handler the program
 * installs: its waits emulate SA_RESTART (core/sigrestart.c), and SIGBUS belongs to the segment
 * guard, which keeps the program's action for it (transport/shm/guard.h). glibc's
 * signal(), bsd_signal(), sysv_signal(), siginterrupt(), sigset() and sigignore() reach
 * the kernel through its internal sigaction, past the sigaction interposer, so they are
 * interposed too and rebuilt on sigaction with the semantics glibc documents.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "preload.h"
#include "../core/wait.h"

/* Not declared by <signal.h> in every feature set. */
sighandler_t bsd_signal(int sig, sighandler_t handler);

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

/* A program's constructor may install handlers before the library's has run. */
static sigaction_fn real_sigaction(void)
{
	uls_libc_init();
	return uls_libc.sigaction;
}

ULS_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	/* A vfork child's handlers are its own; the tables here are the parent's. */
	if (uls_vfork_child())
		return real_sigaction()(sig, act, old);
	return uls_signal_install(sig, act, old, real_sigaction());
}

/* Signals siginterrupt() made interrupting: signal() installs them without SA_RESTART. */
static _Atomic unsigned long long interrupting;

static int sig_valid(int sig)
{
	return sig > 0 && sig < 64 + 1;
}

static sighandler_t install(int sig, sighandler_t handler, int flags, int mask_self)
{
	struct sigaction act, old;

	if (handler == SIG_ERR || !sig_valid(sig)) {
		errno = EINVAL;
		return SIG_ERR;
	}
	memset(&act, 0, sizeof(act));
	act.sa_handler = handler;
	sigemptyset(&act.sa_mask);
	if (mask_self)
		sigaddset(&act.sa_mask, sig);
	act.sa_flags = flags;
	if (uls_vfork_child() ? real_sigaction()(sig, &act, &old) < 0
			      : uls_signal_install(sig, &act, &old, real_sigaction()) < 0)
		return SIG_ERR;
	return old.sa_handler;
}

/* BSD semantics, glibc's signal(): the handler stays, the signal is blocked while it
 * runs, and interrupted calls restart unless siginterrupt() said otherwise. */
static sighandler_t bsd_install(int sig, sighandler_t handler)
{
	int restart = sig_valid(sig) && !(atomic_load(&interrupting) >> (sig - 1) & 1);

	return install(sig, handler, restart ? SA_RESTART : 0, 1);
}

ULS_EXPORT sighandler_t signal(int sig, sighandler_t handler)
{
	return bsd_install(sig, handler);
}

ULS_EXPORT sighandler_t bsd_signal(int sig, sighandler_t handler)
{
	return bsd_install(sig, handler);
}

/* System V semantics: the action resets to the default when the handler runs, the signal
 * is not blocked meanwhile, and interrupted calls fail with EINTR. */
ULS_EXPORT sighandler_t sysv_signal(int sig, sighandler_t handler)
{
	return install(sig, handler, SA_RESETHAND | SA_NODEFER, 0);
}

/*
 * System V's sigset(): SIG_HOLD adds the signal to the thread's mask and changes nothing
 * else; any other disposition is installed (no SA_RESTART, nothing blocked while the
 * handler runs) and the signal leaves the mask. Returns SIG_HOLD when the signal was
 * blocked before the call, else the disposition it had.
 */
ULS_EXPORT sighandler_t sigset(int sig, sighandler_t disp)
{
	sigset_t one, before;
	struct sigaction old;

	if (disp == SIG_ERR || !sig_valid(sig)) {
		errno = EINVAL;
		return SIG_ERR;
	}
	sigemptyset(&one);
	sigaddset(&one, sig);
	if (disp == SIG_HOLD) {
		if (sigprocmask(SIG_BLOCK, &one, &before) < 0 ||
		    uls_signal_install(sig, NULL, &old, real_sigaction()) < 0)
			return SIG_ERR;
		return sigismember(&before, sig) ? SIG_HOLD : old.sa_handler;
	}
	sighandler_t prev = install(sig, disp, 0, 0);
	if (prev == SIG_ERR || sigprocmask(SIG_UNBLOCK, &one, &before) < 0)
		return SIG_ERR;
	return sigismember(&before, sig) ? SIG_HOLD : prev;
}

/* System V's sigignore(): SIG_IGN, as sigset(sig, SIG_IGN) would install it. */
ULS_EXPORT int sigignore(int sig)
{
	return install(sig, SIG_IGN, 0, 0) == SIG_ERR ? -1 : 0;
}

ULS_EXPORT int siginterrupt(int sig, int flag)
{
	struct sigaction act;

	if (!sig_valid(sig)) {
		errno = EINVAL;
		return -1;
	}
	if (uls_signal_install(sig, NULL, &act, real_sigaction()) < 0)
		return -1;
	if (flag) {
		atomic_fetch_or(&interrupting, 1ull << (sig - 1));
		act.sa_flags &= ~SA_RESTART;
	} else {
		atomic_fetch_and(&interrupting, ~(1ull << (sig - 1)));
		act.sa_flags |= SA_RESTART;
	}
	return uls_signal_install(sig, &act, NULL, real_sigaction());
}
