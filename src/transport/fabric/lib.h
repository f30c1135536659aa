/* SPDX-License-Identifier: MIT */
/*
 * libfabric, loaded when the first connection that may use it needs it, never linked: a
 * process that makes no such connection never maps it (Debian's build takes about 200 ms
 * to load, its psm libraries calibrating timers, and its providers initialise before any
 * filter applies: docs/protocol.md, 9.2).
 *
 * Only the few functions libfabric exports are called through this table; everything
 * else in its API is a static inline call through the objects' operation tables, which
 * the headers provide. Code here uses FI_VERSION(1, 17) and no call that 2.x removed.
 *
 * Every call into libfabric runs under the re-entry guard (os/guard.h): the providers'
 * own socket, poll and epoll calls reach the kernel untouched.
 */
#ifndef ULS_FAB_LIB_H
#define ULS_FAB_LIB_H

#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>

#define ULS_FAB_VERSION FI_VERSION(1, 17)

struct uls_fab_lib {
	int (*getinfo)(uint32_t version, const char *node, const char *service, uint64_t flags,
		       const struct fi_info *hints, struct fi_info **info);
	void (*freeinfo)(struct fi_info *info);
	struct fi_info *(*dupinfo)(const struct fi_info *info);
	int (*fabric)(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
	const char *(*strerror)(int errnum);
	uint32_t (*version)(void);
};

/* The table, valid once uls_fab_load returned 0. */
extern struct uls_fab_lib uls_fab;

/*
 * Loads libfabric (libfabric.so.1, found as the dynamic linker finds libraries) once per
 * process. Returns 0, or -1 with why (wlen bytes) saying what failed; the answer of the
 * first call stands.
 */
int uls_fab_load(char *why, size_t wlen);

/* Is libfabric mapped in this process (the library loaded, successfully or not)? */
int uls_fab_loaded(void);

/* libfabric's text for a negative result of its calls. */
const char *uls_fab_err(int r);

#endif
