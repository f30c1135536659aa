/* SPDX-License-Identifier: MIT */
/* The layout file: a filter group and its placement (format in docs/ulflow.md). */
#ifndef ULF_LAYOUT_H
#define ULF_LAYOUT_H

#include <stddef.h>

#define ULF_MAX_PROCS 64
#define ULF_MAX_FILTERS 64
#define ULF_MAX_STREAMS 128
#define ULF_MAX_COPIES 64
#define ULF_MAX_ARGS 32
#define ULF_NAME_MAX 32

struct ulf_kv {
	char *key, *val;
};

struct ulf_lproc {
	char name[ULF_NAME_MAX];
	char host[48];
};

struct ulf_lfilter {
	char name[ULF_NAME_MAX];
	char kind[ULF_NAME_MAX];
	int copies;
	int proc[ULF_MAX_COPIES]; /* the process of each copy */
	struct ulf_kv args[ULF_MAX_ARGS];
	int nargs;
	int nin, nout; /* ports, numbered in stream order */
};

struct ulf_lstream {
	int from, to;	       /* filters */
	int from_port, to_port; /* output port of from, input port of to */
	char policy[ULF_NAME_MAX];
	unsigned window;
	size_t block;
};

struct ulf_layout {
	size_t block;
	unsigned window;
	double timeout_s;
	unsigned coord_port;
	struct ulf_lproc procs[ULF_MAX_PROCS];
	int nprocs;
	struct ulf_lfilter filters[ULF_MAX_FILTERS];
	int nfilters;
	struct ulf_lstream streams[ULF_MAX_STREAMS];
	int nstreams;
	struct ulf_kv sets[ULF_MAX_ARGS];
	int nsets;
	char **works; /* one text per unit of work */
	int nworks;
};

/*
 * Parses text; on error returns -EINVAL with "NAME:LINE: message" in err. policy_ok
 * decides which policy names are known (NULL: any). The layout is always left
 * finalizable.
 */
int ulf_layout_parse(struct ulf_layout *l, const char *text, const char *name,
		     int (*policy_ok)(const char *policy), char *err, size_t errlen);
int ulf_layout_load(struct ulf_layout *l, const char *path, int (*policy_ok)(const char *),
		    char *err, size_t errlen);
void ulf_layout_fini(struct ulf_layout *l);
const char *ulf_kv_get(const struct ulf_kv *kv, int n, const char *key);

#endif
