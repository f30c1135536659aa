/* SPDX-License-Identifier: MIT */
/*
 * Bells: how one thread tells another that it took a wake-up byte the other may have
 * been waiting for.
 *
 * A peer's wake-up byte says "the ring moved"; whoever reads it off the kernel socket
 * consumes it. In a process with several threads sleeping on one connection (a reader
 * in poll for POLLIN, a writer in poll for POLLOUT, as runtimes do for sockets with
 * timeouts; or two epoll sets holding the same socket) one of them may consume the byte
 * that the other had armed for, between the other's last look at the ring and its entry
 * into the kernel: the other then sleeps for good. So each such sleeper brings a bell
 * (a pipe in its kernel wait set: the thread's own for poll, select and blocking
 * calls, the set's for epoll) and registers it with every connection it arms, before it
 * arms; whoever consumes wake-up bytes of a connection rings every other bell registered
 * there. A sleeper registered too late to be rung looked at the ring after the byte was
 * consumed, and so after the ring moved.
 *
 * A registration is only valid for the wait that made it: each bell counts its waits,
 * and a registration holds the count it was made at. Stale ones are ignored and
 * reused, so waits never deregister. Single-threaded processes register no bells.
 *
 * A bell is a pipe, and a peer process may open it through /proc/PID/fd and write it
 * instead of sending a wake-up byte on TCP (transport/shm/wakepipe.h): so every sleeper
 * in poll, select or epoll_wait, single-threaded ones too, has one in its wait set, and
 * arms its connections with it (uls_conn_arm). With ULSOCK_TRUST_UIDS set, bells are
 * FIFOs with names in /dev/shm that the trusted users may write, since /proc does not let
 * them open another user's descriptors.
 */
#ifndef ULS_BELL_H
#define ULS_BELL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* glibc clears it for good when the process makes its first thread. */
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>
#define ULS_SINGLE_THREADED() (__libc_single_threaded != 0)
#else
#define ULS_SINGLE_THREADED() 0
#endif

#define ULS_BELL_SLOTS 8

/* The bells registered with one connection: (bell index + 1) << 48 | wait count. */
struct uls_bells {
	_Atomic uint64_t slot[ULS_BELL_SLOTS];
};

/* The bell of the wait this thread is in (its consumption never rings it), or -1. */
extern __thread int uls_bell_current __attribute__((tls_model("initial-exec")));

/* This thread's bell, made on first use; -1 when none can be had. */
int uls_bell_thread(void);
/* A bell for an epoll set; -1 when none can be had. uls_bell_put gives it back. */
int uls_bell_get(void);
void uls_bell_put(int bell);
/* The read end of a bell's pipe, for a kernel wait set. */
int uls_bell_fd(int bell);
/*
 * Where a peer finds bell's pipe: *who = pid << 32 | read end's number, *ino its inode;
 * for a bell with a name (ULSOCK_TRUST_UIDS set), pid << 32 | ULS_BELL_NAMED | bell's
 * number, the name uls_bell_path's. 0 when bell is none, or its name is gone.
 */
int uls_bell_pipe(int bell, uint64_t *who, uint64_t *ino);

#define ULS_BELL_DIR "/dev/shm"
#define ULS_BELL_PREFIX "ulsock-bell."
#define ULS_BELL_NAMED (1u << 31)
/* A named bell's path: ULS_BELL_DIR/ULS_BELL_PREFIX<pid>.<idx>. */
void uls_bell_path(char *buf, size_t len, uint32_t pid, uint32_t idx);
/* The process ends or execs: the bells' names go (async-signal-safe). */
void uls_bell_unname(void);
/*
 * At start-up: names of this user's bells whose process is gone go. The shm transport's
 * walk of /dev/shm at start-up (uls_seg_sweep) hands each name to uls_bell_sweep_one,
 * which returns 1 when it was a bell's (gone or not); uls_bell_sweep walks on its own.
 */
int uls_bell_sweep_one(const char *name);
void uls_bell_sweep(void);

/*
 * A new wait of bell starts: rings from earlier waits are cleared and their registrations
 * go stale. Call before registering and arming.
 */
void uls_bell_begin(int bell);
/* The bell rang during the wait (the kernel said its fd was readable): clear it. */
void uls_bell_clear(int bell);

/*
 * Registers bell's current wait with a connection; 0 when all slots hold live waits of
 * other bells (the caller then bounds its sleep).
 */
int uls_bells_add(struct uls_bells *b, int bell);
/* Is another bell's wait than bell's registered with the connection? */
int uls_bells_others(struct uls_bells *b, int bell);
/* After wake-up bytes of the connection were consumed: rings the others' bells. */
void uls_bells_ring_others(struct uls_bells *b);
/* In a fork child: registrations name the parent's bells. */
void uls_bells_reset(struct uls_bells *b);
/* In a fork child: every bell so far is shared with the parent; make new ones. */
void uls_bell_atfork_child(void);

#endif
