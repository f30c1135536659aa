/* SPDX-License-Identifier: MIT */
/*
 * The re-entry guard. While a thread runs ulsock's own code that may call out to a
 * library (its start-up, and a transport's library such as libfabric, whose providers
 * open sockets, poll and use epoll of their own), the interposed socket, descriptor,
 * readiness and data calls that come back through the library's exports go to the
 * kernel untouched: they are the library's, never the program's, and must not be
 * classified, accelerated or re-entered. A counter, so that such scopes nest.
 */
#ifndef ULS_OS_GUARD_H
#define ULS_OS_GUARD_H

extern __thread unsigned uls_inside __attribute__((tls_model("initial-exec")));

static inline void uls_inside_begin(void)
{
	uls_inside++;
}

static inline void uls_inside_end(void)
{
	uls_inside--;
}

/* 1 when this thread is inside ulsock: an interposed call passes straight through. */
static inline int uls_is_inside(void)
{
	return __builtin_expect(uls_inside != 0, 0);
}

#endif
