/* SPDX-License-Identifier: MIT */
/*
 * The library's own descriptors: the log file, the `ulsock stat` record, the sock_diag
 * socket, the wake-up bells of threads and epoll sets (bell.h), and the spare segment. They sit at ULS_OWN_FD_MIN and above, close-on-exec, and
 * the program cannot take them from under the library. Programs close numbers they never
 * opened (a daemon's loop over every descriptor, closefrom(), close_range()); if such a
 * number went back to the kernel and came back as one of the program's files, the library
 * would write its log or its netlink queries into that file, or close it after a fork.
 * So close() of an own descriptor succeeds without closing it, closefrom() and
 * close_range() close around them (preload/socket.c), and dup2()/dup3() onto one first
 * move it to another number. An exec drops them all.
 *
 * The owner keeps the number in its own int; a move rewrites it. A thread of the library
 * using the descriptor while another thread of the program dup2()s onto it may still use
 * the old number once: a race only a program that replaces numbers it does not own can
 * start.
 */
#ifndef ULS_OWNFD_H
#define ULS_OWNFD_H

#define ULS_OWN_FD_MIN 900

/*
 * Moves fd to a close-on-exec number >= ULS_OWN_FD_MIN (it stays where it is when none is
 * free), records that *where holds it, and returns the number, also stored in *where.
 */
int uls_own_fd_take(int fd, int *where);

/* The library closes its descriptor *where and sets *where to -1. */
void uls_own_fd_close(int *where);

/* The library gives up *where without closing it (a fork child's copy it closes itself). */
void uls_own_fd_forget(int *where);

/* Is fd one of the library's own descriptors? */
int uls_own_fd_is(int fd);

/* Before the program's dup2/dup3 onto fd: moves an own descriptor at fd out of the way. */
void uls_own_fd_evict(int fd);

/* The own descriptors within [first, last], ascending; returns how many (at most max). */
int uls_own_fds_in(unsigned first, unsigned last, int *out, int max);

/* How many own descriptors there are (closefrom sizes its list with it). */
int uls_own_fd_count(void);

/* In a fork child, before anything else: the registry's lock may have been held. */
void uls_own_fd_atfork_child(void);

#endif
