/* SPDX-License-Identifier: MIT */
/*
 * Sleeping until the peer sends a wake-up byte. Several threads of one process may wait
 * on the same connection (one receiving, one sending): the byte stream cannot be shared,
 * so one thread (the leader) sleeps in the kernel and drains the bytes, and the others
 * (followers) sleep on a condition variable that the leader broadcasts after each wake-up.
 * Every waiter re-checks the rings afterwards; a waiter whose condition still does not
 * hold waits again, possibly as the new leader.
 *
 * waitq.c holds the queue and uls_wait; sigrestart.c the SA_RESTART emulation below.
 */
#ifndef ULS_WAIT_H
#define ULS_WAIT_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>

struct uls_conn;

struct uls_waitq {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int leader;   /* a thread sleeps in the kernel for this connection */
	int waiters;  /* threads inside uls_wait */
	unsigned gen; /* bumped after every wake-up */
};

void uls_waitq_init(struct uls_waitq *q);
void uls_waitq_fini(struct uls_waitq *q);

/*
 * Sleeps until the socket may have news (a wake-up byte, the peer's FIN, or data on
 * TCP), the deadline (ns on CLOCK_MONOTONIC, 0: none) or a signal. The leader drains
 * wake-up bytes when drain is set. Returns 0 (re-check), -EAGAIN (deadline) or -EINTR.
 */
int uls_wait(struct uls_conn *c, int fd, uint64_t deadline, int drain, int max_ms);

/* Wakes followers after someone else consumed wake-up bytes. */
void uls_waitq_kick(struct uls_waitq *q);

/*
 * SA_RESTART emulation: sigaction goes through uls_signal_install, which remembers the
 * program's handlers; after a sleep ended with EINTR, uls_signals_interrupt says whether
 * the signal that arrived would have interrupted the program's own call.
 */
int uls_signal_install(int sig, const struct sigaction *act, struct sigaction *old,
		       int (*real)(int, const struct sigaction *, struct sigaction *));
void uls_signal_clear(void);
int uls_signals_interrupt(void);
/*
 * Is SIGPIPE ignored (SIG_IGN) in this process? Asked of the kernel once, then kept up
 * to date by every action the program sets through the interposed calls (one set with a
 * raw rt_sigaction system call is not seen).
 */
int uls_sigpipe_ignored(void);

#endif
